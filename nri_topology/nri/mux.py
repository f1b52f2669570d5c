"""NRI trunk multiplexer: two ttrpc connections share one unix socket.

The wire format is `[u32 BE conn id][u32 BE length][payload]` (docs/protocol.md §3). The
sans-IO part (`frame_message`, `MuxDecoder`) knows nothing about sockets, so the framing rules the
Go peer depends on can be tested byte by byte; `Mux` is the asyncio trunk on top of it: the socket's
protocol (`Trunk`, opened by `connect`) hands each read to it as the event loop makes it, and it
passes the payloads to per-connection `MuxChannel`s, straight into the ttrpc endpoint reading each
(no reader task, so a request costs no task step and no loop pass of its own before its
handler); one lock so that the frames of a ttrpc message leave contiguously.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable, Iterable

import structlog

from nri_topology.ttrpc.channel import Receiver

log = structlog.get_logger(__name__)

HEADER = struct.Struct(">II")
HEADER_SIZE = HEADER.size

PLUGIN_SERVICE_CONN = 1
"""Logical connection on which the runtime calls us and we serve the Plugin service."""
RUNTIME_SERVICE_CONN = 2
"""Logical connection on which we call the runtime's Runtime service."""

GO_BUFFER_SIZE = 4096
"""Size of Go's default bufio buffers; the Go ttrpc writer flushes the first frame at this size."""
GO_MAX_PAYLOAD = 10 + (4 << 20)
"""Largest frame payload the Go mux writes: a ttrpc header plus the ttrpc size limit."""
MAX_ACCEPTED_PAYLOAD = 1 << 24
"""Largest frame payload we accept. Older Go muxes (NRI v0.2.0) wrote frames up to 16 MiB; an
announced length beyond that can only be garbage, so we fail instead of buffering it."""


class MuxProtocolError(Exception):
    """The trunk carried bytes that cannot be NRI mux frames; the connection must be dropped."""


class MuxClosedError(ConnectionError):
    """A logical connection was used after the trunk had closed."""


def frame_message(conn_id: int, message: bytes) -> list[bytes]:
    """Frame one ttrpc message the way the Go peer does (§3.3).

    The first frame holds at most 4096 bytes and the second all the rest, because a Go reader can
    only accept a frame larger than 4096 bytes when it lines up with a large read; any further
    split only happens beyond the Go mux's own payload limit.
    """
    if not 0 <= conn_id <= 0xFFFFFFFF:
        raise ValueError(f"mux connection id out of range: {conn_id}")
    if len(message) <= GO_BUFFER_SIZE:
        return [HEADER.pack(conn_id, len(message)) + message]
    frames = [HEADER.pack(conn_id, GO_BUFFER_SIZE) + message[:GO_BUFFER_SIZE]]
    view = memoryview(message)
    for start in range(GO_BUFFER_SIZE, len(message), GO_MAX_PAYLOAD):
        chunk = view[start : start + GO_MAX_PAYLOAD]
        frames.append(HEADER.pack(conn_id, len(chunk)) + chunk.tobytes())
    return frames


class MuxDecoder:
    """Splits trunk bytes into `(conn_id, payload)` frames, whatever the read boundaries were.

    Any frame size up to `MAX_ACCEPTED_PAYLOAD` is accepted; a larger announced length raises
    `MuxProtocolError`, after which the decoder refuses further input (the stream is out of sync).
    """

    def __init__(self, max_payload: int = MAX_ACCEPTED_PAYLOAD) -> None:
        self._max_payload = max_payload
        self._buffer = bytearray()
        self._failed: MuxProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | memoryview) -> list[tuple[int, bytes]]:
        if self._failed is not None:
            raise self._failed
        if not self._buffer and len(data) >= HEADER_SIZE:
            # Most reads are one whole frame: no copy into the buffer and out again.
            conn_id, length = HEADER.unpack_from(data)
            if len(data) == HEADER_SIZE + length and length <= self._max_payload:
                return [(conn_id, bytes(data[HEADER_SIZE:]))]
        self._buffer += data
        frames: list[tuple[int, bytes]] = []
        offset = 0
        buffer = self._buffer
        while len(buffer) - offset >= HEADER_SIZE:
            conn_id, length = HEADER.unpack_from(buffer, offset)
            if length > self._max_payload:
                self._failed = MuxProtocolError(
                    f"mux frame for connection {conn_id} announces {length} bytes, "
                    f"more than the {self._max_payload} accepted"
                )
                self._buffer = bytearray()
                raise self._failed
            end = offset + HEADER_SIZE + length
            if end > len(buffer):
                break
            frames.append((conn_id, bytes(buffer[offset + HEADER_SIZE : end])))
            offset = end
        if offset:
            del buffer[:offset]
        return frames


