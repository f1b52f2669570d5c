"""The byte transport under a ttrpc connection, and its plain-socket implementation.

ttrpc endpoints only need "next bytes in" and "one whole message out". Over NRI the transport
is a logical connection of the multiplexer, whose writer must see each ttrpc message whole to
frame it the way the Go peer expects; over a plain socket it is a stream pair.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from nri_topology.ttrpc.codec import Frame, FrameDecoder, Oversized, ProtocolError

_log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024


class Channel(Protocol):
    """A ttrpc connection's transport."""

    async def recv(self) -> bytes:
        """Next bytes of the incoming stream, any split; b"" at end of stream."""
        ...

    async def send(self, message: bytes) -> None:
        """Write exactly one whole ttrpc message (header + data)."""
        ...

    def close(self) -> None:
        """Stop both directions; a pending or later recv returns b"" or raises."""
        ...


class StreamChannel:
    """Channel over an asyncio stream pair, i.e. ttrpc directly on a socket."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        read_size: int = READ_SIZE,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._read_size = read_size

    async def recv(self) -> bytes:
        return await self._reader.read(self._read_size)

    async def send(self, message: bytes) -> None:
        self._writer.write(message)
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()


async def incoming(channel: Channel, side: str) -> AsyncIterator[Frame | Oversized]:
    """Decoded frames of `channel` until EOF, a lost connection or a protocol error.

    The end is logged (`side` is "client" or "server"), never raised: either way the connection
    is over and the caller closes its side.
    """
    decoder = FrameDecoder()
    while True:
        try:
            data = await channel.recv()
        except Exception as exc:
            _log.info("ttrpc %s: connection lost: %s", side, exc)
            return
        if not data:
            return
        try:
            items = decoder.feed(data)
        except ProtocolError as exc:
            _log.warning("ttrpc %s: closing on protocol error: %s", side, exc)
            return
        for item in items:
            yield item
