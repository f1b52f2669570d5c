"""Reading a file that a size limit bounds: past the limit nothing is read, so a huge or endless
file (a FIFO, a device) costs no more than the limit. For the configuration, its reloads and the
checkpoint."""

from __future__ import annotations

from pathlib import Path


class TooLarge(Exception):
    """The file holds more than the limit; `head` is what was read (the limit and one byte)."""

    def __init__(self, path: Path, limit: int, head: bytes) -> None:
        super().__init__(f"{path}: larger than the limit of {limit} bytes")
        self.limit = limit
        self.head = head


def read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes; TooLarge when it holds more than `limit`, OSError when unreadable."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path, limit, data)
    return data
