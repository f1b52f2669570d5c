"""The sans-IO NRI mux: Go-compatible framing and a decoder that survives any input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_topology.nri.mux import (
    GO_MAX_PAYLOAD,
    HEADER,
    MAX_ACCEPTED_PAYLOAD,
    MuxDecoder,
    MuxProtocolError,
    frame_message,
)


def _sizes(frames: list[bytes]) -> list[int]:
    sizes = []
    for frame in frames:
        _, length = HEADER.unpack_from(frame)
        assert len(frame) == 8 + length
        sizes.append(length)
    return sizes


# Go's layout for a ttrpc message of 10 + data bytes (docs/protocol.md §3.3).
@pytest.mark.parametrize(
    ("data_len", "expected"),
    [
        (0, [10]),
        (100, [110]),
        (4086, [4096]),
        (4087, [4096, 1]),
        (5000, [4096, 914]),
        (8183, [4096, 4097]),
        (100000, [4096, 95914]),
        (4 << 20, [4096, (4 << 20) + 10 - 4096]),
    ],
)
def test_frame_sizes_mirror_go(data_len: int, expected: list[int]) -> None:
    message = (bytes(range(256)) * ((data_len + 10) // 256 + 1))[: data_len + 10]
    frames = frame_message(1, message)
    assert _sizes(frames) == expected
    assert b"".join(f[8:] for f in frames) == message
    assert all(struct.unpack(">I", f[:4])[0] == 1 for f in frames)


def test_split_beyond_go_payload_limit() -> None:
    message = b"x" * (4096 + GO_MAX_PAYLOAD + 5)
    assert _sizes(frame_message(2, message)) == [4096, GO_MAX_PAYLOAD, 5]


def test_frame_rejects_bad_conn_id() -> None:
    with pytest.raises(ValueError):
        frame_message(1 << 32, b"")


def test_decoder_handles_byte_by_byte_input() -> None:
    stream = b"".join(
        frame_message(1, b"a" * 5000) + frame_message(2, b"bc") + frame_message(7, b"")
    )
    decoder = MuxDecoder()
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == [(1, b"a" * 4096), (1, b"a" * 904), (2, b"bc"), (7, b"")]
    assert decoder.buffered == 0


@given(st.lists(st.tuples(st.integers(0, 9), st.binary(max_size=40), st.integers(0, 10))))
def test_whole_frames_and_pieces_give_the_same_frames(fed: list[tuple[int, bytes, int]]) -> None:
    """A frame fed whole (the decoder's short cut) or cut in two at `cut` (its general path),
    in any mix: the same frames, nothing left over."""
    decoder = MuxDecoder()
    out = []
    for conn_id, payload, cut in fed:
        data = HEADER.pack(conn_id, len(payload)) + payload
        if cut:
            out += decoder.feed(data[:cut])
            out += decoder.feed(data[cut:])
        else:
            out += decoder.feed(data)
    assert out == [(conn_id, payload) for conn_id, payload, _ in fed]
    assert decoder.buffered == 0


def test_decoder_accepts_large_frames() -> None:
    payload = b"z" * 100_000  # bigger than Go's first-frame size: reading must not care
    decoder = MuxDecoder()
    assert decoder.feed(HEADER.pack(1, len(payload)) + payload) == [(1, payload)]


def test_decoder_rejects_absurd_length_and_stays_failed() -> None:
    decoder = MuxDecoder()
    with pytest.raises(MuxProtocolError, match="announces"):
        decoder.feed(HEADER.pack(1, MAX_ACCEPTED_PAYLOAD + 1))
    with pytest.raises(MuxProtocolError):
        decoder.feed(HEADER.pack(1, 0))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64), max_size=40))
def test_random_bytes_give_frames_or_a_clean_error(chunks: list[bytes]) -> None:
    decoder = MuxDecoder(max_payload=1 << 16)
    fed = 0
    try:
        for chunk in chunks:
            fed += len(chunk)
            decoder.feed(chunk)
            # nothing beyond what was fed is ever held
            assert decoder.buffered <= fed
    except MuxProtocolError:
        assert decoder.buffered == 0


@settings(max_examples=150)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.binary(max_size=9000)), min_size=1, max_size=6),
    st.data(),
)
def test_mutated_valid_streams_never_hang_or_lose_sync_silently(
    messages: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    stream = bytearray(b"".join(f for c, m in messages for f in frame_message(c, m)))
    for _ in range(data.draw(st.integers(0, 3))):
        pos = data.draw(st.integers(0, len(stream) - 1))
        stream[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(stream)))
    decoder = MuxDecoder()
    try:
        frames = decoder.feed(bytes(stream[:cut])) + decoder.feed(bytes(stream[cut:]))
    except MuxProtocolError:
        return
    consumed = sum(8 + len(p) for _, p in frames)
    assert consumed + decoder.buffered == len(stream)
