"""What the runtime sees through the NRI socket: round trips, Synchronize, and the daemon's memory.

* CreateContainer round trip: the runtime-side test peer sends CreateContainer through a real unix
  socket to our plugin (real policy, checkpoint written after every change, as in production),
  with `live` containers already running; the same requests to the no-op plugin of
  `bench_roundtrip.py` give the protocol floor. Probe containers are stopped and removed between
  samples (not timed), so every sample sees the same fill. The time includes the test peer
  merging and applying the updates of other containers that ride on the reply, as a runtime
  must; it keeps no record of requests and replies, which no runtime keeps.
* Synchronize: a plugin (re)starting with 1000 running containers, from registration to ready,
  with and without its checkpoint; counts the containers whose pinning it changed.
* Resident memory: the real `nri-topology run` process, read from /proc/PID/status after it
  registered (topology read, policy built, plugin registered and synchronized) and after 1000
  containers were created through the socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import logging
import os
import pstats
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_roundtrip import NoOp
from benchmarks.latency import median_quantiles
from benchmarks.workload import (
    MACHINES,
    fill_spec,
    load_machine,
    nri_pair,
    policy_pair,
    probe_specs,
)
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

ROOT = Path(__file__).resolve().parents[1]


async def _roundtrips(
    plugin: Plugin, machine: Machine, live: int, samples: int, blocks: int
) -> list[list[int]]:
    peer = RuntimePeer(request_timeout=30, record=False)
    measured: list[list[int]] = [[] for _ in range(blocks)]
    async with connected(plugin, peer) as (peer, _):
        for i in range(live):
            pod, ctr = nri_pair(f"fill{i:04}", fill_spec(i))
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        probes = [nri_pair(f"probe{k}", s) for k, s in enumerate(probe_specs(machine))]
        for pod, _ in probes:
            await peer.run_pod_sandbox(pod)
        for n in range(samples * blocks + 50):
            pod, ctr = probes[n % len(probes)]
            start = time.perf_counter_ns()
            await peer.create_container(pod, ctr)
            if n >= 50:  # warm-up
                measured[(n - 50) // samples].append(time.perf_counter_ns() - start)
            await peer.stop_container(pod, ctr)
            await peer.remove_container(pod, ctr)
    return measured


def roundtrip(
    machine: Machine, live: int, samples: int, blocks: int = 3, profile: Path | None = None
) -> dict[str, object]:
    """Ours vs the no-op floor; p50/p99 of each (medians over blocks) and the difference.

    With `profile`, our plugin's run is profiled (cProfile) and the statistics saved there.
    Start-up objects are frozen out of the cyclic collector for both runs, as `nri-topology run`
    does after start-up.
    """
    policy = Policy(machine, Options())
    gc.collect()
    gc.freeze()
    try:
        return _roundtrip(policy, machine, live, samples, blocks, profile)
    finally:
        gc.unfreeze()


def _roundtrip(
    policy: Policy, machine: Machine, live: int, samples: int, blocks: int, profile: Path | None
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        ours = TopologyPlugin(policy, checkpoint=Checkpoint(Path(tmp) / "state.json"))
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        runs = asyncio.run(_roundtrips(ours, machine, live, samples, blocks))
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        mine = median_quantiles(runs)
    floor = median_quantiles(asyncio.run(_roundtrips(NoOp(), machine, live, samples, blocks)))
    return {
        "live_containers": live,
        "policy": mine,
        "noop": floor,
        "p50_above_floor_ms": round(mine["p50_ms"] - floor["p50_ms"], 4),
        "p99_above_floor_ms": round(mine["p99_ms"] - floor["p99_ms"], 4),
    }


def running_containers(
    machine: Machine, count: int
) -> tuple[list[api_pb2.PodSandbox], list[api_pb2.Container], dict]:
    """`count` running containers pinned as our policy placed them, and the policy's snapshot."""
    policy = Policy(machine, Options())
    for i in range(count):
        policy.create(*policy_pair(f"fill{i:04}", fill_spec(i)))
    pods, ctrs = [], []
    assignments = policy.assignments()
    for i in range(count):
        pod, ctr = nri_pair(f"fill{i:04}", fill_spec(i))
        a = assignments[ctr.id]
        if a.cpus is not None:
            ctr.linux.resources.cpu.cpus = cpuset.format(a.cpus)
        if a.mems is not None:
            ctr.linux.resources.cpu.mems = cpuset.format(a.mems)
        pods.append(pod)
        ctrs.append(ctr)
    return pods, ctrs, policy.snapshot()


