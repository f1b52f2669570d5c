"""The whole daemon path: CreateContainer through the socket into the real policy, with checkpoints.

Run: ``.venv/bin/python benchmarks/bench_daemon.py [--containers N] [--machine NAME] [--json F]``

The test runtime creates `--containers` pods of one container each (every tenth one Guaranteed
with 2 whole CPUs, the rest Burstable with 100m) on a bundled machine, through the unix socket into
`TopologyPlugin` backed by the real `Policy`, checkpointing as in production (to a temporary
directory). Reported: CreateContainer round trip p50/p99 over all creations and over the last 50
(the fullest node), the time of one whole checkpoint write at the end and of one by the daemon's
incremental encoder after one container changed, and the Synchronize time
of a restart with all containers running, with and without the checkpoint. Compare round trips and
Synchronize with the runtime's request timeout (2 s by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import structlog

from nri_topology.daemon.checkpoint import Checkpoint, Encoder
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.simulate.machine_spec import load_bundled
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology.model import Machine


def _pod_and_container(i: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    guaranteed = i % 10 == 0
    pod = api_pb2.PodSandbox(id=f"p{i}", name=f"pod{i}", namespace="bench", uid=f"u{i}")
    pod.linux.cgroup_parent = f"/kubepods/{'' if guaranteed else 'burstable/'}podu{i}"
    ctr = api_pb2.Container(
        id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
    )
    res = ctr.linux.resources
    if guaranteed:
        res.cpu.shares.value, res.cpu.quota.value, res.cpu.period.value = 2048, 200_000, 100_000
        res.memory.limit.value = 256 << 20
    else:
        res.cpu.shares.value = 102
    return pod, ctr


def _quantiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50_ms": samples[len(samples) // 2] * 1e3,
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e3,
    }


async def fill(machine: Machine, state: Path, containers: int) -> dict[str, object]:
    plugin = TopologyPlugin(Policy(machine, Options()), checkpoint=Checkpoint(state))
    latencies: list[float] = []
    async with connected(plugin, RuntimePeer(request_timeout=30, record=False)) as (peer, _):
        for i in range(containers):
            pod, ctr = _pod_and_container(i)
            await peer.run_pod_sandbox(pod)
            start = time.perf_counter()
            await peer.create_container(pod, ctr)
            latencies.append(time.perf_counter() - start)
        writes, incremental = [], []
        body = {"policy": plugin.policy.snapshot(), "cold_starts": {}}
        encoder = Encoder(("policy", "containers"))
        encoder.encode(body)
        entries = body["policy"]["containers"]
        head = {"policy": plugin.policy.snapshot(entries=False), "cold_starts": {}}
        for n in range(20):
            start = time.perf_counter()
            Checkpoint(state).save(body)
            writes.append(time.perf_counter() - start)
            changed = next(iter(entries))
            entries[changed] = {**entries[changed], "memory": n}  # one container changed
            start = time.perf_counter()
            data = encoder.encode(head, {changed: entries[changed]})
            Checkpoint(state).save_encoded(data)
            incremental.append(time.perf_counter() - start)
        pods, ctrs = list(peer.pods.values()), list(peer.containers.values())
    return {
        "create_all": _quantiles(latencies),
        "create_last_50": _quantiles(latencies[-50:]),
        "checkpoint_write_ms": statistics.median(writes) * 1e3,
        "checkpoint_incremental_write_ms": statistics.median(incremental) * 1e3,
        "checkpoint_bytes": state.stat().st_size,
        "pods": pods,
        "containers": ctrs,
    }


async def restart(machine: Machine, state: Path, pods: list, ctrs: list) -> float:
    plugin = TopologyPlugin(Policy(machine, Options()), checkpoint=Checkpoint(state))
    peer = RuntimePeer(pods=pods, containers=ctrs, request_timeout=30)
    start = time.perf_counter()
    async with connected(plugin, peer):
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=300)
    parser.add_argument("--machine", default="server", help="bundled machine name")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    machine = load_bundled(args.machine)[1]
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.json"
        result = asyncio.run(fill(machine, state, args.containers))
        pods, ctrs = result.pop("pods"), result.pop("containers")
        result["restart_with_checkpoint_ms"] = (
            asyncio.run(restart(machine, state, pods, ctrs)) * 1e3
        )
        state.unlink()
        result["restart_synchronize_only_ms"] = (
            asyncio.run(restart(machine, state, pods, ctrs)) * 1e3
        )
    result.update(machine=args.machine, containers=args.containers)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"daemon": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