class MuxChannel:
    """One logical connection: a byte stream of ttrpc messages (the ttrpc `PushChannel`).

    Once a receiver is attached, the trunk's reader hands it each payload directly; before, the
    payloads wait in a queue that `recv` reads (b"" once the trunk has closed). Frame
    boundaries carry no meaning. `send` takes exactly one whole ttrpc message.
    """

    def __init__(self, mux: Mux, conn_id: int) -> None:
        self._mux = mux
        self.conn_id = conn_id
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._receiver: Receiver | None = None
        self._eof = False

    def attach(self, receiver: Receiver) -> None:
        if self._receiver is not None:
            raise ValueError(f"mux connection {self.conn_id} already has a receiver")
        self._receiver = receiver
        while not self._queue.empty():
            data = self._queue.get_nowait()
            if not data:
                self._receiver = None
                receiver.connection_lost(self._mux.error)
                return
            if not receiver.data_received(data):
                self._receiver = None
                return

    def _deliver(self, payload: bytes) -> None:
        if not payload:
            return
        receiver = self._receiver
        if receiver is None:
            self._queue.put_nowait(payload)
        elif not receiver.data_received(payload):
            self._receiver = None

    def _close_read(self) -> None:
        if self._eof:
            return
        self._eof = True
        receiver, self._receiver = self._receiver, None
        if receiver is None:
            self._queue.put_nowait(b"")
        else:
            receiver.connection_lost(self._mux.error)

    async def recv(self) -> bytes:
        data = await self._queue.get()
        if not data:
            # keep reporting EOF to every later reader
            self._queue.put_nowait(b"")
        return data

    async def send(self, message: bytes) -> None:
        await self._mux.send(self.conn_id, message)

    def close(self) -> None:
        """Closing one logical connection sends nothing (§3.1); the trunk stays open."""
        self._mux._forget(self.conn_id)
        self._close_read()


READ_SIZE = 256 * 1024
"""The trunk's read buffer, as large as the event loop's own reads."""


