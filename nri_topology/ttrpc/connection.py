"""The rules of one ttrpc connection without any I/O: bytes in, events out, replies as bytes.

The h11 way: `ServerConnection` and `ClientConnection` hold all an endpoint must remember about
its streams (which ids are valid, which calls are open, what is owed to whom) and the answers
the Go peer gives when a rule is broken (docs/protocol.md §4), so these rules are table-tested
without sockets. The asyncio endpoints in `server` and `client` only move bytes and run handlers.

Only unary calls exist: a stream opens with one request and closes with its one response.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.codec import (
    MAX_DATA,
    TYPE_DATA,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Code,
    Frame,
    FrameDecoder,
    MessageTooLarge,
    Oversized,
    ProtocolError,
    RequestEnvelope,
    ResponseEnvelope,
    Status,
    TtrpcError,
)

MAX_STREAM_ID = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A call the server must answer with `ServerConnection.respond` or `fail`."""

    stream_id: int
    request: RequestEnvelope


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """The outcome of an open call: the peer's response, or why it cannot be read."""

    stream_id: int
    result: ResponseEnvelope | TtrpcError


@dataclass(frozen=True, slots=True)
class Rejected:
    """A frame that broke a stream rule; `reply` is the error response to send back."""

    stream_id: int
    reply: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """A frame dropped without an answer, as the Go peer drops it."""

    stream_id: int
    reason: str


ServerEvent = RequestReceived | Rejected | Ignored
ClientEvent = ResponseReceived | Ignored


def response_message(stream_id: int, response: bytes) -> bytes:
    """One whole TYPE_RESPONSE message carrying an encoded Response."""
    return codec.encode_frame(Frame(stream_id, TYPE_RESPONSE, 0, response))


def error_message(stream_id: int, code: Code | int, message: str) -> bytes:
    """One whole response message that fails `stream_id` with a status."""
    return response_message(stream_id, codec.encode_response(b"", Status(code, message)))


class ServerConnection:
    """Server side: client-initiated odd, increasing stream ids; one response per request.

    `receive_data` raises ProtocolError when the bytes are not ttrpc at all; the connection is
    then over and keeps raising.
    """

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._last_stream_id = 0
        self._open: set[int] = set()

    @property
    def open_streams(self) -> frozenset[int]:
        """Requests received and not answered yet."""
        return frozenset(self._open)

    def receive_data(self, data: bytes) -> list[ServerEvent]:
        return [self._event(item) for item in self._decoder.feed(data)]

    def _event(self, item: Frame | Oversized) -> ServerEvent:
        stream_id = item.stream_id
        if item.type == TYPE_RESPONSE:
            return Ignored(stream_id, "response sent to a server")
        if stream_id % 2 != 1:
            return _reject(stream_id, "StreamID must be odd for client initiated streams")
        if item.type == TYPE_DATA:
            # unary calls only: the request closed the client's side, so no stream takes data
            return _reject(stream_id, "StreamID is no longer active")
        if stream_id <= self._last_stream_id:
            return _reject(stream_id, "StreamID cannot be re-used and must increment")
        self._last_stream_id = stream_id
        if isinstance(item, Oversized):
            too_large = MessageTooLarge(item.length).message
            reply = error_message(stream_id, Code.RESOURCE_EXHAUSTED, too_large)
            return Rejected(stream_id, reply, too_large)
        try:
            request = codec.decode_request(item.data)
        except ProtocolError as exc:
            return _reject(stream_id, f"unmarshal request error: {exc.message}")
        self._open.add(stream_id)
        return RequestReceived(stream_id, request)

    def respond(self, stream_id: int, payload: bytes) -> bytes:
        """The message answering an open request with `payload`; raises MessageTooLarge
        (the stream stays open, to be failed) when the response would exceed the limit."""
        self._check_open(stream_id)
        response = codec.encode_response(payload)
        if len(response) > MAX_DATA:
            raise MessageTooLarge(len(response))
        self._open.discard(stream_id)
        return response_message(stream_id, response)

    def fail(self, stream_id: int, code: Code | int, message: str) -> bytes:
        """The message failing an open request with a status."""
        self._check_open(stream_id)
        self._open.discard(stream_id)
        return error_message(stream_id, code, message)

    def _check_open(self, stream_id: int) -> None:
        if stream_id not in self._open:
            raise ValueError(f"ttrpc: stream {stream_id} has no request to answer")


def _reject(stream_id: int, message: str) -> Rejected:
    return Rejected(stream_id, error_message(stream_id, Code.INVALID_ARGUMENT, message), message)


class ClientConnection:
    """Client side: odd, increasing stream ids (1, 3, 5, ... like the Go client); responses
    are matched to open calls in any order, and dropped once the caller gave up."""

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._next_id = 1
        self._open: set[int] = set()

    @property
    def open_streams(self) -> frozenset[int]:
        """Calls sent and not answered or abandoned yet."""
        return frozenset(self._open)

    def request(
        self,
        service: str,
        method: str,
        payload: bytes,
        timeout_nano: int = 0,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> tuple[int, bytes]:
        """Open a call: its stream id and the whole message to send.

        Raises MessageTooLarge for a request above the limit and RESOURCE_EXHAUSTED once the
        32-bit stream ids are used up; nothing is opened then.
        """
        data = codec.encode_request(service, method, payload, timeout_nano, metadata)
        if len(data) > MAX_DATA:
            raise MessageTooLarge(len(data))
        stream_id = self._next_id
        if stream_id > MAX_STREAM_ID:
            raise TtrpcError(Code.RESOURCE_EXHAUSTED, "ttrpc: stream ids exhausted")
        self._next_id += 2
        self._open.add(stream_id)
        return stream_id, codec.encode_frame(Frame(stream_id, TYPE_REQUEST, 0, data))

    def abandon(self, stream_id: int) -> None:
        """The caller stopped waiting (deadline, cancellation): a late response is dropped."""
        self._open.discard(stream_id)

    def receive_data(self, data: bytes) -> list[ClientEvent]:
        return [self._event(item) for item in self._decoder.feed(data)]

    def _event(self, item: Frame | Oversized) -> ClientEvent:
        stream_id = item.stream_id
        if item.type != TYPE_RESPONSE:
            return Ignored(stream_id, f"message type {item.type} sent to a client")
        if stream_id not in self._open:
            return Ignored(stream_id, "response for a stream not open")
        self._open.discard(stream_id)
        if isinstance(item, Oversized):
            return ResponseReceived(stream_id, MessageTooLarge(item.length))
        try:
            return ResponseReceived(stream_id, codec.decode_response(item.data))
        except ProtocolError as exc:
            return ResponseReceived(stream_id, exc)
