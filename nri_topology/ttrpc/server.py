"""asyncio ttrpc server: dispatches unary requests on one Channel to async handlers.

Answers the way the Go server does (docs/protocol.md §4.3, §4.5, §4.6), because the runtime
relies on the exact codes: UNIMPLEMENTED for unknown methods triggers NRI's StateChange
fallback, and any handler failure must become a status, never a dead connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.channel import Channel, incoming
from nri_topology.ttrpc.codec import (
    MAX_DATA,
    TYPE_DATA,
    TYPE_RESPONSE,
    Code,
    Frame,
    Oversized,
    ProtocolError,
    RequestEnvelope,
    Status,
    TtrpcError,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallContext:
    """What a handler may want to know about the call besides its payload."""

    service: str
    method: str
    stream_id: int
    deadline: float | None  # time.monotonic() value derived from timeout_nano; None = no deadline
    metadata: tuple[tuple[str, str], ...] = ()

    def remaining(self) -> float | None:
        """Seconds left until the caller gives up, or None when it set no deadline."""
        return None if self.deadline is None else self.deadline - time.monotonic()


Handler = Callable[[bytes, CallContext], Awaitable[bytes]]
"""Serialized request message in, serialized response message out; raise TtrpcError to fail."""


class TtrpcServer:
    """Server end of one ttrpc connection."""

    def __init__(self, channel: Channel, services: Mapping[str, Mapping[str, Handler]]) -> None:
        self._channel = channel
        self._services = services
        self._send_lock = asyncio.Lock()
        self._handlers: set[asyncio.Task[None]] = set()
        self._last_stream_id = 0

    async def serve(self) -> None:
        """Serve until the peer closes or breaks the protocol; in-flight handlers are cancelled."""
        try:
            async for item in incoming(self._channel, "server"):
                self._dispatch(item)
        finally:
            for task in list(self._handlers):
                task.cancel()
            for task in list(self._handlers):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._channel.close()

    def _dispatch(self, item: Frame | Oversized) -> None:
        stream_id = item.stream_id
        if item.type == TYPE_RESPONSE:
            _log.warning("ttrpc server: ignoring a response on stream %d", stream_id)
            return
        if stream_id % 2 != 1:
            message = "StreamID must be odd for client initiated streams"
            self._reply_error(stream_id, Code.INVALID_ARGUMENT, message)
            return
        if item.type == TYPE_DATA:
            # Only unary calls exist here, so no stream is ever open for data.
            self._reply_error(stream_id, Code.INVALID_ARGUMENT, "StreamID is no longer active")
            return
        if stream_id <= self._last_stream_id:
            self._reply_error(
                stream_id, Code.INVALID_ARGUMENT, "StreamID cannot be re-used and must increment"
            )
            return
        self._last_stream_id = stream_id
        if isinstance(item, Oversized):
            self._reply_error(
                stream_id,
                Code.RESOURCE_EXHAUSTED,
                f"message length {item.length} exceed maximum message size of {MAX_DATA}",
            )
            return
        try:
            request = codec.decode_request(item.data)
        except ProtocolError as exc:
            self._reply_error(
                stream_id, Code.INVALID_ARGUMENT, f"unmarshal request error: {exc.message}"
            )
            return
        self._spawn(self._handle(stream_id, request))

    def _reply_error(self, stream_id: int, code: Code, message: str) -> None:
        self._spawn(self._send(stream_id, codec.encode_response(b"", Status(code, message))))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, stream_id: int, request: RequestEnvelope) -> None:
        service = self._services.get(request.service)
        handler = None if service is None else service.get(request.method)
        if service is None:
            response = _error(Code.UNIMPLEMENTED, f"service {request.service}")
        elif handler is None:
            response = _error(Code.UNIMPLEMENTED, f"method {request.method}")
        else:
            deadline = None
            if request.timeout_nano:
                deadline = time.monotonic() + request.timeout_nano / 1e9
            context = CallContext(
                request.service, request.method, stream_id, deadline, request.metadata
            )
            response = await self._run(handler, request.payload, context)
        await self._send(stream_id, response)

    async def _run(self, handler: Handler, payload: bytes, context: CallContext) -> bytes:
        """The encoded Response for one handler call; failures become statuses."""
        name = f"{context.service}/{context.method}"
        try:
            result = await handler(payload, context)
        except TtrpcError as exc:
            return _error(exc.code, exc.message)
        except Exception as exc:
            _log.exception("ttrpc server: handler %s failed", name)
            return _error(Code.UNKNOWN, str(exc) or type(exc).__name__)
        if not isinstance(result, bytes | bytearray):
            _log.error("ttrpc server: handler %s returned %s", name, type(result).__name__)
            return _error(Code.UNKNOWN, f"ttrpc: handler returned {type(result).__name__}")
        response = codec.encode_response(bytes(result))
        if len(response) > MAX_DATA:
            _log.error("ttrpc server: %s response of %d bytes is too large", name, len(response))
            return _error(Code.RESOURCE_EXHAUSTED, codec.MessageTooLarge(len(response)).message)
        return response

    async def _send(self, stream_id: int, response: bytes) -> None:
        message = codec.encode_frame(Frame(stream_id, TYPE_RESPONSE, 0, response))
        async with self._send_lock:
            try:
                await self._channel.send(message)
            except Exception as exc:
                # The read side sees the same failure and ends serve().
                _log.warning("ttrpc server: reply on stream %d not sent: %s", stream_id, exc)


def _error(code: Code | int, message: str) -> bytes:
    return codec.encode_response(b"", Status(code, message))
