"""asyncio ttrpc client: unary calls multiplexed over one Channel.

Calls get odd, increasing stream ids (1, 3, 5, ...) like the Go client, many may be in
flight, and responses are matched by stream id in whatever order they arrive. Deadlines are
enforced here, at the caller, as ttrpc does; the server only learns of them via timeout_nano.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from nri_topology.ttrpc.channel import Channel, pump
from nri_topology.ttrpc.codec import (
    Code,
    MessageTooLarge,
    ProtocolError,
    ResponseEnvelope,
    TtrpcError,
)
from nri_topology.ttrpc.connection import ClientConnection, Ignored, ResponseReceived

_log = logging.getLogger(__name__)


def closed_error() -> TtrpcError:
    """What every call fails with once the connection is gone (the Go client's wording)."""
    return TtrpcError(Code.UNAVAILABLE, "ttrpc: closed")


def _retrieve_exception(future: asyncio.Future[object]) -> None:
    """Mark a failure as seen: it was already reported to the caller, or nobody waits for it."""
    if not future.cancelled():
        future.exception()


class TtrpcClient:
    """Client end of one ttrpc connection: the stream rules are `ClientConnection`'s, this
    class sends its messages and wakes the caller its responses belong to."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._conn = ClientConnection()
        self._pending: dict[int, asyncio.Future[ResponseEnvelope]] = {}
        self._send_lock = asyncio.Lock()
        self._started = False
        self._reader: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        """Return once the connection has gone (peer EOF, error, or close())."""
        await self._closed.wait()

    def start(self) -> None:
        """Start reading responses; idempotent, and call() does it on first use."""
        if self._started or self.closed:
            return
        self._started = True
        attach = getattr(self._channel, "attach", None)
        if attach is not None:
            attach(self)  # the transport's reader feeds us: no task, no queue of our own
        else:
            self._reader = asyncio.get_running_loop().create_task(
                pump(self._channel, self, "client"), name="ttrpc-client-reader"
            )

    async def call(
        self,
        service: str,
        method: str,
        payload: bytes,
        *,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> bytes:
        """Make one unary call and return the serialized response message.

        Raises TtrpcError: the server's status when it is not OK, DEADLINE_EXCEEDED when
        ``timeout`` (seconds) passes first, UNAVAILABLE once the connection is closed, and
        RESOURCE_EXHAUSTED for a request or response above the 4 MiB limit.
        """
        if self.closed:
            raise closed_error()
        self.start()
        timeout_nano = 0 if timeout is None else max(1, round(timeout * 1e9))
        stream_id, message = self._conn.request(service, method, payload, timeout_nano, metadata)
        future: asyncio.Future[ResponseEnvelope] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            async with asyncio.timeout(timeout):
                # Shielded: a cancelled caller must not leave half a message on the wire.
                send = asyncio.ensure_future(self._send(message))
                send.add_done_callback(_retrieve_exception)
                await asyncio.shield(send)
                response = await future
        except TimeoutError:
            raise TtrpcError(
                Code.DEADLINE_EXCEEDED, f"ttrpc: {service}/{method}: deadline exceeded"
            ) from None
        finally:
            self._pending.pop(stream_id, None)
            self._conn.abandon(stream_id)
            if future.done():
                _retrieve_exception(future)
            else:
                future.cancel()
        error = response.error()
        if error is not None:
            raise error
        return response.payload

    async def close(self) -> None:
        """Close the connection; pending and later calls fail with UNAVAILABLE."""
        reader = self._reader
        if reader is not None and not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        self._shutdown()

    async def _send(self, message: bytes) -> None:
        async with self._send_lock:
            if self.closed:
                raise closed_error()
            try:
                await self._channel.send(message)
            except Exception as exc:
                _log.warning("ttrpc client: send failed, closing: %s", exc)
                self._shutdown()
                raise closed_error() from exc

    def data_received(self, data: bytes) -> bool:
        if self.closed:
            return False
        try:
            events = self._conn.receive_data(data)
        except ProtocolError as exc:
            _log.warning("ttrpc client: closing on protocol error: %s", exc)
            self._shutdown()
            return False
        for event in events:
            if type(event) is ResponseReceived:
                future = self._pending.get(event.stream_id)
                if future is None or future.done():
                    continue
                result = event.result
                if isinstance(result, TtrpcError):
                    if isinstance(result, MessageTooLarge):
                        _log.warning(
                            "ttrpc client: dropped %d-byte message on stream %d",
                            result.length,
                            event.stream_id,
                        )
                    future.set_exception(result)
                else:
                    future.set_result(result)
            elif type(event) is Ignored:
                _log.debug("ttrpc client: stream %d: %s", event.stream_id, event.reason)
        return True

    def connection_lost(self, error: BaseException | None) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self._closed.set()
        self._channel.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(closed_error())
        self._pending.clear()
