"""The one model of what updates make of a node's pinning (test runtime, simulator, invariants)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nri_topology.policy.pinning import (
    PLACEMENTS,
    Conflict,
    Form,
    apply_replies,
    apply_updates,
    merge_updates,
    merged,
)
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
    assert [u.container_id for u in applied.applied] == ["a", "a", "a"]
    assert applied.unknown == ("ghost",)
    assert current["a"] == _p({0, 1}, {0}, 100)  # the input is left as it was


def test_no_updates_change_nothing() -> None:
    applied = apply_updates({"a": _p({0}, {0})}, [])
    assert (applied.placements, applied.applied, applied.unknown) == ({}, (), ())


@dataclass(frozen=True)
class _U:
    """An update as a table row: container, the fields it sets, whether it may fail."""

    cid: str
    fields: tuple[str, ...]
    may_fail: bool = False


_ROWS: Form[_U, _U, None] = Form(
    target=lambda u: u.cid,
    change=lambda u: u,
    over=lambda state, u: state,
    in_place=False,
    fields=lambda u: u.fields,
    may_fail=lambda u: u.may_fail,
    combine=lambda a, b: _U(a.cid, (*a.fields, *b.fields), a.may_fail and b.may_fail),
    blank=lambda u: _U(u.cid, (), u.may_fail),
)


@pytest.mark.parametrize(
    ("replies", "want"),
    [
        (
            [("10-a", [_U("x", ("cpus",)), _U("y", ("cpus",))])],
            [("x", ("cpus",)), ("y", ("cpus",))],
        ),
        # one entry per container, in the order containers are first named
        (
            [("10-a", [_U("x", ("cpus",)), _U("y", ("mems",))]), ("20-b", [_U("x", ("mems",))])],
            [("x", ("cpus", "mems")), ("y", ("mems",))],
        ),
        # an update that may fail is dropped whole at a clash; its container keeps its entry
        (
            [("10-a", [_U("x", ("cpus",))]), ("20-b", [_U("x", ("mems", "cpus"), True)])],
            [("x", ("cpus",))],
        ),
        ([("10-a", [_U("x", ("cpus",), True), _U("x", ("cpus",), True)])], [("x", ("cpus",))]),
        ([("10-a", [])], []),
    ],
)
def test_replies_merge_per_container_in_plugin_order(
    replies: list[tuple[str, list[_U]]], want: list[tuple[str, tuple[str, ...]]]
) -> None:
    assert [(u.cid, u.fields) for u in merge_updates(replies, _ROWS)] == want


def test_merged_entry_may_fail_only_if_every_contributor_may() -> None:
    (entry,) = merge_updates(
        [("10-a", [_U("x", ("cpus",), True)]), ("20-b", [_U("x", ("mems",))])], _ROWS
    )
    assert not entry.may_fail


@pytest.mark.parametrize(
    ("replies", "creating", "message"),
    [
        # a second owner of a field fails the request, even the same plugin in a second update
        (
            [("10-a", [_U("x", ("cpus",)), _U("x", ("cpus",))])],
            None,
            'plugins "10-a" and "10-a" both tried to set cpus of "x"',
        ),
        (
            [("10-a", [_U("x", ("mems", "cpus"))]), ("20-b", [_U("x", ("cpus",))])],
            None,
            'plugins "20-b" and "10-a" both tried to set cpus of "x"',
        ),
        # claims made before a dropped update's clash stay
        (
            [
                ("10-a", [_U("x", ("cpus",))]),
                ("20-b", [_U("x", ("mems", "cpus"), True), _U("x", ("mems",))]),
            ],
            None,
            'plugins "20-b" and "20-b" both tried to set mems of "x"',
        ),
        (
            [("10-a", [_U("y", ("cpus",)), _U("new", ())])],
            "new",
            'plugin "10-a" asked update of "new" during creation',
        ),
    ],
)
def test_requests_the_runtime_fails(
    replies: list[tuple[str, list[_U]]], creating: str | None, message: str
) -> None:
    with pytest.raises(Conflict) as caught:
        merge_updates(replies, _ROWS, creating)
    assert str(caught.value) == message


def test_policy_updates_set_the_fields_they_do_not_leave_at_none() -> None:
    with pytest.raises(Conflict, match="cpus"):
        merge_updates([("p", [Update("a", _p({1}, None)), Update("a", _p({2}, None))])], PLACEMENTS)
    (entry,) = merge_updates(
        [("p", [Update("a", _p({1}, None)), Update("a", _p(None, {0}, 2))])], PLACEMENTS
    )
    assert entry == Update("a", _p({1}, {0}, 2))


# A form that changes its state in place, as the test runtime's does: a dict per container.
_IN_PLACE: Form[tuple[str, dict[str, int]], dict[str, int], dict[str, int]] = Form(
    target=lambda u: u[0],
    change=lambda u: u[1],
    over=dict.update,
    in_place=True,
    fields=lambda u: list(u[1]),
    may_fail=lambda u: False,
    combine=lambda a, b: (a[0], {**a[1], **b[1]}),
    blank=lambda u: (u[0], {}),
)


@pytest.mark.parametrize(
    ("updates", "want", "unknown"),
    [
        (
            [("a", {"cpus": 1}), ("b", {"mems": 1})],
            {"a": {"cpus": 1, "mems": 0}, "b": {"cpus": 0, "mems": 1}},
            (),
        ),
        ([("a", {"cpus": 1}), ("x", {"cpus": 2})], {"a": {"cpus": 1, "mems": 0}}, ("x",)),
        (
            [("a", {"cpus": 1}), ("a", {"mems": 2}), ("a", {"cpus": 3})],
            {"a": {"cpus": 3, "mems": 2}},
            (),
        ),
    ],
)
def test_in_place_states_are_changed_and_named(
    updates: list[tuple[str, dict[str, int]]],
    want: dict[str, dict[str, int]],
    unknown: tuple[str, ...],
) -> None:
    """Each container once and all known, or not: both ways give what applying in order gives."""
    node = {"a": {"cpus": 0, "mems": 0}, "b": {"cpus": 0, "mems": 0}}
    applied = apply_updates(node, updates, _IN_PLACE)
    assert applied.placements == want and applied.unknown == unknown
    assert all(applied.placements[cid] is node[cid] for cid in want)  # the node's own states
    assert [u for u in updates if u[0] not in unknown] == list(applied.applied)


def test_replies_are_merged_before_anything_is_applied() -> None:
    node = {"a": {"cpus": 0}, "b": {"cpus": 0}}
    with pytest.raises(Conflict):
        apply_replies(
            node, [("p", [("b", {"cpus": 1}), ("a", {"cpus": 1}), ("a", {"cpus": 2})])], _IN_PLACE
        )
    assert node == {"a": {"cpus": 0}, "b": {"cpus": 0}}
    applied = apply_replies(
        node, [("p", [("a", {"cpus": 1})]), ("q", [("a", {"mems": 1})])], _IN_PLACE
    )
    assert node["a"] == {"cpus": 1, "mems": 1} and len(applied.applied) == 1
