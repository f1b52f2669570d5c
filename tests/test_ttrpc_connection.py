"""The ttrpc stream rules on the pure connection objects: bytes in, events and bytes out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.codec import (
    MAX_DATA,
    TYPE_DATA,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Code,
    Frame,
    MessageTooLarge,
    ProtocolError,
    ResponseEnvelope,
    Status,
    TtrpcError,
)
from nri_topology.ttrpc.connection import (
    ClientConnection,
    Ignored,
    Rejected,
    RequestReceived,
    ResponseReceived,
    ServerConnection,
)

ODD = "StreamID must be odd for client initiated streams"
REUSED = "StreamID cannot be re-used and must increment"
INACTIVE = "StreamID is no longer active"


def request(stream_id: int, method: str = "M", type_: int = TYPE_REQUEST) -> bytes:
    data = codec.encode_request("svc", method, b"p")
    return codec.encode_frame(Frame(stream_id, type_, 0, data))


def response(stream_id: int, payload: bytes = b"r", type_: int = TYPE_RESPONSE) -> bytes:
    return codec.encode_frame(Frame(stream_id, type_, 0, codec.encode_response(payload)))


def status_of(message: bytes) -> tuple[int, Code | int, str]:
    frame = codec.FrameDecoder().feed(message)[0]
    assert isinstance(frame, Frame) and frame.type == TYPE_RESPONSE
    status = codec.decode_response(frame.data).status
    assert status is not None
    return frame.stream_id, status.code, status.message


def bad(stream_id: int, message: str) -> tuple[object, ...]:
    return ("rejected", stream_id, Code.INVALID_ARGUMENT, message)


def summary(event: object) -> tuple[object, ...]:
    if isinstance(event, RequestReceived):
        return ("request", event.stream_id, event.request.method)
    if isinstance(event, Rejected):
        return ("rejected", *status_of(event.reply))
    assert isinstance(event, Ignored)
    return ("ignored", event.stream_id)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ([request(1), request(3)], [("request", 1, "M"), ("request", 3, "M")]),
        ([request(1), request(7)], [("request", 1, "M"), ("request", 7, "M")]),
        ([request(2)], [bad(2, ODD)]),
        ([request(0)], [bad(0, ODD)]),
        ([request(5), request(5)], [("request", 5, "M"), bad(5, REUSED)]),
        ([request(5), request(3)], [("request", 5, "M"), bad(3, REUSED)]),
        ([request(1, type_=TYPE_DATA)], [bad(1, INACTIVE)]),
        ([request(1), request(1, type_=TYPE_DATA)], [("request", 1, "M"), bad(1, INACTIVE)]),
        ([response(1)], [("ignored", 1)]),
        # a rejected frame uses up no id
        ([request(2), request(1)], [bad(2, ODD), ("request", 1, "M")]),
        ([request(9, type_=TYPE_DATA), request(3)], [bad(9, INACTIVE), ("request", 3, "M")]),
    ],
)  # fmt: skip
def test_server_stream_rules(wire: list[bytes], expected: list[tuple[object, ...]]) -> None:
    conn = ServerConnection()
    assert [summary(e) for e in conn.receive_data(b"".join(wire))] == expected


def test_server_undecodable_request_is_answered_and_the_id_consumed() -> None:
    conn = ServerConnection()
    [event] = conn.receive_data(codec.encode_frame(Frame(1, TYPE_REQUEST, 0, b"\x0a\x05ab")))
    assert isinstance(event, Rejected)
    stream, code, message = status_of(event.reply)
    assert (stream, code) == (1, Code.INVALID_ARGUMENT)
    assert message.startswith("unmarshal request error: ")
    assert conn.open_streams == frozenset()
    assert [summary(e) for e in conn.receive_data(request(1))] == [
        ("rejected", 1, Code.INVALID_ARGUMENT, REUSED)
    ]


def test_server_oversized_request_is_refused_without_buffering_it() -> None:
    conn = ServerConnection()
    header = codec._HEADER.pack(MAX_DATA + 1, 3, TYPE_REQUEST, 0)
    [event] = conn.receive_data(header + b"x" * 100)
    assert isinstance(event, Rejected)
    assert status_of(event.reply)[:2] == (3, Code.RESOURCE_EXHAUSTED)
    assert conn._decoder.buffered == 0


def test_server_answers_each_open_request_once() -> None:
    conn = ServerConnection()
    events = conn.receive_data(request(1) + request(3))
    assert conn.open_streams == {1, 3}
    reply = conn.respond(3, b"three")
    frame = codec.FrameDecoder().feed(reply)[0]
    assert isinstance(frame, Frame)
    assert (frame.stream_id, frame.type) == (3, TYPE_RESPONSE)
    assert codec.decode_response(frame.data) == ResponseEnvelope(None, b"three")
    assert status_of(conn.fail(1, Code.NOT_FOUND, "gone")) == (1, Code.NOT_FOUND, "gone")
    assert conn.open_streams == frozenset()
    assert len(events) == 2
    with pytest.raises(ValueError, match="no request to answer"):
        conn.respond(1, b"again")
    with pytest.raises(ValueError, match="no request to answer"):
        conn.fail(5, Code.UNKNOWN, "never asked")


def test_server_too_large_response_keeps_the_stream_open_to_fail_it() -> None:
    conn = ServerConnection()
    conn.receive_data(request(1))
    with pytest.raises(MessageTooLarge):
        conn.respond(1, b"x" * MAX_DATA)
    assert conn.open_streams == {1}
    assert status_of(conn.fail(1, Code.RESOURCE_EXHAUSTED, "big"))[:2] == (1, 8)


def test_server_protocol_error_is_final() -> None:
    conn = ServerConnection()
    bad = codec._HEADER.pack(0, 1, 9, 0)
    with pytest.raises(ProtocolError):
        conn.receive_data(bad)
    with pytest.raises(ProtocolError):
        conn.receive_data(request(1))


def test_client_ids_are_odd_and_increasing() -> None:
    conn = ClientConnection()
    ids = [conn.request("svc", "M", b"")[0] for _ in range(4)]
    assert ids == [1, 3, 5, 7]
    assert conn.open_streams == {1, 3, 5, 7}


def test_client_request_bytes() -> None:
    stream_id, message = ClientConnection().request("svc", "M", b"p", 7, [("k", "v")])
    frame = codec.FrameDecoder().feed(message)[0]
    assert frame == Frame(
        1, TYPE_REQUEST, 0, codec.encode_request("svc", "M", b"p", 7, [("k", "v")])
    )
    assert stream_id == 1


def test_client_refuses_too_large_requests_without_using_an_id() -> None:
    conn = ClientConnection()
    with pytest.raises(MessageTooLarge):
        conn.request("svc", "M", b"x" * MAX_DATA)
    assert conn.request("svc", "M", b"")[0] == 1
    assert conn.open_streams == {1}


def test_client_stream_ids_run_out() -> None:
    conn = ClientConnection()
    conn._next_id = 0xFFFFFFFF
    assert conn.request("svc", "M", b"")[0] == 0xFFFFFFFF
    with pytest.raises(TtrpcError) as err:
        conn.request("svc", "M", b"")
    assert err.value.code == Code.RESOURCE_EXHAUSTED


def test_client_matches_responses_in_any_order_once() -> None:
    conn = ClientConnection()
    for _ in range(3):
        conn.request("svc", "M", b"")
    events = conn.receive_data(response(5, b"five") + response(1, b"one") + response(5, b"again"))
    assert [type(e) for e in events] == [ResponseReceived, ResponseReceived, Ignored]
    assert [(e.stream_id, e.result) for e in events[:2]] == [  # type: ignore[union-attr]
        (5, ResponseEnvelope(None, b"five")),
        (1, ResponseEnvelope(None, b"one")),
    ]
    assert conn.open_streams == {3}


def test_client_drops_responses_of_abandoned_and_unknown_streams_and_non_responses() -> None:
    conn = ClientConnection()
    conn.request("svc", "M", b"")
    conn.abandon(1)
    wire = response(1) + response(9) + request(11) + response(3, type_=TYPE_DATA)
    assert [(type(e), e.stream_id) for e in conn.receive_data(wire)] == [
        (Ignored, 1),
        (Ignored, 9),
        (Ignored, 11),
        (Ignored, 3),
    ]


def test_client_error_status_and_unreadable_responses_fail_only_their_call() -> None:
    conn = ClientConnection()
    for _ in range(3):
        conn.request("svc", "M", b"")
    failed = codec.encode_response(b"", Status(Code.NOT_FOUND, "no"))
    wire = (
        codec.encode_frame(Frame(1, TYPE_RESPONSE, 0, failed))
        + codec.encode_frame(Frame(3, TYPE_RESPONSE, 0, b"\x0a\x05ab"))
        + codec._HEADER.pack(MAX_DATA + 1, 5, TYPE_RESPONSE, 0)
        + b"\0" * (MAX_DATA + 1)
    )
    first, second, third = conn.receive_data(wire)
    assert isinstance(first, ResponseReceived) and isinstance(first.result, ResponseEnvelope)
    assert first.result.error() is not None and first.result.error().code == Code.NOT_FOUND  # type: ignore[union-attr]
    assert isinstance(second, ResponseReceived) and isinstance(second.result, ProtocolError)
    assert isinstance(third, ResponseReceived) and isinstance(third.result, MessageTooLarge)
    assert conn.open_streams == frozenset()


frames = st.lists(
    st.tuples(st.integers(0, 12), st.sampled_from([TYPE_REQUEST, TYPE_RESPONSE, TYPE_DATA])),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(frames, st.integers(1, 64))
def test_server_gives_one_event_per_frame_in_any_split(
    wire: list[tuple[int, int]], chunk: int
) -> None:
    """Every frame gets exactly one event; accepted ids are odd and strictly rising,
    whatever the read boundaries were."""
    data = b"".join(request(s, type_=t) for s, t in wire)
    conn = ServerConnection()
    events = []
    for start in range(0, len(data), chunk):
        events += conn.receive_data(data[start : start + chunk])
    assert [e.stream_id for e in events] == [s for s, _ in wire]
    accepted = [e.stream_id for e in events if isinstance(e, RequestReceived)]
    assert all(s % 2 == 1 for s in accepted)
    assert accepted == sorted(set(accepted))
    assert conn.open_streams == set(accepted)
    for event, (_, type_) in zip(events, wire, strict=True):
        assert isinstance(event, Ignored) == (type_ == TYPE_RESPONSE)
