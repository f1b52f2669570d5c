"""The Go-reader emulation accepts exactly the frame layouts the Go peer accepts
(docs/protocol.md §3.3)."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from nri_topology.nri.mux import frame_message
from nri_topology.testing.go_reader import GoConnReader, GoReadError


def _message(data_len: int, stream: int = 1) -> bytes:
    return struct.pack(">IIBB", data_len, stream, 2, 0) + bytes([stream % 251]) * data_len


def _go_style(message: bytes) -> list[bytes]:
    return [frame[8:] for frame in frame_message(1, message)]


def _one_frame(message: bytes) -> list[bytes]:
    return [message]


def _header_then_data(message: bytes) -> list[bytes]:
    return [message[:10], message[10:]]


def _chunks(size: int) -> Callable[[bytes], list[bytes]]:
    def split(message: bytes) -> list[bytes]:
        return [message[i : i + size] for i in range(0, len(message), size)]

    return split


def _read_all(layout: Callable[[bytes], list[bytes]], sizes: list[int]) -> list[bytes]:
    reader = GoConnReader()
    messages = [_message(n, 2 * i + 1) for i, n in enumerate(sizes)]
    got = []
    for message in messages:
        for payload in layout(message):
            reader.push_frame(payload)
            while (out := reader.next_message()) is not None:
                got.append(out)
    assert got == messages
    return got


SIZES = [[0], [100], [4086], [4087], [5000, 100, 8183], [100_000, 3, 200_000]]


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("layout", [_go_style, _header_then_data, _chunks(4096)])
def test_layouts_go_accepts(layout: Callable[[bytes], list[bytes]], sizes: list[int]) -> None:
    _read_all(layout, sizes)


@pytest.mark.parametrize(
    ("layout", "sizes"),
    [(_one_frame, [4087]), (_one_frame, [100, 100_000]), (_chunks(8192), [5000])],
)
def test_layouts_go_rejects_with_enomem(
    layout: Callable[[bytes], list[bytes]], sizes: list[int]
) -> None:
    with pytest.raises(GoReadError, match="cannot allocate memory"):
        _read_all(layout, sizes)


def test_small_whole_frames_are_fine() -> None:
    _read_all(_one_frame, [0, 10, 4086, 50])


def test_frame_queue_overflow_closes() -> None:
    reader = GoConnReader()
    for _ in range(256):
        reader.push_frame(b"x")
    with pytest.raises(GoReadError, match="failed to queue payload"):
        reader.push_frame(b"x")


def test_oversized_ttrpc_header_is_an_error() -> None:
    reader = GoConnReader()
    reader.push_frame(struct.pack(">IIBB", (4 << 20) + 1, 1, 1, 0))
    with pytest.raises(GoReadError, match="exceeds maximum"):
        reader.next_message()
