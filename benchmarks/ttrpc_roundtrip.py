"""ttrpc throughput: codec alone, and client/server round trips over a unix socket.

Run: ``.venv/bin/python benchmarks/ttrpc_roundtrip.py [--calls N]``

The runtime waits for each plugin reply within its request timeout (2 s by default), so what
matters is per-call latency with small messages and that a multi-MiB Synchronize is quick.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.channel import StreamChannel
from nri_topology.ttrpc.client import TtrpcClient
from nri_topology.ttrpc.codec import TYPE_REQUEST, Frame, FrameDecoder
from nri_topology.ttrpc.server import CallContext, TtrpcServer

SERVICE = "bench.Echo"


def bench_codec(count: int, size: int) -> float:
    """Messages per second: encode request + frame, then decode frame + request."""
    payload = bytes(size)
    start = time.perf_counter()
    decoder = FrameDecoder()
    for stream_id in range(1, 2 * count, 2):
        data = codec.encode_request(SERVICE, "Echo", payload, 2_000_000_000)
        wire = codec.encode_frame(Frame(stream_id, TYPE_REQUEST, 0, data))
        for frame in decoder.feed(wire):
            assert isinstance(frame, Frame)
            codec.decode_request(frame.data)
    return count / (time.perf_counter() - start)


async def echo(payload: bytes, ctx: CallContext) -> bytes:
    return payload


async def bench_rpc(calls: int, concurrency: int, size: int) -> tuple[float, float]:
    """(calls per second, mean latency in microseconds) over a real unix socket."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bench.sock")
        served = asyncio.Event()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            server = TtrpcServer(StreamChannel(reader, writer), {SERVICE: {"Echo": echo}})
            await server.serve()
            served.set()

        listener = await asyncio.start_unix_server(accept, path)
        client = TtrpcClient(StreamChannel(*await asyncio.open_unix_connection(path)))
        client.start()
        payload = bytes(size)
        latencies: list[float] = []

        async def worker(n: int) -> None:
            for _ in range(n):
                t0 = time.perf_counter()
                await client.call(SERVICE, "Echo", payload, timeout=2.0)
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        tasks = [asyncio.create_task(worker(calls // concurrency)) for _ in range(concurrency)]
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        await client.close()
        await served.wait()
        listener.close()
        return len(latencies) / elapsed, 1e6 * sum(latencies) / len(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per RPC scenario")
    args = parser.parse_args()
    print(f"codec 1 KiB:           {bench_codec(args.calls * 5, 1024):>10.0f} msg/s")
    print(f"codec 1 MiB:           {bench_codec(50, 1 << 20):>10.0f} msg/s")
    for label, concurrency, size, calls in [
        ("rpc 1 KiB sequential", 1, 1024, args.calls),
        ("rpc 1 KiB 64 in flight", 64, 1024, args.calls),
        ("rpc 1 MiB sequential", 1, 1 << 20, 50),
        ("rpc 4 MiB-64K seq.", 1, (4 << 20) - (64 << 10), 10),
    ]:
        rate, latency = asyncio.run(bench_rpc(calls, concurrency, size))
        print(f"{label + ':':<23}{rate:>10.0f} calls/s   mean latency {latency:>9.0f} µs")


if __name__ == "__main__":
    main()
