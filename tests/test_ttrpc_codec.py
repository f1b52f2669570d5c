"""ttrpc codec: frame header layout, streaming decoder, envelopes (docs/protocol.md §4)."""

from __future__ import annotations

import contextlib
import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_topology.ttrpc import codec, request_pb2
from nri_topology.ttrpc.codec import (
    HEADER_SIZE,
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

CAPTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "nri-capture"

frames_st = st.builds(
    Frame,
    stream_id=st.integers(0, 0xFFFFFFFF),
    type=st.sampled_from([TYPE_REQUEST, TYPE_RESPONSE, TYPE_DATA]),
    flags=st.integers(0, 0xFF),
    data=st.binary(max_size=300),
)


def _feed_in_chunks(data: bytes, cuts: list[int]) -> list[Frame | Oversized]:
    decoder = FrameDecoder()
    out: list[Frame | Oversized] = []
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        out += decoder.feed(data[start:end])
    assert decoder.buffered == 0
    return out


# --- frames ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "wire"),
    [
        # docs/protocol.md §4.7: empty RegisterPlugin reply, Configure reply, UNIMPLEMENTED header.
        (Frame(1, TYPE_RESPONSE, 0, b""), "00000000 00000001 02 00"),
        (Frame(1, TYPE_RESPONSE, 0, bytes.fromhex("1203108808")), "00000005 00000001 02 00"),
        (Frame(3, TYPE_RESPONSE, 0, b"x" * 0x1A), "0000001a 00000003 02 00"),
        (Frame(0xFFFFFFFF, TYPE_DATA, codec.FLAG_NO_DATA, b""), "00000000 ffffffff 03 04"),
        (Frame(7, TYPE_REQUEST, codec.FLAG_REMOTE_OPEN, b"ab"), "00000002 00000007 01 02"),
    ],
)
def test_header_layout(frame: Frame, wire: str) -> None:
    encoded = codec.encode_frame(frame)
    assert encoded[:HEADER_SIZE] == bytes.fromhex(wire.replace(" ", ""))
    assert encoded[HEADER_SIZE:] == frame.data


def test_largest_frame_is_accepted_and_one_more_byte_refused() -> None:
    assert len(codec.encode_frame(Frame(1, TYPE_REQUEST, 0, bytes(MAX_DATA)))) == MAX_DATA + 10
    with pytest.raises(MessageTooLarge) as err:
        codec.encode_frame(Frame(1, TYPE_REQUEST, 0, bytes(MAX_DATA + 1)))
    assert err.value.code == Code.RESOURCE_EXHAUSTED
    assert err.value.length == MAX_DATA + 1
    assert "exceed maximum message size of 4194304" in err.value.message


@pytest.mark.parametrize(
    "frame",
    [Frame(-1, 1, 0, b""), Frame(1 << 32, 1, 0, b""), Frame(1, 256, 0, b""), Frame(1, 1, -1, b"")],
)
def test_header_fields_out_of_range(frame: Frame) -> None:
    with pytest.raises(ValueError):
        codec.encode_frame(frame)


@settings(max_examples=60)
@given(st.lists(frames_st, max_size=6), st.lists(st.integers(0, 4000), max_size=12))
def test_any_split_gives_the_same_frames(frames: list[Frame], cuts: list[int]) -> None:
    wire = b"".join(codec.encode_frame(f) for f in frames)
    assert _feed_in_chunks(wire, cuts) == frames
    assert FrameDecoder().feed(wire) == frames


@settings(max_examples=60)
@given(st.lists(st.tuples(frames_st, st.integers(0, 12)), max_size=6))
def test_whole_frames_and_pieces_give_the_same_frames(fed: list[tuple[Frame, int]]) -> None:
    """A frame fed whole (the decoder's short cut) or cut in two at `cut` (its general path),
    in any mix: the same frames, nothing left over."""
    decoder = FrameDecoder()
    out: list[Frame | Oversized] = []
    for frame, cut in fed:
        data = codec.encode_frame(frame)
        if cut:
            out += decoder.feed(data[:cut])
            out += decoder.feed(data[cut:])
        else:
            out += decoder.feed(data)
    assert out == [frame for frame, _ in fed]
    assert decoder.buffered == 0


@settings(max_examples=25)
@given(st.lists(frames_st, min_size=1, max_size=3))
def test_one_byte_at_a_time(frames: list[Frame]) -> None:
    wire = b"".join(codec.encode_frame(f) for f in frames)
    decoder = FrameDecoder()
    out: list[Frame | Oversized] = []
    for i in range(len(wire)):
        out += decoder.feed(wire[i : i + 1])
    assert out == frames


def test_partial_frame_waits_for_the_rest() -> None:
    wire = codec.encode_frame(Frame(5, TYPE_REQUEST, 0, b"hello"))
    decoder = FrameDecoder()
    assert decoder.feed(wire[:12]) == []
    assert decoder.buffered == 12
    assert decoder.feed(wire[12:]) == [Frame(5, TYPE_REQUEST, 0, b"hello")]


