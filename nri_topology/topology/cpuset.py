"""Linux list format ("0-3,8,10-11") for CPU and NUMA node sets, both ways.

Every room speaks this format: sysfs writes it, the runtime's cpuset fields carry it,
and logs and metrics show it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache


class CpuSetError(ValueError):
    """A list string that is not in the Linux list format."""


def parse(text: str, below: int | None = None) -> frozenset[int]:
    """Parse "0-3,8" into {0, 1, 2, 3, 8}; whitespace and an empty string give an empty set.

    With `below`, an id of that or more is an error before any set is built: a list from an
    untrusted source ("0-999999999") must not cost memory in proportion to its numbers.
    """
    text = text.strip()
    if not text:
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CpuSetError(f"empty element in list {text!r}")
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise CpuSetError(f"bad element {part!r} in list {text!r}") from None
        if first < 0 or last < first:
            raise CpuSetError(f"bad range {part!r} in list {text!r}")
        if below is not None and last >= below:
            raise CpuSetError(f"{part[:40]!r} goes beyond the largest id {below - 1}")
        out.update(range(first, last + 1))
    return frozenset(out)


def format(ids: Iterable[int]) -> str:
    """Format {0, 1, 2, 3, 8} as "0-3,8" (sorted, ranges collapsed)."""
    items = sorted(set(ids))
    if not items:
        return ""
    parts: list[str] = []
    start = prev = items[0]
    for i in items[1:]:
        if i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


@lru_cache(maxsize=4096)
def text(ids: frozenset[int]) -> str:
    """`format(ids)` of a set, remembered: the one cache of set texts. Replies and checkpoints
    write the same few sets again and again (an exclusive grant re-pins every shared container
    of its pools to one new set; most containers share a handful of zones). Pure, so never
    stale; bounded by count, the least recently used out first."""
    return format(ids)
