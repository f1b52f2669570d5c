"""CreateContainer round trips through the NRI socket: test runtime -> stub -> no-op plugin.

Run: ``.venv/bin/python benchmarks/bench_roundtrip.py [--requests N] [--runs R] [--json FILE]``
``--serve SOCKET`` instead connects the no-op plugin to a runtime listening there (the Python
floor of `go_side.py`) and serves until the runtime closes the connection or SIGTERM.

Everything real except the policy: the runtime-side test peer (Go-style mux reading), the unix
socket, our mux, ttrpc client/server, protobuf decoding and the stub's dispatch. The runtime sends
one request at a time per plugin, so sequential latency is what bounds pod start-up; the
concurrent figure shows the mux and ttrpc overhead when requests overlap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import time
from pathlib import Path

import structlog

from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin, Stub, Updates
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer


class NoOp(Plugin):
    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> tuple[api_pb2.ContainerAdjustment | None, Updates]:
        return None, []


def _request(i: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    pod = api_pb2.PodSandbox(id="pod-0", name="bench", uid="uid-0", namespace="bench")
    ctr = api_pb2.Container(id=f"ctr-{i}", pod_sandbox_id="pod-0", name="app")
    ctr.linux.resources.cpu.cpus = "0-3"
    ctr.linux.resources.memory.limit.value = 1 << 30
    return pod, ctr


async def one_run(requests: int, concurrency: int, warmup: int) -> dict[str, float]:
    peer = RuntimePeer(request_timeout=10, record=False)
    async with connected(NoOp(), peer) as (peer, _):
        conn = peer.plugin
        assert conn is not None
        for i in range(warmup):
            await peer.create_container(*_request(i))
        latencies: list[float] = []

        async def timed(i: int) -> None:
            pod, ctr = _request(i)
            start = time.perf_counter()
            if concurrency == 1:
                await peer.create_container(pod, ctr)
            else:
                req = api_pb2.CreateContainerRequest(pod=pod, container=ctr)
                await conn.call("CreateContainer", req, api_pb2.CreateContainerResponse)
            latencies.append(time.perf_counter() - start)

        begin = time.perf_counter()
        for first in range(0, requests, concurrency):
            batch = range(first, min(first + concurrency, requests))
            await asyncio.gather(*(timed(i) for i in batch))
        elapsed = time.perf_counter() - begin
    latencies.sort()
    return {
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6,
        "requests_per_s": requests / elapsed,
    }


async def serve(socket_path: str) -> None:
    """The no-op plugin through our stub, connected to a real runtime at `socket_path`."""
    stub = Stub(NoOp(), "python-noop", "90", socket_path, backoff_initial=0.05)
    task = asyncio.ensure_future(stub.run())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await asyncio.wait([task, asyncio.ensure_future(stop.wait())], return_when="FIRST_COMPLETED")
    task.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", metavar="SOCKET", help="serve a runtime at SOCKET instead")
    parser.add_argument("--requests", type=int, default=2000, help="timed requests per run")
    parser.add_argument("--runs", type=int, default=5, help="runs; medians are reported")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 16], help="requests in flight"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    if args.serve:
        asyncio.run(serve(args.serve))
        return

    results = []
    print(f"{'in flight':>9} {'p50 µs':>9} {'p99 µs':>9} {'req/s':>9}   (median of {args.runs})")
    for concurrency in args.concurrency:
        runs = [
            asyncio.run(one_run(args.requests, concurrency, args.warmup)) for _ in range(args.runs)
        ]
        row = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        row["concurrency"] = concurrency
        results.append(row)
        print(
            f"{concurrency:>9} {row['p50_us']:>9.0f} {row['p99_us']:>9.0f} "
            f"{row['requests_per_s']:>9.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"create_container_roundtrip": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
