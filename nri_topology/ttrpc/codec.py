"""ttrpc wire format without any I/O: frame headers, a streaming frame decoder, envelopes.

Kept free of sockets and asyncio so the byte-level rules (docs/protocol.md §4) can be
tested exhaustively and reused by any transport, e.g. the NRI multiplexer's logical
connections. Nothing here knows about NRI.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from google.protobuf.message import DecodeError

from nri_topology.ttrpc import request_pb2, status_pb2

HEADER_SIZE = 10
MAX_DATA = 4 << 20

TYPE_REQUEST = 1
TYPE_RESPONSE = 2
TYPE_DATA = 3
KNOWN_TYPES = frozenset({TYPE_REQUEST, TYPE_RESPONSE, TYPE_DATA})

FLAG_REMOTE_CLOSED = 1
FLAG_REMOTE_OPEN = 2
FLAG_NO_DATA = 4

_HEADER = struct.Struct(">IIBB")
_U32_MAX = 0xFFFFFFFF


class Code(IntEnum):
    """google.rpc status codes, the only error vocabulary ttrpc peers share."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def to_code(value: int) -> Code | int:
    """``Code`` for a known value; unknown values from a peer stay plain ints, never fail."""
    try:
        return Code(value)
    except ValueError:
        return value


class TtrpcError(Exception):
    """A failed call or a status to answer with: a code plus a human-readable message."""

    def __init__(self, code: Code | int, message: str) -> None:
        super().__init__(code, message)
        self.code = to_code(code)
        self.message = message

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, Code) else str(self.code)
        return f"{name}: {self.message}"


class ProtocolError(TtrpcError):
    """The peer broke the wire format; the connection cannot be trusted any more."""

    def __init__(self, message: str) -> None:
        super().__init__(Code.INTERNAL, message)


class MessageTooLarge(TtrpcError):
    """Data above MAX_DATA, which no ttrpc peer accepts; nothing was sent."""

    def __init__(self, length: int) -> None:
        super().__init__(
            Code.RESOURCE_EXHAUSTED,
            f"message length {length} exceed maximum message size of {MAX_DATA}",
        )
        self.length = length


@dataclass(frozen=True)
class Frame:
    """One ttrpc message: header fields plus its data (an encoded Request or Response)."""

    stream_id: int
    type: int
    flags: int
    data: bytes


@dataclass(frozen=True)
class Oversized:
    """A frame whose announced length exceeded MAX_DATA; its data was skipped, not kept."""

    stream_id: int
    type: int
    length: int


def encode_frame(frame: Frame) -> bytes:
    """Header + data, ready for one write; the header fields must fit their wire sizes."""
    length = len(frame.data)
    if length > MAX_DATA:
        raise MessageTooLarge(length)
    if not 0 <= frame.stream_id <= _U32_MAX:
        raise ValueError(f"stream id {frame.stream_id} does not fit 32 bits")
    if not (0 <= frame.type <= 0xFF and 0 <= frame.flags <= 0xFF):
        raise ValueError(f"type {frame.type} / flags {frame.flags} do not fit a byte")
    return _HEADER.pack(length, frame.stream_id, frame.type, frame.flags) + frame.data


