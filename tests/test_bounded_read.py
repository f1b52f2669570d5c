"""A bounded read stops one byte past the limit, whatever the file holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_topology.bounded_read import TooLarge, read_bounded


@pytest.mark.parametrize("size", [0, 1, 99, 100])
def test_a_file_within_the_limit_is_read_whole(tmp_path: Path, size: int) -> None:
    (tmp_path / "f").write_bytes(b"x" * size)
    assert read_bounded(tmp_path / "f", 100) == b"x" * size


def test_a_larger_file_is_refused_after_one_byte_more(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 1000)
    with pytest.raises(TooLarge, match=r"f: larger than the limit of 100 bytes") as err:
        read_bounded(tmp_path / "f", 100)
    assert err.value.limit == 100 and err.value.head == b"x" * 101


def test_an_endless_file_costs_the_limit() -> None:
    with pytest.raises(TooLarge) as err:
        read_bounded(Path("/dev/zero"), 1 << 16)
    assert len(err.value.head) == (1 << 16) + 1


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent", 100)
