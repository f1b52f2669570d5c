"""MemoryBook: used() kept per zone across charges and refunds equals summing from scratch, and
fits() follows the rule of the module docstring."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.accounts.memory import MemoryBook
from tests import machines

MACHINE = machines.load("server")
NODES = sorted(MACHINE.nodes)

zones = st.frozensets(st.sampled_from(NODES), min_size=1)
# (charge or refund or ask, zone, size in GiB)
steps = st.lists(st.tuples(st.integers(0, 2), zones, st.integers(1, 64)), max_size=60)


def used_from_scratch(charged: dict[frozenset[int], int], zone: frozenset[int]) -> int:
    return sum(b for z, b in charged.items() if z <= zone)


def fits_from_scratch(charged: dict[frozenset[int], int], zone: frozenset[int], size: int) -> bool:
    after = dict(charged)
    after[zone] = after.get(zone, 0) + size
    return all(
        used_from_scratch(after, z) <= sum(MACHINE.nodes[n].memory for n in z) for z in after
    )


@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_kept_usage_equals_usage_from_scratch(steps: list[tuple[int, frozenset[int], int]]) -> None:
    book = MemoryBook(MACHINE)
    charged: dict[frozenset[int], int] = {}
    for action, zone, gib in steps:
        size = gib << 30
        if action == 0 and book.fits(zone, size):
            book.charge(zone, size)
            charged[zone] = charged.get(zone, 0) + size
        elif action == 1 and charged.get(zone, 0) >= size:
            book.refund(zone, size)
            charged[zone] -= size
            if not charged[zone]:
                del charged[zone]
        for z in {zone, frozenset(NODES), *charged}:
            assert book.used(z) == used_from_scratch(charged, z)
        assert book.fits(zone, size) == fits_from_scratch(charged, zone, size)
        assert book.zones() == charged


def test_refund_beyond_the_charge_is_refused_and_changes_nothing() -> None:
    book = MemoryBook(MACHINE)
    zone = frozenset(NODES[:1])
    book.charge(zone, 10)
    assert book.used(zone) == 10
    with pytest.raises(ValueError, match="exceeds the charge"):
        book.refund(zone, 11)
    assert book.used(zone) == 10 and book.zones() == {zone: 10}
