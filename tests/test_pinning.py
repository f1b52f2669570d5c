"""The one model of what updates make of a node's pinning (simulator and invariant checks)."""

from __future__ import annotations

import pytest

from nri_topology.policy.pinning import apply_updates, merged
from nri_topology.policy.types import Placement, Update


def _p(cpus: set[int] | None, mems: set[int] | None, shares: int | None = None) -> Placement:
    return Placement(
        frozenset(cpus) if cpus is not None else None,
        frozenset(mems) if mems is not None else None,
        shares,
    )


@pytest.mark.parametrize(
    ("current", "change", "want"),
    [
        (_p({0, 1}, {0}, 100), _p(None, None), _p({0, 1}, {0}, 100)),
        (_p({0, 1}, {0}, 100), _p({2}, None), _p({2}, {0}, 100)),
        (_p({0, 1}, {0}, 100), _p(None, {1}, 50), _p({0, 1}, {1}, 50)),
        (_p(None, None), _p({3}, {0}), _p({3}, {0})),
    ],
)
def test_merged_keeps_what_the_change_leaves_unset(
    current: Placement, change: Placement, want: Placement
) -> None:
    assert merged(current, change) == want


def test_updates_apply_in_order_and_unknown_containers_are_skipped() -> None:
    current = {"a": _p({0, 1}, {0}, 100), "b": _p({2, 3}, {0})}
    applied = apply_updates(
        current,
        [
            Update("a", _p({4}, None)),
            Update("ghost", _p({5}, None)),
            Update("a", _p(None, {1})),
            Update("a", _p({6}, None)),
        ],
    )
    assert applied.placements == {"a": _p({6}, {1}, 100)}
    assert applied.changes == {"a": _p({6}, {1})}
    assert applied.unknown == ("ghost",)
    assert current["a"] == _p({0, 1}, {0}, 100)  # the input is left as it was


def test_no_updates_change_nothing() -> None:
    applied = apply_updates({"a": _p({0}, {0})}, [])
    assert (applied.placements, applied.changes, applied.unknown) == ({}, {}, ())