class Trunk(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """The protocol of the socket under a `Mux`: hands the mux every read as the event loop makes
    it. Reading waits for `Mux.start`; an end of the stream that came before is kept until then.
    Writes go through an `asyncio.StreamWriter` on it, which keeps the streams' flow control.

    The socket is read into one buffer the trunk keeps. The event loop's own reads make a new
    256 KiB object each, above the C allocator's threshold for mapping memory from the kernel
    unless something earlier raised it: every message would then cost a fresh mapping, its page
    faults and its release, on every event.
    """

    def __init__(self) -> None:
        # Never read: the writer takes it, as from `asyncio.open_unix_connection`, to raise
        # the connection's failure from `drain`.
        self.reader = asyncio.StreamReader()
        super().__init__(self.reader)
        self._mux: Mux | None = None
        self._socket: asyncio.Transport | None = None
        self._ended: tuple[BaseException | None] | None = None  # before the mux started
        self._read = memoryview(bytearray(READ_SIZE))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert isinstance(transport, asyncio.Transport)
        self._socket = transport
        transport.pause_reading()  # until the mux has its channels and starts

    def start(self, mux: Mux) -> None:
        """Feed `mux` from now on."""
        self._mux = mux
        if self._ended is not None:
            mux._ended(*self._ended)
        elif self._socket is not None and not self._socket.is_closing():
            self._socket.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read

    def buffer_updated(self, nbytes: int) -> None:
        if self._mux is not None:  # the mux copies what it keeps: the buffer is read into again
            self._mux._received(self._read[:nbytes])

    def eof_received(self) -> bool:
        self._end(None)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._end(exc)

    def _end(self, error: BaseException | None) -> None:
        if self._mux is not None:
            self._mux._ended(error)
        elif self._ended is None:
            self._ended = (error,)


async def connect(
    path: str | None = None, *, sock: socket.socket | None = None
) -> tuple[Trunk, asyncio.StreamWriter]:
    """Open a unix socket (a path, or a connected socket) for a `Mux`: its protocol and writer."""
    loop = asyncio.get_running_loop()
    trunk = Trunk()
    transport, _ = await loop.create_unix_connection(lambda: trunk, path, sock=sock)
    return trunk, asyncio.StreamWriter(transport, trunk, trunk.reader, loop)


class Mux:
    """The asyncio trunk: routes incoming frames to channels, writes each message contiguously."""

    def __init__(
        self,
        trunk: Trunk,
        writer: asyncio.StreamWriter,
        *,
        framer: Callable[[int, bytes], Iterable[bytes]] = frame_message,
    ) -> None:
        self._trunk = trunk
        self._writer = writer
        self._framer = framer
        self._decoder = MuxDecoder()
        self._channels: dict[int, MuxChannel] = {}
        self._write_lock = asyncio.Lock()
        self._started = False
        self._closed = asyncio.Event()
        self.error: BaseException | None = None
        """Why the trunk closed: None for a clean EOF or a local close."""
        self.dropped_frames = 0

    def open(self, conn_id: int) -> MuxChannel:
        """Open a logical connection locally; nothing is signalled to the peer."""
        if conn_id == 0:
            raise ValueError("mux connection id 0 is reserved")
        if conn_id in self._channels:
            raise ValueError(f"mux connection {conn_id} is already open")
        channel = MuxChannel(self, conn_id)
        if self._closed.is_set():
            channel._close_read()
        else:
            self._channels[conn_id] = channel
        return channel

    def start(self) -> None:
        """Start reading the trunk; call after the channels that must see the first bytes exist."""
        if not self._started:
            self._started = True
            self._trunk.start(self)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def send(self, conn_id: int, message: bytes) -> None:
        if self._closed.is_set():
            raise MuxClosedError("NRI connection is closed")
        data = b"".join(self._framer(conn_id, message))
        async with self._write_lock:
            if self._closed.is_set():
                raise MuxClosedError("NRI connection is closed")
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._shutdown(exc)
                raise MuxClosedError(f"NRI connection lost while writing: {exc}") from exc

    async def close(self) -> None:
        """Close the trunk and end every channel's stream."""
        self._shutdown(None)
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()

    def _forget(self, conn_id: int) -> None:
        self._channels.pop(conn_id, None)

    def _shutdown(self, error: BaseException | None) -> None:
        if self._closed.is_set():
            return
        self.error = error
        self._closed.set()
        self._writer.close()
        for channel in list(self._channels.values()):
            channel._close_read()

    def _received(self, data: bytes | memoryview) -> None:
        """Bytes the trunk read: their complete frames go to their channels."""
        if self._closed.is_set():
            return
        try:
            frames = self._decoder.feed(data)
        except MuxProtocolError as exc:
            self._ended(exc)
            return
        for conn_id, payload in frames:
            channel = self._channels.get(conn_id)
            if channel is None:
                self.dropped_frames += 1
                log.debug("mux frame for unopened connection dropped", conn_id=conn_id)
                continue
            channel._deliver(payload)

    def _ended(self, error: BaseException | None) -> None:
        """The trunk's incoming stream ended: EOF (`error` None), a broken frame, or a failure."""
        if self._closed.is_set():
            return  # closed here first: what the socket does next is no news
        if error is None and self._decoder.buffered:
            error = MuxProtocolError(
                f"NRI connection closed inside a frame ({self._decoder.buffered} bytes pending)"
            )
        if error is not None:
            log.warning("NRI connection failed", error=str(error))
        self._shutdown(error)