def test_oversized_frame_is_skipped_without_buffering() -> None:
    # A header announcing 4 GiB: the decoder reports it once and drops data as it arrives.
    decoder = FrameDecoder()
    header = struct.pack(">IIBB", 0xFFFFFFFF, 9, TYPE_REQUEST, 0)
    assert decoder.feed(header) == [Oversized(9, TYPE_REQUEST, 0xFFFFFFFF)]
    chunk = bytes(1 << 16)
    for _ in range(8):
        assert decoder.feed(chunk) == []
        assert decoder.buffered == 0


def test_stream_continues_after_an_oversized_frame() -> None:
    length = MAX_DATA + 1
    follow = codec.encode_frame(Frame(11, TYPE_REQUEST, 0, b"next"))
    decoder = FrameDecoder()
    out = decoder.feed(struct.pack(">IIBB", length, 9, TYPE_RESPONSE, 0) + bytes(1000))
    assert out == [Oversized(9, TYPE_RESPONSE, length)]
    remaining = length - 1000
    chunk = bytes(1 << 20)
    while remaining > len(chunk):
        assert decoder.feed(chunk) == []
        remaining -= len(chunk)
    assert decoder.buffered == 0
    # The skipped tail and the next frame arrive in one read.
    assert decoder.feed(bytes(remaining) + follow) == [Frame(11, TYPE_REQUEST, 0, b"next")]


@pytest.mark.parametrize("bad_type", [0, 4, 0x7F, 0xFF])
def test_unknown_type_is_a_protocol_error_and_stays_one(bad_type: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match=f"unknown message type {bad_type}"):
        decoder.feed(struct.pack(">IIBB", 0, 1, bad_type, 0))
    with pytest.raises(ProtocolError):
        decoder.feed(codec.encode_frame(Frame(3, TYPE_REQUEST, 0, b"")))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_only_ever_raise_protocol_error(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    total = 0
    for chunk in chunks:
        total += len(chunk)
        try:
            decoder.feed(chunk)
        except ProtocolError:
            return
        assert decoder.buffered <= total


@settings(max_examples=100)
@given(st.lists(frames_st, min_size=1, max_size=3), st.data())
def test_mutated_streams_only_ever_raise_protocol_error(
    frames: list[Frame], data: st.DataObject
) -> None:
    wire = bytearray(b"".join(codec.encode_frame(f) for f in frames))
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    decoder = FrameDecoder()
    try:
        for item in decoder.feed(bytes(wire)):
            assert isinstance(item, Frame | Oversized)
    except ProtocolError:
        pass
    assert decoder.buffered <= len(wire)


# --- envelopes ---------------------------------------------------------------------------------

envelopes_st = st.builds(
    RequestEnvelope,
    service=st.text(max_size=40),
    method=st.text(max_size=40),
    payload=st.binary(max_size=200),
    timeout_nano=st.integers(-(1 << 63), (1 << 63) - 1),
    metadata=st.lists(st.tuples(st.text(max_size=10), st.text(max_size=10)), max_size=4).map(tuple),
)


@settings(max_examples=60)
@given(envelopes_st)
def test_request_round_trip(envelope: RequestEnvelope) -> None:
    data = codec.encode_request(
        envelope.service,
        envelope.method,
        envelope.payload,
        timeout_nano=envelope.timeout_nano,
        metadata=envelope.metadata,
    )
    assert codec.decode_request(data) == envelope


def test_request_bytes_match_protocol_doc() -> None:
    payload = bytes.fromhex("0a066c6f6767657212023130")  # RegisterPluginRequest logger/10
    data = codec.encode_request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", payload)
    frame = codec.encode_frame(Frame(1, TYPE_REQUEST, 0, data))
    assert frame[:HEADER_SIZE].hex() == "0000003c000000010100"


@pytest.mark.parametrize(
    ("payload", "status", "wire"),
    [
        (b"", None, ""),
        (bytes.fromhex("108808"), None, "1203108808"),
        (
            b"",
            Status(Code.UNIMPLEMENTED, "method RunPodSandbox"),
            "0a18080c1214" + b"method RunPodSandbox".hex(),
        ),
        (b"", Status(Code.OK), "0a00"),
    ],
)
def test_response_encoding(payload: bytes, status: Status | None, wire: str) -> None:
    data = codec.encode_response(payload, status)
    assert data.hex() == wire
    assert codec.decode_response(data) == ResponseEnvelope(status, payload)


@given(st.binary(max_size=70_000))
def test_success_responses_are_the_bytes_protobuf_writes(payload: bytes) -> None:
    """The success path writes the payload field by hand; protobuf is the reference."""
    reference = request_pb2.Response(payload=payload).SerializeToString()
    assert codec.encode_response(payload) == reference


@given(st.integers(0, 2**63 - 1))
def test_varint_is_protobufs(value: int) -> None:
    reference = request_pb2.Request(timeout_nano=value).SerializeToString()
    assert codec.varint(value) == (reference[1:] if value else b"\x00")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (None, None),
        (Status(Code.OK, "fine"), None),
        (Status(Code.UNKNOWN, "boom"), TtrpcError(Code.UNKNOWN, "boom")),
        (Status(99, "future"), TtrpcError(99, "future")),
    ],
)
def test_response_error(status: Status | None, error: TtrpcError | None) -> None:
    got = codec.decode_response(codec.encode_response(b"", status)).error()
    if error is None:
        assert got is None
    else:
        assert got is not None
        assert (got.code, got.message) == (error.code, error.message)