async def _restart(machine: Machine, state: Path, pods: list, ctrs: list) -> tuple[float, int]:
    plugin = TopologyPlugin(Policy(machine, Options()), checkpoint=Checkpoint(state))
    peer = RuntimePeer(pods=pods, containers=ctrs, request_timeout=60)
    start = time.perf_counter()
    async with connected(plugin, peer) as (peer, _):
        elapsed = time.perf_counter() - start
        return elapsed, len({u.container_id for u in peer.applied_updates})


def synchronize(machine: Machine, count: int) -> dict[str, object]:
    pods, ctrs, snapshot = running_containers(machine, count)
    out: dict[str, object] = {"containers": count}
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.json"
        Checkpoint(state).save({"policy": snapshot, "cold_starts": {}})
        took, moved = asyncio.run(_restart(machine, state, pods, ctrs))
        out["with_checkpoint_ms"] = round(took * 1e3, 1)
        out["with_checkpoint_moved"] = moved
        state.unlink()
        took, moved = asyncio.run(_restart(machine, state, pods, ctrs))
        out["synchronize_only_ms"] = round(took * 1e3, 1)
        out["synchronize_only_moved"] = moved
    return out


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


@contextlib.asynccontextmanager
async def real_daemon(
    sysfs: Path, log_level: str = "warning"
) -> AsyncIterator[tuple[RuntimePeer, asyncio.subprocess.Process]]:
    """`nri-topology run` as a process, registered with a test runtime on a private socket, its
    first checkpoint written; stopped with SIGTERM on exit."""
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        sock = os.path.join(tmp, "nri.sock")
        peer = RuntimePeer(request_timeout=30)
        await peer.listen(sock)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nri_topology.cli",
            "run",
            f"--socket={sock}",
            f"--sysfs={sysfs}",
            f"--state={tmp}/state.json",
            "--metrics-port=0",
            f"--log-level={log_level}",
            f"--log-file={tmp}/log",
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            await peer.wait_plugin(timeout=120)
            await asyncio.sleep(0.5)  # let the first checkpoint write finish
            yield peer, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
            await peer.close()


async def _daemon_rss(sysfs: Path, count: int) -> dict[str, float]:
    async with real_daemon(sysfs) as (peer, proc):
        started = rss_kib(proc.pid)
        for i in range(count):
            pod, ctr = nri_pair(f"fill{i:04}", fill_spec(i))
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await asyncio.sleep(0.5)
        filled = rss_kib(proc.pid)
    bare = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import pathlib; print([l for l in pathlib.Path('/proc/self/status').read_text()"
        ".splitlines() if l.startswith('VmRSS:')][0].split()[1])",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await bare.communicate()
    return {
        "after_startup_mb": round(started / 1024, 1),
        "containers": count,
        "with_containers_mb": round(filled / 1024, 1),
        "bare_python_mb": round(int(out) / 1024, 1),
    }


def daemon_rss(sysfs: Path, count: int) -> dict[str, float]:
    return asyncio.run(_daemon_rss(sysfs, count))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machine", choices=MACHINES, default="synthetic-256")
    parser.add_argument("--live", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--samples", type=int, default=1000, help="per block; three blocks")
    parser.add_argument("--profile", type=Path, help="save cProfile statistics of our plugin")
    args = parser.parse_args(argv)
    # As run.py does: errors only, so the figures do not include writing logs to a terminal.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    with tempfile.TemporaryDirectory() as tmp:
        machine = load_machine(args.machine, Path(tmp))
        for live in args.live:
            out = roundtrip(machine, live, args.samples, profile=args.profile)
            print(json.dumps({"machine": args.machine} | out), flush=True)
            if args.profile:
                pstats.Stats(str(args.profile)).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
