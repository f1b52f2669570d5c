"""The asyncio mux trunk over a real socketpair: routing, contiguous writes, clean failure."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from nri_topology.nri.mux import (
    HEADER,
    MAX_ACCEPTED_PAYLOAD,
    READ_SIZE,
    Mux,
    MuxClosedError,
    MuxDecoder,
    connect,
)
from nri_topology.testing.go_reader import GoConnReader


@pytest.fixture
async def trunk() -> AsyncIterator[tuple[Mux, asyncio.StreamReader, asyncio.StreamWriter]]:
    ours, theirs = socket.socketpair()
    trunk, writer = await connect(sock=ours)
    peer_reader, peer_writer = await asyncio.open_unix_connection(sock=theirs)
    mux = Mux(trunk, writer)
    yield mux, peer_reader, peer_writer
    await mux.close()
    peer_writer.close()


async def test_routes_payloads_and_drops_unknown_connections(trunk) -> None:  # type: ignore[no-untyped-def]
    mux, _, peer = trunk
    one, two = mux.open(1), mux.open(2)
    mux.start()
    peer.write(HEADER.pack(1, 3) + b"abc" + HEADER.pack(9, 2) + b"zz" + HEADER.pack(2, 1) + b"x")
    peer.write(HEADER.pack(1, 0) + HEADER.pack(1, 2) + b"de")
    await peer.drain()
    assert await one.recv() == b"abc"
    assert await two.recv() == b"x"
    assert await one.recv() == b"de"  # empty frames carry nothing
    assert mux.dropped_frames == 1
    peer.close()
    assert await one.recv() == b""
    assert await one.recv() == b""  # EOF sticks
    await mux.wait_closed()
    assert mux.error is None
    with pytest.raises(MuxClosedError):
        await one.send(b"late")


class Collect:
    """A receiver that keeps what it is fed and stops after `limit` payloads."""

    def __init__(self, limit: int = 99) -> None:
        self.data: list[bytes] = []
        self.lost: list[BaseException | None] = []
        self.limit = limit

    def data_received(self, data: bytes) -> bool:
        self.data.append(data)
        return len(self.data) < self.limit

    def connection_lost(self, error: BaseException | None) -> None:
        self.lost.append(error)


@pytest.mark.looptime
async def test_attached_receiver_gets_queued_then_pushed_payloads(trunk) -> None:  # type: ignore[no-untyped-def]
    mux, _, peer = trunk
    one, two = mux.open(1), mux.open(2)
    mux.start()
    peer.write(HEADER.pack(1, 1) + b"a" + HEADER.pack(2, 1) + b"b")
    await peer.drain()
    assert await two.recv() == b"b"  # both payloads have been routed by now
    first, second = Collect(), Collect(limit=1)
    one.attach(first)
    two.attach(second)
    assert first.data == [b"a"]
    with pytest.raises(ValueError, match="already has a receiver"):
        one.attach(Collect())
    peer.write(HEADER.pack(1, 1) + b"c" + HEADER.pack(2, 1) + b"d" + HEADER.pack(2, 1) + b"e")
    await peer.drain()
    await asyncio.sleep(0.05)
    assert first.data == [b"a", b"c"]
    assert second.data == [b"d"]  # it said it wanted no more
    assert await two.recv() == b"e"  # ... so later payloads wait in the queue again
    peer.close()
    await mux.wait_closed()
    assert first.lost == [None]
    assert second.lost == []


async def test_eof_inside_a_frame_is_an_error(trunk) -> None:  # type: ignore[no-untyped-def]
    mux, _, peer = trunk
    one = mux.open(1)
    mux.start()
    peer.write(HEADER.pack(1, 10) + b"short")
    await peer.drain()
    peer.close()
    assert await one.recv() == b""
    assert "inside a frame" in str(mux.error)


async def test_reads_land_in_the_trunks_own_buffer_and_frames_longer_than_it_arrive_whole(
    trunk,  # type: ignore[no-untyped-def]
) -> None:
    mux, _, peer = trunk
    # The event loop reads into the trunk's buffer instead of making a new object per read.
    assert isinstance(mux._trunk, asyncio.BufferedProtocol)
    one, two = mux.open(1), mux.open(2)
    mux.start()
    big = bytes(range(256)) * (3 * READ_SIZE // 256 + 7)  # several reads into the same buffer
    peer.write(HEADER.pack(1, 2) + b"hi" + HEADER.pack(2, len(big)) + big + HEADER.pack(1, 1))
    await peer.drain()
    peer.write(b"!")
    await peer.drain()
    assert await one.recv() == b"hi"
    assert await two.recv() == big
    assert await one.recv() == b"!"


async def test_absurd_length_closes_without_allocating(trunk) -> None:  # type: ignore[no-untyped-def]
    mux, _, peer = trunk
    two = mux.open(2)
    mux.start()
    peer.write(HEADER.pack(2, MAX_ACCEPTED_PAYLOAD + 1))
    await peer.drain()
    assert await two.recv() == b""
    assert "announces" in str(mux.error)


def test_open_rules() -> None:
    async def main() -> None:
        ours, _theirs = socket.socketpair()
        mux = Mux(*await connect(sock=ours))
        with pytest.raises(ValueError, match="reserved"):
            mux.open(0)
        mux.open(1)
        with pytest.raises(ValueError, match="already open"):
            mux.open(1)
        await mux.close()
        assert await mux.open(3).recv() == b""

    asyncio.run(main())


async def test_concurrent_large_sends_stay_contiguous(trunk) -> None:  # type: ignore[no-untyped-def]
    mux, peer_reader, _ = trunk
    channels = [mux.open(1), mux.open(2)]
    mux.start()
    sizes = [100, 5000, 70_000, 4096, 4097, 300_000]

    def message(conn: int, i: int, size: int) -> bytes:
        body = bytes([conn * 16 + i]) * size
        return len(body).to_bytes(4, "big") + (2 * i + 1).to_bytes(4, "big") + b"\x02\x00" + body

    async def sender(conn: int) -> None:
        for i, size in enumerate(sizes):
            await channels[conn - 1].send(message(conn, i, size))

    readers = {1: GoConnReader(), 2: GoConnReader()}
    received: dict[int, list[bytes]] = {1: [], 2: []}
    decoder = MuxDecoder()

    async def receive() -> None:
        while sum(len(v) for v in received.values()) < 2 * len(sizes):
            for conn_id, payload in decoder.feed(await peer_reader.read(1 << 16)):
                readers[conn_id].push_frame(payload)
                while (msg := readers[conn_id].next_message()) is not None:
                    received[conn_id].append(msg)

    await asyncio.gather(sender(1), sender(2), receive())
    for conn in (1, 2):
        assert received[conn] == [message(conn, i, n) for i, n in enumerate(sizes)]


async def test_nothing_is_read_before_start() -> None:
    ours, theirs = socket.socketpair()
    mux = Mux(*await connect(sock=ours))
    theirs.sendall(HEADER.pack(1, 2) + b"hi")
    theirs.close()
    await asyncio.sleep(0.05)
    assert not mux.closed  # neither the frame nor the end was read
    one = mux.open(1)  # a channel opened late still sees the first bytes
    mux.start()
    assert await one.recv() == b"hi"
    assert await one.recv() == b""
    assert mux.error is None


async def test_a_socket_lost_before_start_ends_the_mux_at_start() -> None:
    ours, _theirs = socket.socketpair()
    trunk, writer = await connect(sock=ours)
    mux = Mux(trunk, writer)
    one = mux.open(1)
    writer.transport.abort()
    await asyncio.sleep(0)
    assert not mux.closed
    mux.start()
    assert mux.closed and mux.error is None
    assert await one.recv() == b""