def test_unknown_status_code_stays_an_int() -> None:
    decoded = codec.decode_response(codec.encode_response(b"", Status(99, "x")))
    assert decoded.status == Status(99, "x")
    assert not isinstance(decoded.status.code, Code)
    assert str(TtrpcError(99, "x")) == "99: x"
    assert str(TtrpcError(Code.NOT_FOUND, "y")) == "NOT_FOUND: y"


@pytest.mark.parametrize("decode", [codec.decode_request, codec.decode_response])
@pytest.mark.parametrize(
    "garbage",
    [
        b"\x0a",
        b"\x0a\x05ab",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        b"\x07",
        b"\x0a\x02\xc3\x28",
    ],
)
def test_garbage_envelopes_raise_protocol_error(decode: object, garbage: bytes) -> None:
    with pytest.raises(ProtocolError, match="invalid ttrpc"):
        decode(garbage)  # type: ignore[operator]


@settings(max_examples=200)
@given(st.binary(max_size=80))
def test_random_envelopes_only_ever_raise_protocol_error(data: bytes) -> None:
    for decode in (codec.decode_request, codec.decode_response):
        with contextlib.suppress(ProtocolError):
            decode(data)


@settings(max_examples=100)
@given(envelopes_st, st.data())
def test_mutated_requests_only_ever_raise_protocol_error(
    envelope: RequestEnvelope, data: st.DataObject
) -> None:
    wire = bytearray(
        codec.encode_request(
            envelope.service,
            envelope.method,
            envelope.payload,
            envelope.timeout_nano,
            envelope.metadata,
        )
    )
    if not wire:
        return
    for _ in range(data.draw(st.integers(1, 3))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        codec.decode_request(bytes(wire))


def test_code_values() -> None:
    assert [c.value for c in Code] == list(range(17))
    assert Code.UNIMPLEMENTED == 12 and Code.UNAUTHENTICATED == 16


# --- recorded exchange -------------------------------------------------------------------------


def _demux(raw: bytes) -> dict[int, bytes]:
    """Concatenated payload bytes per NRI mux connection (8-byte header: conn id, length)."""
    streams: dict[int, bytearray] = {}
    pos = 0
    while pos < len(raw):
        conn, length = struct.unpack_from(">II", raw, pos)
        streams.setdefault(conn, bytearray()).extend(raw[pos + 8 : pos + 8 + length])
        pos += 8 + length
    assert pos == len(raw)
    return {conn: bytes(data) for conn, data in streams.items()}


@pytest.mark.skipif(
    not CAPTURES.is_dir(),
    reason="recorded runtime traffic in ../shared/nri-capture is not beside this checkout",
)
@pytest.mark.parametrize("scenario", ["small", "large"])
@pytest.mark.parametrize("direction", ["runtime-to-plugin", "plugin-to-runtime"])
def test_recorded_streams_decode(scenario: str, direction: str) -> None:
    raw = (CAPTURES / scenario / f"{direction}.raw.bin").read_bytes()
    for conn, stream in _demux(raw).items():
        frames = FrameDecoder().feed(stream)
        assert frames, conn
        # Each side is client on one connection and server on the other.
        client = (conn == 1) == (direction == "runtime-to-plugin")
        for frame in frames:
            assert isinstance(frame, Frame)
            assert frame.flags == 0
            assert frame.stream_id % 2 == 1
            if client:
                assert frame.type == TYPE_REQUEST
                request = codec.decode_request(frame.data)
                assert request.service.startswith("nri.pkg.api.v1alpha1.")
                assert (
                    codec.encode_request(
                        request.service,
                        request.method,
                        request.payload,
                        request.timeout_nano,
                        request.metadata,
                    )
                    == frame.data
                )
            else:
                assert frame.type == TYPE_RESPONSE
                response = codec.decode_response(frame.data)
                assert response.error() is None
                assert codec.encode_response(response.payload, response.status) == frame.data
        ids = [f.stream_id for f in frames if isinstance(f, Frame)]
        assert ids == list(range(1, 2 * len(ids), 2))
