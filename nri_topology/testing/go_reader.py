"""How a Go NRI peer reads mux frames, so framing mistakes fail our tests as in production.

The Go mux hands one whole frame to each `conn.Read(buf)` and fails with ENOMEM when the frame is
larger than `buf`; ttrpc reads through a 4096-byte `bufio.Reader`, which passes its own buffer for
small reads and the caller's slice for reads of at least 4096 bytes into an empty buffer. A frame
therefore fits only if it lines up with ttrpc message boundaries (docs/protocol.md §3.3). The Go
mux also queues at most 256 unread frames per connection and closes everything on overflow.
"""

from __future__ import annotations

import struct
from collections import deque

BUFIO_SIZE = 4096
QUEUE_LIMIT = 256
TTRPC_HEADER = struct.Struct(">IIBB")
TTRPC_MAX_DATA = 4 << 20


class GoReadError(Exception):
    """The Go peer would have failed reading here and closed the connection."""


class GoConnReader:
    """One logical connection's receive side as the Go mux + ttrpc `channel.recv` see it.

    Sans-IO: `push_frame` is the mux reader goroutine, `next_message` the ttrpc receive loop
    (returning None when it would block for the next frame).
    """

    def __init__(self, queue_limit: int = QUEUE_LIMIT) -> None:
        self._frames: deque[bytes] = deque()
        self._queue_limit = queue_limit
        self._buffered = b""
        self._acc = bytearray()
        self._data_len: int | None = None  # None while reading the 10-byte header

    def push_frame(self, payload: bytes) -> None:
        if len(self._frames) >= self._queue_limit:
            raise GoReadError("failed to queue payload for reading")
        self._frames.append(payload)

    def _read(self, want: int) -> bytes | None:
        """One `bufio.Reader.Read` into a slice of `want` bytes."""
        if self._buffered:
            out, self._buffered = self._buffered[:want], self._buffered[want:]
            return out
        if not self._frames:
            return None
        frame = self._frames.popleft()
        if want >= BUFIO_SIZE:
            if len(frame) > want:
                raise GoReadError(
                    f"cannot allocate memory: {len(frame)}-byte frame read into {want} bytes"
                )
            return frame
        if len(frame) > BUFIO_SIZE:
            raise GoReadError(
                f"cannot allocate memory: {len(frame)}-byte frame read into the "
                f"{BUFIO_SIZE}-byte bufio buffer"
            )
        out, self._buffered = frame[:want], frame[want:]
        return out

    def next_message(self) -> bytes | None:
        """The next whole ttrpc message (header + data), or None until more frames arrive."""
        while True:
            target = 10 if self._data_len is None else 10 + self._data_len
            remaining = target - len(self._acc)
            if remaining == 0:
                if self._data_len is None:
                    self._data_len = TTRPC_HEADER.unpack_from(self._acc)[0]
                    if self._data_len > TTRPC_MAX_DATA:
                        raise GoReadError(
                            f"message length {self._data_len} exceeds maximum message size "
                            f"of {TTRPC_MAX_DATA}"
                        )
                    continue
                message = bytes(self._acc)
                self._acc.clear()
                self._data_len = None
                return message
            chunk = self._read(remaining)
            if chunk is None:
                return None
            self._acc += chunk
