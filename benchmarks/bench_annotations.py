"""Hostile annotations: decision time with the worst affinity the limits allow, and the real
daemon's resident memory over thousands of create/remove cycles with distinct large annotations.

* Decisions: `Policy.create` of a container whose affinity annotation is the most expensive one
  the default limits allow (`hostile.worst_affinity`: 8 rules, each scope a glob pattern of 253
  characters with 4 wildcards, each match a NotIn of 16 names), with `live` containers of
  distinct names and long distinct label values already placed, so every pattern meets every
  distinct value and rescans it. Wall-clock p50/p99 and, for a shared machine, the CPU time of
  the deciding thread. Three modes: `cached` (the same annotation each time, as for
  the replicas of one deployment), `distinct` (a new annotation each time: the parse is in the
  time) and `none` (no annotation, the baseline). Each created container is released again.
* `--rss`: the real `nri-topology run` process through the test runtime and a unix socket:
  VmRSS after start-up, then after every `--report` cycles of create and remove of a pod with
  ~45 KB of distinct annotations (a 15 KB affinity, a cold start, a resources claim; every tenth
  cycle a hostile value of issue 10 that is refused).

Run: ``.venv/bin/python benchmarks/bench_annotations.py [--machine synthetic-256] [--live 1000]
[--samples 300]`` and ``.venv/bin/python benchmarks/bench_annotations.py --rss [--cycles 3000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.latency import median_quantiles
from benchmarks.socket_path import real_daemon, rss_kib
from benchmarks.workload import MACHINES, load_machine, sysfs_root
from nri_topology.nri import api_pb2
from nri_topology.policy.intake.annotations import DOMAIN, RESOURCES_KEY
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, PodInfo, Resources
from nri_topology.testing import hostile
from nri_topology.testing.runtime import PluginError


def _live(i: int) -> tuple[PodInfo, ContainerInfo]:
    pod = PodInfo(
        id=f"lp{i}",
        name=f"live-{i}",
        namespace=f"ns{i % 20}",
        cgroup_parent=f"/kubepods/burstable/podl{i}",
    )
    ctr = ContainerInfo(
        id=f"l{i}",
        pod_id=pod.id,
        name=f"c-{i:05d}",
        labels={"app": "a" * 58 + f"{i:05d}"},  # 63 characters, the most a label value has
        resources=Resources(cpu_shares=102),
    )
    return pod, ctr


def worst(salt: int | None = None) -> str:
    """The most expensive affinity the default limits allow; `salt` makes it distinct."""
    text = hostile.worst_affinity(container="probe")
    return text if salt is None else f"{text}# {salt}\n"


def decisions(machine_name: str, live: int, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        machine = load_machine(machine_name, Path(tmp))
    policy = Policy(machine, Options())
    for i in range(live):
        policy.create(*_live(i))
    out: dict[str, Any] = {"machine": machine_name, "live": live, "annotation_bytes": len(worst())}
    for mode in ("none", "cached", "distinct"):
        blocks: list[list[int]] = []
        cpu_blocks: list[list[int]] = []
        n = 0
        for _ in range(3):
            block: list[int] = []
            cpu: list[int] = []
            for _ in range(samples):
                n += 1
                annotations = {}
                if mode != "none":
                    annotations[hostile.AFFINITY] = worst(n if mode == "distinct" else None)
                pod = PodInfo(
                    id=f"pp{n}",
                    name=f"probe-{n}",
                    namespace="tenant",
                    annotations=annotations,
                    cgroup_parent=f"/kubepods/burstable/podp{n}",
                )
                ctr = ContainerInfo(
                    id=f"p{n}", pod_id=pod.id, name="probe", resources=Resources(cpu_shares=102)
                )
                gc.disable()
                started, cpu_started = time.perf_counter_ns(), time.thread_time_ns()
                decision = policy.create(pod, ctr)
                block.append(time.perf_counter_ns() - started)
                cpu.append(time.thread_time_ns() - cpu_started)
                gc.enable()
                policy.release(decision.container_id)
            blocks.append(block)
            cpu_blocks.append(cpu)
        out[mode] = median_quantiles(blocks)
        # CPU time of the deciding thread: what the decision costs when the machine is busy
        cpu_q = median_quantiles(cpu_blocks)
        out[mode] |= {"cpu_p50_ms": cpu_q["p50_ms"], "cpu_p99_ms": cpu_q["p99_ms"]}
    return out


def large_annotations(i: int) -> dict[str, str]:
    """~45 KB of distinct, valid annotations (every tenth set a hostile, refused value)."""
    values = ", ".join(f'"{i:08d}-{v:02d}-' + "x" * 200 + '"' for v in range(16))
    rule = f"  - match: {{key: labels/app, operator: In, values: [{values}]}}\n"
    claim = {"containers": {"app": {"requests": {"cpu": "100m", "memory": f"{i % 97 + 1}Mi"}}}}
    out = {
        hostile.AFFINITY: "app:\n" + rule * 3,
        f"cold-start.{DOMAIN}": f"duration: {i % 50}s",
        RESOURCES_KEY: json.dumps(claim) + " " * 16000,
    }
    if i % 10 == 9:
        name = sorted(hostile.CASES)[i // 10 % len(hostile.CASES)]
        out |= hostile.CASES[name]
    return out


async def _rss(sysfs: Path, cycles: int, report: int) -> dict[str, Any]:
    points: list[dict[str, float]] = []
    refused = 0
    async with real_daemon(sysfs, "error") as (peer, proc):
        points.append({"cycles": 0, "rss_mb": round(rss_kib(proc.pid) / 1024, 1)})
        for i in range(cycles):
            pod = api_pb2.PodSandbox(
                id=f"p{i}", name=f"pod{i}", namespace="tenant", uid=f"u{i}"
            )
            pod.annotations.update(large_annotations(i))
            pod.linux.cgroup_parent = f"/kubepods/burstable/podu{i}"
            ctr = api_pb2.Container(
                id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
            )
            ctr.linux.resources.cpu.shares.value = 102
            await peer.run_pod_sandbox(pod)
            try:
                await peer.create_container(pod, ctr)
                await peer.stop_container(pod, ctr)
                await peer.remove_container(pod, ctr)
            except PluginError:
                refused += 1
            await peer.remove_pod_sandbox(pod)
            if (i + 1) % report == 0:
                await asyncio.sleep(0.2)
                points.append({"cycles": i + 1, "rss_mb": round(rss_kib(proc.pid) / 1024, 1)})
    return {
        "annotation_bytes": sum(len(v) for v in large_annotations(0).values()),
        "cycles": cycles,
        "refused": refused,
        "rss": points,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machine", choices=MACHINES, default="synthetic-256")
    parser.add_argument("--live", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=300, help="per block; three blocks")
    parser.add_argument("--rss", action="store_true", help="measure the real process's memory")
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--report", type=int, default=500, help="RSS every this many cycles")
    args = parser.parse_args(argv)
    if args.rss:
        with tempfile.TemporaryDirectory() as tmp:
            sysfs = sysfs_root(args.machine, Path(tmp))
            result = asyncio.run(_rss(sysfs, args.cycles, args.report))
    else:
        result = decisions(args.machine, args.live, args.samples)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