class FrameDecoder:
    """Turns an arbitrarily split byte stream into frames.

    Holds at most one incomplete frame (≤ HEADER_SIZE + MAX_DATA) plus the latest input:
    data of an oversized frame is dropped as it arrives, so a hostile length costs nothing.
    After a ProtocolError the decoder stays failed; the caller closes the connection.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip = 0
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held while waiting for the rest of a frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame | Oversized]:
        """Consume ``data``; return every frame (or oversize notice) it completes, in order."""
        if self._error is not None:
            raise self._error
        if not self._buffer and not self._skip and len(data) >= HEADER_SIZE:
            # Most reads are one whole frame: no copy into the buffer and out again.
            length, stream_id, type_, flags = _HEADER.unpack_from(data)
            if len(data) == HEADER_SIZE + length and type_ in KNOWN_TYPES and length <= MAX_DATA:
                return [Frame(stream_id, type_, flags, bytes(data[HEADER_SIZE:]))]
        buffer = self._buffer
        buffer += data
        out: list[Frame | Oversized] = []
        pos = 0
        try:
            while True:
                if self._skip:
                    dropped = min(self._skip, len(buffer) - pos)
                    self._skip -= dropped
                    pos += dropped
                    if self._skip:
                        break
                if len(buffer) - pos < HEADER_SIZE:
                    break
                length, stream_id, type_, flags = _HEADER.unpack_from(buffer, pos)
                if type_ not in KNOWN_TYPES:
                    self._error = ProtocolError(
                        f"ttrpc: unknown message type {type_} on stream {stream_id}"
                    )
                    raise self._error
                if length > MAX_DATA:
                    out.append(Oversized(stream_id, type_, length))
                    pos += HEADER_SIZE
                    self._skip = length
                    continue
                end = pos + HEADER_SIZE + length
                if len(buffer) < end:
                    break
                out.append(Frame(stream_id, type_, flags, bytes(buffer[pos + HEADER_SIZE : end])))
                pos = end
        finally:
            del buffer[:pos]
        return out


@dataclass(frozen=True)
class RequestEnvelope:
    """A decoded ttrpc.Request."""

    service: str
    method: str
    payload: bytes
    timeout_nano: int = 0
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Status:
    """google.rpc.Status as carried in a Response (details are not used by NRI)."""

    code: Code | int
    message: str = ""


@dataclass(frozen=True)
class ResponseEnvelope:
    """A decoded ttrpc.Response: status is None when the peer sent none (success)."""

    status: Status | None
    payload: bytes

    def error(self) -> TtrpcError | None:
        """The error this response reports, or None: a missing status or code 0 is success."""
        if self.status is None or self.status.code == Code.OK:
            return None
        return TtrpcError(self.status.code, self.status.message)


def encode_request(
    service: str,
    method: str,
    payload: bytes,
    timeout_nano: int = 0,
    metadata: Iterable[tuple[str, str]] = (),
) -> bytes:
    """Serialized ttrpc.Request (the data of a TYPE_REQUEST frame)."""
    request = request_pb2.Request(
        service=service, method=method, payload=payload, timeout_nano=timeout_nano
    )
    for key, value in metadata:
        request.metadata.add(key=key, value=value)
    return request.SerializeToString()


def decode_request(data: bytes) -> RequestEnvelope:
    """Parse a Request; malformed input raises ProtocolError naming the problem."""
    request = request_pb2.Request()
    try:
        request.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise ProtocolError(f"invalid ttrpc Request ({len(data)} bytes): {exc}") from None
    metadata = request.metadata
    return RequestEnvelope(
        request.service,
        request.method,
        request.payload,
        request.timeout_nano,
        tuple((kv.key, kv.value) for kv in metadata) if metadata else (),
    )


def varint(value: int) -> bytes:
    """A non-negative integer as protobuf writes it: 7 bits a byte, low first."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_RESPONSE_PAYLOAD = bytes([2 << 3 | 2])  # Response.payload: field 2, length-delimited


def encode_response(payload: bytes = b"", status: Status | None = None) -> bytes:
    """Serialized Response: success is payload only (empty ⇒ zero bytes), errors add a status."""
    if status is None:  # every reply of a handler: its one field written directly
        return _RESPONSE_PAYLOAD + varint(len(payload)) + payload if payload else b""
    response = request_pb2.Response(payload=payload)
    if status is not None:
        response.status.CopyFrom(status_pb2.Status(code=int(status.code), message=status.message))
    return response.SerializeToString()


def decode_response(data: bytes) -> ResponseEnvelope:
    """Parse a Response; malformed input raises ProtocolError naming the problem."""
    response = request_pb2.Response()
    try:
        response.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise ProtocolError(f"invalid ttrpc Response ({len(data)} bytes): {exc}") from None
    status = None
    if response.HasField("status"):
        status = Status(to_code(response.status.code), response.status.message)
    return ResponseEnvelope(status=status, payload=response.payload)
