"""The byte transport under a ttrpc connection, and its plain-socket implementation.

ttrpc endpoints only need "next bytes in" and "one whole message out". Over NRI the transport
is a logical connection of the multiplexer, whose writer must see each ttrpc message whole to
frame it the way the Go peer expects, and whose reader pushes bytes straight into the endpoint
(`PushChannel`); over a plain socket it is a stream pair the endpoint pulls from (`pump`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

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


class Receiver(Protocol):
    """A ttrpc endpoint's input side: fed bytes as they arrive, told when the stream ends."""

    def data_received(self, data: bytes) -> bool:
        """Consume the next bytes; False once the endpoint has closed and wants no more."""
        ...

    def connection_lost(self, error: BaseException | None) -> None:
        """The incoming stream ended: EOF (None) or a transport failure."""
        ...


class PushChannel(Channel, Protocol):
    """A channel that can feed a receiver directly, in the task that reads the transport."""

    def attach(self, receiver: Receiver) -> None:
        """From now on, call `receiver` with every incoming byte (queued ones first)."""
        ...


async def pump(channel: Channel, receiver: Receiver, side: str) -> None:
    """Feed `receiver` from a pull-only channel until the end of either.

    A lost connection is logged (`side` is "client" or "server"), never raised.
    """
    while True:
        try:
            data = await channel.recv()
        except Exception as exc:
            _log.info("ttrpc %s: connection lost: %s", side, exc)
            receiver.connection_lost(exc)
            return
        if not data:
            receiver.connection_lost(None)
            return
        if not receiver.data_received(data):
            return
