"""TtrpcClient and TtrpcServer talking over a real unix socket (StreamChannel)."""

from __future__ import annotations

import asyncio
import random
import struct
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.channel import StreamChannel
from nri_topology.ttrpc.client import TtrpcClient
from nri_topology.ttrpc.codec import (
    MAX_DATA,
    TYPE_DATA,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Code,
    Frame,
    FrameDecoder,
    Oversized,
    TtrpcError,
)
from nri_topology.ttrpc.connection import ClientConnection
from nri_topology.ttrpc.server import CallContext, Handler, TtrpcServer

SERVICE = "test.Echo"


@dataclass
class Peer:
    """A listening unix socket whose connections are served by TtrpcServer."""

    path: str
    connections: list[asyncio.StreamWriter] = field(default_factory=list)
    serving: list[asyncio.Task[None]] = field(default_factory=list)

    async def client(self) -> TtrpcClient:
        reader, writer = await asyncio.open_unix_connection(self.path)
        client = TtrpcClient(StreamChannel(reader, writer))
        client.start()
        return client

    async def raw(self) -> RawConnection:
        return RawConnection(*await asyncio.open_unix_connection(self.path))


@dataclass
class RawConnection:
    """Hand-written bytes in, decoded frames out: for what a well-behaved client never sends."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    frames: list[Frame | Oversized] = field(default_factory=list)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def request(self, stream_id: int, method: str, payload: bytes = b"", type_: int = 1) -> None:
        data = codec.encode_request(SERVICE, method, payload)
        self.send(codec.encode_frame(Frame(stream_id, type_, 0, data)))

    async def next_frame(self) -> Frame:
        while not self.frames:
            data = await self.reader.read(65536)
            assert data, "server closed the connection"
            self.frames += self.decoder.feed(data)
        frame = self.frames.pop(0)
        assert isinstance(frame, Frame)
        return frame

    async def error(self) -> tuple[int, Code | int, str]:
        frame = await self.next_frame()
        assert (frame.type, frame.flags) == (TYPE_RESPONSE, 0)
        response = codec.decode_response(frame.data)
        assert response.status is not None and response.payload == b""
        return frame.stream_id, response.status.code, response.status.message


@asynccontextmanager
async def serving(methods: Mapping[str, Handler]) -> AsyncIterator[Peer]:
    with tempfile.TemporaryDirectory() as tmp:
        peer = Peer(str(Path(tmp) / "ttrpc.sock"))

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer.connections.append(writer)
            server = TtrpcServer(StreamChannel(reader, writer), {SERVICE: methods})
            task = asyncio.current_task()
            assert task is not None
            peer.serving.append(task)
            await server.serve()

        listener = await asyncio.start_unix_server(accept, peer.path)
        try:
            yield peer
        finally:
            listener.close()
            for writer in peer.connections:
                writer.close()
            await asyncio.gather(*peer.serving, return_exceptions=True)


async def echo(payload: bytes, ctx: CallContext) -> bytes:
    return payload


async def test_round_trip_and_empty_response() -> None:
    async def empty(payload: bytes, ctx: CallContext) -> bytes:
        return b""

    async with serving({"Echo": echo, "Empty": empty}) as peer:
        client = await peer.client()
        assert await client.call(SERVICE, "Echo", b"hello") == b"hello"
        assert await client.call(SERVICE, "Empty", b"x") == b""
        await client.close()
        assert client.closed


async def test_64_concurrent_calls_finish_in_random_order() -> None:
    finished: list[int] = []
    seen_ids: list[int] = []
    gates = [asyncio.Event() for _ in range(64)]

    async def slow(payload: bytes, ctx: CallContext) -> bytes:
        index = int(payload)
        seen_ids.append(ctx.stream_id)
        await gates[index].wait()
        finished.append(index)
        return b"done %d" % index

    async with serving({"Slow": slow}) as peer:
        client = await peer.client()
        calls = [asyncio.create_task(client.call(SERVICE, "Slow", b"%d" % i)) for i in range(64)]
        while len(seen_ids) < 64:  # every handler is running concurrently
            await asyncio.sleep(0.001)
        order = list(range(64))
        random.Random(7).shuffle(order)
        for index in order:
            gates[index].set()
            await asyncio.sleep(0)
        results = await asyncio.gather(*calls)
        assert results == [b"done %d" % i for i in range(64)]
        assert finished != sorted(finished)
        assert sorted(seen_ids) == list(range(1, 128, 2))
        await client.close()


async def test_timeout_fails_locally_and_the_late_response_is_dropped() -> None:
    release = asyncio.Event()
    contexts: list[CallContext] = []

    async def stuck(payload: bytes, ctx: CallContext) -> bytes:
        contexts.append(ctx)
        await release.wait()
        return b"late"

    async with serving({"Stuck": stuck, "Echo": echo}) as peer:
        client = await peer.client()
        with pytest.raises(TtrpcError) as err:
            await client.call(SERVICE, "Stuck", b"", timeout=0.05)
        assert err.value.code == Code.DEADLINE_EXCEEDED
        assert contexts[0].deadline is not None
        remaining = contexts[0].remaining()
        assert remaining is not None and remaining <= 0.05
        release.set()
        assert await client.call(SERVICE, "Echo", b"after") == b"after"
        assert not client.closed
        await client.close()


async def test_no_timeout_means_no_deadline() -> None:
    contexts: list[CallContext] = []

    async def record(payload: bytes, ctx: CallContext) -> bytes:
        contexts.append(ctx)
        return b""

    async with serving({"Record": record}) as peer:
        client = await peer.client()
        await client.call(SERVICE, "Record", b"", metadata=[("trace", "abc"), ("trace", "def")])
        assert contexts[0].deadline is None and contexts[0].remaining() is None
        assert contexts[0].metadata == (("trace", "abc"), ("trace", "def"))
        assert (contexts[0].service, contexts[0].method) == (SERVICE, "Record")
        await client.close()


async def test_cancelled_call_is_abandoned_cleanly() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def stuck(payload: bytes, ctx: CallContext) -> bytes:
        started.set()
        await release.wait()
        return b"late"

    async with serving({"Stuck": stuck, "Echo": echo}) as peer:
        client = await peer.client()
        call = asyncio.create_task(client.call(SERVICE, "Stuck", b""))
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        assert await client.call(SERVICE, "Echo", b"still fine") == b"still fine"
        await client.close()


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (TtrpcError(Code.NOT_FOUND, "no such container"), Code.NOT_FOUND, "no such container"),
        (TtrpcError(42, "future code"), 42, "future code"),
        (ValueError("bad cpuset"), Code.UNKNOWN, "bad cpuset"),
        (KeyError("pod"), Code.UNKNOWN, "'pod'"),
        (RuntimeError(), Code.UNKNOWN, "RuntimeError"),
    ],
)
async def test_handler_errors_become_statuses(
    raised: Exception, code: Code | int, message: str
) -> None:
    async def failing(payload: bytes, ctx: CallContext) -> bytes:
        raise raised

    async with serving({"Fail": failing, "Echo": echo}) as peer:
        client = await peer.client()
        with pytest.raises(TtrpcError) as err:
            await client.call(SERVICE, "Fail", b"")
        assert (err.value.code, err.value.message) == (code, message)
        assert await client.call(SERVICE, "Echo", b"server survived") == b"server survived"
        await client.close()


async def test_handler_returning_a_non_bytes_value() -> None:
    async def wrong(payload: bytes, ctx: CallContext) -> bytes:
        return "text"  # type: ignore[return-value]

    async with serving({"Wrong": wrong}) as peer:
        client = await peer.client()
        with pytest.raises(TtrpcError) as err:
            await client.call(SERVICE, "Wrong", b"")
        assert (err.value.code, err.value.message) == (Code.UNKNOWN, "ttrpc: handler returned str")
        await client.close()


@pytest.mark.parametrize(
    ("service", "method", "message"),
    [
        ("nri.pkg.api.v1alpha1.Plugin", "Configure", "service nri.pkg.api.v1alpha1.Plugin"),
        (SERVICE, "RunPodSandbox", "method RunPodSandbox"),
    ],
)
async def test_unknown_service_and_method(service: str, method: str, message: str) -> None:
    async with serving({"Echo": echo}) as peer:
        client = await peer.client()
        with pytest.raises(TtrpcError) as err:
            await client.call(service, method, b"")
        assert (err.value.code, err.value.message) == (Code.UNIMPLEMENTED, message)
        await client.close()


async def test_unknown_method_reply_bytes_match_protocol_doc() -> None:
    async with serving({"Echo": echo}) as peer:
        raw = await peer.raw()
        raw.request(1, "Echo")
        await raw.next_frame()
        raw.request(3, "RunPodSandbox")
        frame = await raw.next_frame()
        wire = codec.encode_frame(frame)
        assert wire.hex() == "0000001a000000030200" + "0a18080c1214" + b"method RunPodSandbox".hex()
        raw.writer.close()


async def test_server_going_away_fails_pending_and_later_calls() -> None:
    started = asyncio.Event()

    async def stuck(payload: bytes, ctx: CallContext) -> bytes:
        started.set()
        await asyncio.Event().wait()
        return b""

    async with serving({"Stuck": stuck}) as peer:
        client = await peer.client()
        calls = [asyncio.create_task(client.call(SERVICE, "Stuck", b"")) for _ in range(3)]
        await started.wait()
        peer.connections[0].close()
        for call in calls:
            with pytest.raises(TtrpcError) as err:
                await call
            assert (err.value.code, err.value.message) == (Code.UNAVAILABLE, "ttrpc: closed")
        await client.wait_closed()
        assert client.closed
        with pytest.raises(TtrpcError) as err:
            await client.call(SERVICE, "Stuck", b"")
        assert err.value.code == Code.UNAVAILABLE
        await peer.serving[0]  # the server noticed too and cancelled its handler


async def test_client_close_fails_pending_calls() -> None:
    started = asyncio.Event()

    async def stuck(payload: bytes, ctx: CallContext) -> bytes:
        started.set()
        await asyncio.Event().wait()
        return b""

    async with serving({"Stuck": stuck}) as peer:
        client = await peer.client()
        call = asyncio.create_task(client.call(SERVICE, "Stuck", b""))
        await started.wait()
        await client.close()
        with pytest.raises(TtrpcError, match="ttrpc: closed"):
            await call
        await peer.serving[0]


async def test_oversized_request_is_refused_before_sending() -> None:
    async with serving({"Echo": echo}) as peer:
        client = await peer.client()
        with pytest.raises(TtrpcError) as err:
            await client.call(SERVICE, "Echo", bytes(MAX_DATA))
        assert err.value.code == Code.RESOURCE_EXHAUSTED
        assert await client.call(SERVICE, "Echo", b"ok") == b"ok"
        await client.close()


async def test_oversized_response_becomes_resource_exhausted() -> None:
    async def huge(payload: bytes, ctx: CallContext) -> bytes:
        return bytes(MAX_DATA)

    async with serving({"Huge": huge, "Echo": echo}) as peer:
        client = await peer.client()
        with pytest.raises(TtrpcError) as err:
            await client.call(SERVICE, "Huge", b"")
        assert err.value.code == Code.RESOURCE_EXHAUSTED
        assert await client.call(SERVICE, "Echo", b"ok") == b"ok"
        await client.close()


async def test_server_answers_an_oversized_incoming_request_and_carries_on() -> None:
    async with serving({"Echo": echo}) as peer:
        raw = await peer.raw()
        length = MAX_DATA + 1
        raw.send(struct.pack(">IIBB", length, 1, TYPE_REQUEST, 0) + bytes(length))
        stream, code, message = await raw.error()
        assert (stream, code) == (1, Code.RESOURCE_EXHAUSTED)
        assert message == f"message length {length} exceed maximum message size of {MAX_DATA}"
        raw.request(3, "Echo", b"next")
        frame = await raw.next_frame()
        assert (frame.stream_id, codec.decode_response(frame.data).payload) == (3, b"next")
        raw.writer.close()


async def test_client_fails_only_the_call_whose_response_is_oversized() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "s.sock")
        served = asyncio.Event()

        async def fake_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            decoder = FrameDecoder()
            requests: list[Frame | Oversized] = []
            while len(requests) < 2:
                requests += decoder.feed(await reader.read(65536))
            length = MAX_DATA + 5
            writer.write(struct.pack(">IIBB", length, 1, TYPE_RESPONSE, 0) + bytes(length))
            writer.write(
                codec.encode_frame(Frame(3, TYPE_RESPONSE, 0, codec.encode_response(b"3")))
            )
            await writer.drain()
            await reader.read()
            writer.close()
            served.set()

        listener = await asyncio.start_unix_server(fake_server, path)
        client = TtrpcClient(StreamChannel(*await asyncio.open_unix_connection(path)))
        first = asyncio.create_task(client.call(SERVICE, "A", b""))
        second = asyncio.create_task(client.call(SERVICE, "B", b""))
        with pytest.raises(TtrpcError) as err:
            await first
        assert err.value.code == Code.RESOURCE_EXHAUSTED
        assert await second == b"3"
        await client.close()
        await served.wait()
        listener.close()


@pytest.mark.parametrize(
    ("frames", "stream", "message"),
    [
        ([(2, TYPE_REQUEST)], 2, "StreamID must be odd for client initiated streams"),
        (
            [(5, TYPE_REQUEST), (5, TYPE_REQUEST)],
            5,
            "StreamID cannot be re-used and must increment",
        ),
        (
            [(5, TYPE_REQUEST), (3, TYPE_REQUEST)],
            3,
            "StreamID cannot be re-used and must increment",
        ),
        ([(1, TYPE_DATA)], 1, "StreamID is no longer active"),
    ],
)
async def test_stream_id_rules(frames: list[tuple[int, int]], stream: int, message: str) -> None:
    async with serving({"Echo": echo}) as peer:
        raw = await peer.raw()
        for stream_id, type_ in frames:
            raw.request(stream_id, "Echo", b"x", type_=type_)
        for _ in frames[1:]:
            assert (await raw.next_frame()).stream_id == frames[0][0]
        assert await raw.error() == (stream, Code.INVALID_ARGUMENT, message)
        raw.writer.close()


async def test_undecodable_request_envelope() -> None:
    async with serving({"Echo": echo}) as peer:
        raw = await peer.raw()
        raw.send(codec.encode_frame(Frame(1, TYPE_REQUEST, 0, b"\x0a\x05ab")))
        stream, code, message = await raw.error()
        assert (stream, code) == (1, Code.INVALID_ARGUMENT)
        assert message.startswith("unmarshal request error: ")
        raw.request(3, "Echo", b"fine")
        assert codec.decode_response((await raw.next_frame()).data).payload == b"fine"
        raw.writer.close()


async def test_protocol_error_ends_serve_and_closes_the_connection() -> None:
    async with serving({"Echo": echo}) as peer:
        raw = await peer.raw()
        raw.send(struct.pack(">IIBB", 0, 1, 9, 0))
        assert await raw.reader.read() == b""
        await peer.serving[0]
        raw.writer.close()


class _LostOnSend:
    """A pushed channel whose first write finds the connection gone, as the mux reports it:
    its reader learns of the loss, then the write fails."""

    def __init__(self) -> None:
        self.receiver: Any = None

    def attach(self, receiver: Any) -> None:
        self.receiver = receiver

    async def recv(self) -> bytes:
        raise AssertionError("a pushed channel is not read")

    async def send(self, message: bytes) -> None:
        self.receiver.connection_lost(ConnectionResetError("peer gone"))
        raise ConnectionResetError("peer gone")

    def close(self) -> None:
        pass


async def test_no_handler_starts_once_the_connection_is_lost() -> None:
    """Two requests in one read: the first reply's write loses the connection, and the second
    request's handler, already scheduled, must not run on a connection that is gone."""
    calls: list[bytes] = []

    async def echo(payload: bytes, ctx: CallContext) -> bytes:
        calls.append(payload)
        return payload

    channel = _LostOnSend()
    server = TtrpcServer(channel, {SERVICE: {"Echo": echo}})
    serving = asyncio.create_task(server.serve())
    while channel.receiver is None:
        await asyncio.sleep(0)
    client = ClientConnection()
    _, first = client.request(SERVICE, "Echo", b"1")
    _, second = client.request(SERVICE, "Echo", b"2")
    channel.receiver.data_received(first + second)
    await asyncio.wait_for(serving, 5)
    assert calls == [b"1"]
