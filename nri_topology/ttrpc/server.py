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
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from nri_topology.ttrpc.channel import Channel, pump
from nri_topology.ttrpc.codec import Code, MessageTooLarge, ProtocolError, TtrpcError
from nri_topology.ttrpc.connection import Ignored, Rejected, RequestReceived, ServerConnection

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
    """Server end of one ttrpc connection: the stream rules are `ServerConnection`'s, this
    class reads bytes into it and runs one task per request."""

    def __init__(self, channel: Channel, services: Mapping[str, Mapping[str, Handler]]) -> None:
        self._channel = channel
        self._services = services
        self._conn = ServerConnection()
        self._send_lock = asyncio.Lock()
        self._handlers: set[asyncio.Task[None]] = set()
        self._ended: asyncio.Event | None = None
        self._over = False

    async def serve(self) -> None:
        """Serve until the peer closes or breaks the protocol; in-flight handlers are cancelled."""
        self._ended = asyncio.Event()
        try:
            attach = getattr(self._channel, "attach", None)
            if attach is not None:
                attach(self)  # the transport's reader feeds us: no task, no queue of our own
                await self._ended.wait()
            else:
                await pump(self._channel, self, "server")
        finally:
            self._over = True
            for task in list(self._handlers):
                task.cancel()
            for task in list(self._handlers):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._channel.close()

    def data_received(self, data: bytes) -> bool:
        if self._over:
            return False
        try:
            events = self._conn.receive_data(data)
        except ProtocolError as exc:
            _log.warning("ttrpc server: closing on protocol error: %s", exc)
            self.connection_lost(None)
            return False
        for event in events:
            if type(event) is RequestReceived:
                self._spawn(self._handle(event))
            elif type(event) is Rejected:
                # a task as well, so that answers leave in the order the requests came
                self._spawn(self._send(event.stream_id, event.reply))
            elif type(event) is Ignored:
                _log.warning("ttrpc server: stream %d: %s", event.stream_id, event.reason)
        return True

    def connection_lost(self, error: BaseException | None) -> None:
        self._over = True
        if self._ended is not None:
            self._ended.set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """A task from the start, also for the many handlers that never suspend: before their
        first await they may need to be in one (`asyncio.timeout`, a ttrpc call's deadline)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, event: RequestReceived) -> None:
        if self._over:  # lost since it was read (an earlier reply's write failed): not started
            return
        request = event.request
        stream_id = event.stream_id
        service = self._services.get(request.service)
        handler = None if service is None else service.get(request.method)
        if service is None:
            message = self._conn.fail(stream_id, Code.UNIMPLEMENTED, f"service {request.service}")
        elif handler is None:
            message = self._conn.fail(stream_id, Code.UNIMPLEMENTED, f"method {request.method}")
        else:
            deadline = None
            if request.timeout_nano:
                deadline = time.monotonic() + request.timeout_nano / 1e9
            context = CallContext(
                request.service, request.method, stream_id, deadline, request.metadata
            )
            message = await self._run(handler, request.payload, context)
        await self._send(stream_id, message)

    async def _run(self, handler: Handler, payload: bytes, context: CallContext) -> bytes:
        """The response message for one handler call; failures become statuses."""
        stream_id = context.stream_id
        try:
            result = await handler(payload, context)
        except TtrpcError as exc:
            return self._conn.fail(stream_id, exc.code, exc.message)
        except Exception as exc:
            _log.exception("ttrpc server: handler %s failed", _name(context))
            return self._conn.fail(stream_id, Code.UNKNOWN, str(exc) or type(exc).__name__)
        if not isinstance(result, bytes | bytearray):
            kind = type(result).__name__
            _log.error("ttrpc server: handler %s returned %s", _name(context), kind)
            return self._conn.fail(stream_id, Code.UNKNOWN, f"ttrpc: handler returned {kind}")
        try:
            return self._conn.respond(stream_id, bytes(result))
        except MessageTooLarge as exc:
            name = _name(context)
            _log.error("ttrpc server: %s response of %d bytes is too large", name, exc.length)
            return self._conn.fail(stream_id, exc.code, exc.message)

    async def _send(self, stream_id: int, message: bytes) -> None:
        async with self._send_lock:
            try:
                await self._channel.send(message)
            except Exception as exc:
                # The read side sees the same failure and ends serve().
                _log.warning("ttrpc server: reply on stream %d not sent: %s", stream_id, exc)


def _name(context: CallContext) -> str:
    return f"{context.service}/{context.method}"
