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
* `--in-process`: the daemon's own share without the socket, `TopologyPlugin.create_container` less
  the `Policy.create` inside it, for the probes of `go_side.py` on an empty node (CPU time).
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
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import structlog

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_roundtrip import NoOp
from benchmarks.latency import median_quantiles
from benchmarks.workload import (
    MACHINES,
    MI,
    Spec,
    daemon_command,
    fill_spec,
    load_machine,
    nri_pair,
    policy_pair,
    probe_specs,
)
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.nri import stub as stub_module
from nri_topology.nri.stub import Plugin
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import QoS
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine
from nri_topology.ttrpc.connection import RequestReceived
from nri_topology.ttrpc.server import CallContext, Handler, TtrpcServer

ROOT = Path(__file__).resolve().parents[1]


# The probe sets a round trip can be measured with.
PROBES = ("mix", "exclusive-2")


def _probe_specs(machine: Machine, probe: str) -> list[Spec]:
    """`mix`: one of each kind of request; `exclusive-2`: a Guaranteed 2-CPU container, whose
    exclusive CPUs re-pin every shared container of the pools they are sliced from."""
    if probe == "exclusive-2":
        return [Spec(QoS.GUARANTEED, cpu=2000, memory=1024 * MI)]
    return probe_specs(machine)


class _TimedServer(TtrpcServer):
    """The plugin's ttrpc server, timing each request from its bytes reaching the server to its
    reply written to the socket, and the reply's size: the plugin's own share of a round trip,
    what the runtime's side waits for beyond its own encoding, decoding and merging. Also the
    CPU time of that span (the test runtime waits meanwhile, so it is the plugin's), which a
    loaded machine disturbs much less than the wall time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrived = (0, 0)
        self.times: dict[str, list[int]] = {}
        self.cpu: dict[str, list[int]] = {}
        self.sizes: dict[str, list[int]] = {}

    def data_received(self, data: bytes) -> bool:
        self.arrived = (time.perf_counter_ns(), time.thread_time_ns())
        return super().data_received(data)

    async def _handle(self, event: RequestReceived) -> None:
        wall, cpu = self.arrived  # one request in flight: the bytes that made this event
        await super()._handle(event)
        method = event.request.method
        self.cpu.setdefault(method, []).append(time.thread_time_ns() - cpu)
        self.times.setdefault(method, []).append(time.perf_counter_ns() - wall)

    async def _run(self, handler: Handler, payload: bytes, context: CallContext) -> bytes:
        reply = await super()._run(handler, payload, context)
        self.sizes.setdefault(context.method, []).append(len(reply))
        return reply


@contextlib.contextmanager
def _timed_servers() -> Iterator[list[_TimedServer]]:
    """Every ttrpc server the stub makes meanwhile is a `_TimedServer`, listed in order."""
    made: list[_TimedServer] = []

    def make(*args: Any, **kwargs: Any) -> _TimedServer:
        made.append(_TimedServer(*args, **kwargs))
        return made[-1]

    with mock.patch.object(stub_module, "TtrpcServer", make):
        yield made


async def _fill(peer: RuntimePeer, live: int) -> None:
    for i in range(live):
        pod, ctr = nri_pair(f"fill{i:04}", fill_spec(i))
        await peer.run_pod_sandbox(pod)
        await peer.create_container(pod, ctr)


async def _block(
    peer: RuntimePeer, probes: list, samples: int, first: int
) -> tuple[list[int], list[int]]:
    """`samples` timed creations, each probe stopped and removed again (not timed): wall and
    CPU times (runtime and plugin share this thread, so the CPU time is both sides' work
    without the moments the machine gave to other processes)."""
    wall, cpu = [], []
    for n in range(first, first + samples):
        pod, ctr = probes[n % len(probes)]
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        await peer.create_container(pod, ctr)
        cpu.append(time.thread_time_ns() - start_cpu)
        wall.append(time.perf_counter_ns() - start)
        await peer.stop_container(pod, ctr)
        await peer.remove_container(pod, ctr)
    return wall, cpu


async def _alternating(
    plugins: dict[str, Plugin], machine: Machine, live: int, samples: int, blocks: int, probe: str
) -> tuple[dict[str, list[list[int]]], dict[str, _TimedServer]]:
    """Round trips into each plugin, a block of samples each in turn, so a busy moment of a
    shared machine weighs on all of them; the first 50 creations of each are a warm-up."""
    measured: dict[str, list[list[int]]] = {name: [] for name in plugins}
    measured |= {f"{name}_cpu": [] for name in plugins}
    async with contextlib.AsyncExitStack() as stack:
        peers, servers = {}, {}
        for name, plugin in plugins.items():
            with _timed_servers() as made:
                peer, _ = await stack.enter_async_context(
                    connected(plugin, RuntimePeer(request_timeout=30, record=False))
                )
            peers[name], servers[name] = peer, made[-1]
            await _fill(peer, live)
        probes = [nri_pair(f"probe{k}", s) for k, s in enumerate(_probe_specs(machine, probe))]
        for peer in peers.values():
            for pod, _ in probes:
                await peer.run_pod_sandbox(pod)
            await _block(peer, probes, 50, 0)
        for server in servers.values():
            server.times.clear()
            server.cpu.clear()
            server.sizes.clear()
        for b in range(blocks):
            for name, peer in peers.items():
                wall, cpu = await _block(peer, probes, samples, 50 + b * samples)
                measured[name].append(wall)
                measured[f"{name}_cpu"].append(cpu)
    return measured, servers


def roundtrip(
    machine: Machine,
    live: int,
    samples: int,
    blocks: int = 3,
    profile: Path | None = None,
    probe: str = "mix",
) -> dict[str, object]:
    """Ours vs the no-op floor; p50/p99 of each (medians over blocks), the difference, their
    ratio, and each plugin's own share (`plugin_side`) with the size of its replies.

    With `profile`, the whole run is profiled (cProfile) and the statistics saved there.
    Start-up objects are frozen out of the cyclic collector, as `nri-topology run` does after
    start-up.
    """
    policy = Policy(machine, Options())
    gc.collect()
    gc.freeze()
    try:
        return _roundtrip(policy, machine, live, samples, blocks, profile, probe)
    finally:
        gc.unfreeze()


def _side(server: _TimedServer, blocks: int) -> dict[str, object]:
    def quantiles(samples: list[int]) -> dict[str, Any]:
        size = -(-len(samples) // blocks)
        return median_quantiles([samples[i : i + size] for i in range(0, len(samples), size)])

    wall = quantiles(server.times.get("CreateContainer", []))
    cpu = quantiles(server.cpu.get("CreateContainer", []))
    sizes = sorted(server.sizes.get("CreateContainer", [0]))
    return {
        "p50_ms": wall["p50_ms"],
        "p99_ms": wall["p99_ms"],
        "cpu_p50_ms": cpu["p50_ms"],
        "cpu_p99_ms": cpu["p99_ms"],
        "reply_bytes_p50": sizes[len(sizes) // 2],
    }


def _roundtrip(
    policy: Policy,
    machine: Machine,
    live: int,
    samples: int,
    blocks: int,
    profile: Path | None,
    probe: str,
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        ours = TopologyPlugin(policy, checkpoint=Checkpoint(Path(tmp) / "state.json"))
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        runs, servers = asyncio.run(
            _alternating({"policy": ours, "noop": NoOp()}, machine, live, samples, blocks, probe)
        )
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
    mine, floor = median_quantiles(runs["policy"]), median_quantiles(runs["noop"])
    mine_cpu, floor_cpu = median_quantiles(runs["policy_cpu"]), median_quantiles(runs["noop_cpu"])
    return {
        "live_containers": live,
        "probe": probe,
        "policy": mine,
        "noop": floor,
        "p50_above_floor_ms": round(mine["p50_ms"] - floor["p50_ms"], 4),
        "p99_above_floor_ms": round(mine["p99_ms"] - floor["p99_ms"], 4),
        "p50_ratio": round(mine["p50_ms"] / floor["p50_ms"], 2),
        "cpu": {
            "policy_p50_ms": mine_cpu["p50_ms"],
            "policy_p99_ms": mine_cpu["p99_ms"],
            "noop_p50_ms": floor_cpu["p50_ms"],
            "p50_ratio": round(mine_cpu["p50_ms"] / floor_cpu["p50_ms"], 2),
        },
        "plugin_side": {name: _side(s, blocks) for name, s in servers.items()},
    }


def in_process(machine: Machine, samples: int, warmup: int = 300) -> dict[str, object]:
    """Per probe of `go_side.py`: medians of `create_container`, of the `Policy.create` inside
    it, and of their difference (the daemon's glue), in microseconds of CPU time. Each probe is
    stopped and removed again between samples, so every sample sees the same empty node."""
    policy = Policy(machine, Options())
    gc.collect()
    gc.freeze()
    try:
        return asyncio.run(_in_process(policy, samples, warmup))
    finally:
        gc.unfreeze()


async def _in_process(policy: Policy, samples: int, warmup: int) -> dict[str, object]:
    from benchmarks.go_side import PROBES

    inner: list[int] = []
    create = policy.create

    def timed(pod: Any, ctr: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return create(pod, ctr)
        finally:
            inner.append(time.thread_time_ns() - start)

    policy.create = timed  # type: ignore[method-assign]
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plugin = TopologyPlugin(policy, checkpoint=Checkpoint(Path(tmp) / "state.json"))
        for name, spec in PROBES.items():
            pod, ctr = nri_pair("probe", spec)
            whole: list[int] = []
            inner.clear()
            for _ in range(warmup + samples):
                start = time.thread_time_ns()
                await plugin.create_container(pod, ctr)
                whole.append(time.thread_time_ns() - start)
                await asyncio.sleep(0)  # what follows the reply (its log line) is not timed
                await plugin.stop_container(pod, ctr)
                await plugin.remove_container(pod, ctr)
                await asyncio.sleep(0)
            pairs = list(zip(whole, inner, strict=True))[warmup:]
            out[name] = {
                f"{what}_us": round(statistics.median(f(w, p) for w, p in pairs) / 1000, 1)
                for what, f in (
                    ("create", lambda w, p: w),
                    ("policy", lambda w, p: p),
                    ("glue", lambda w, p: w - p),
                )
            }
    return out


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
    # A restarting daemon holds nothing else; garbage left by earlier measurements in this
    # process would make its collections slower (twice the time after a 1000-container run).
    gc.collect()
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
            *daemon_command(sock, sysfs, tmp, log_level),
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
    parser.add_argument("--probe", choices=PROBES, default="mix", help="what is created")
    parser.add_argument("--profile", type=Path, help="save cProfile statistics of the run")
    parser.add_argument(
        "--in-process", action="store_true", help="only the daemon's share, without the socket"
    )
    args = parser.parse_args(argv)
    # As run.py does: errors only, so the figures do not include writing logs to a terminal.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    with tempfile.TemporaryDirectory() as tmp:
        machine = load_machine(args.machine, Path(tmp))
        if args.in_process:
            out = in_process(machine, args.samples)
            print(json.dumps({"machine": args.machine, "in_process": out}), flush=True)
            return 0
        for live in args.live:
            out = roundtrip(machine, live, args.samples, profile=args.profile, probe=args.probe)
            print(json.dumps({"machine": args.machine} | out), flush=True)
            if args.profile:
                pstats.Stats(str(args.profile)).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
