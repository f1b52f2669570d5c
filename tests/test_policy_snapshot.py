"""Snapshots kept per grant: each one equals a snapshot made from scratch, and a returned entry
is never changed afterwards (the checkpoint encoder compares the next snapshot with it)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.engine import Engine
from nri_topology.policy.options import Options
from nri_topology.policy.state import snapshot
from nri_topology.policy.types import CpuKind, PolicyError
from nri_topology.topology.model import MemoryTier
from tests import machines
from tests.test_policy_engine import GiB, req

MACHINE = machines.load("server")
PMEM_FIRST = frozenset({MemoryTier.PMEM})


def from_scratch(e: Engine) -> dict[str, Any]:
    """The snapshot of an engine that never took one."""
    e.snapshot_entries = {}
    return snapshot(e)


# action: 0 place shared, 1 place exclusive, 2 place cold-started, 3 release, 4 finish cold start,
# 5 resize to another amount, 6 snapshot
actions = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(actions=actions)
def test_kept_entries_equal_a_fresh_snapshot_and_never_change(
    actions: list[tuple[int, int]],
) -> None:
    e = Engine(MACHINE, Options())
    taken: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (returned, deep copy at the time)
    for action, slot in actions:
        cid = f"c{slot}"
        try:
            if action == 0:
                e.place(req(cid, shared=100 * slot))
            elif action == 1:
                e.place(req(cid, CpuKind.EXCLUSIVE, exclusive=1 + slot % 3))
            elif action == 2:
                e.place(req(cid, shared=200, memory=GiB, memory_tiers=PMEM_FIRST, cold_start_ns=1))
            elif action == 3:
                e.release(cid)
            elif action == 4:
                e.finish_cold_start(cid)
            elif action == 5 and cid in e.grants:
                e.resize(req(cid, shared=50 + 100 * slot))
            else:
                body = snapshot(e)
                taken.append((body, copy.deepcopy(body)))
        except PolicyError:
            pass
        incremental = snapshot(e)
        taken.append((incremental, copy.deepcopy(incremental)))
        kept = dict(e.snapshot_entries)
        assert incremental == from_scratch(e)
        e.snapshot_entries = kept
    for returned, then in taken:
        assert returned == then


def test_a_finished_cold_start_changes_its_entry_and_no_earlier_snapshot() -> None:
    e = Engine(MACHINE, Options())
    e.place(req("s", shared=100))
    e.place(req("c", shared=200, memory=GiB, memory_tiers=PMEM_FIRST, cold_start_ns=1))
    first = snapshot(e)["containers"]
    assert first["c"]["cold_start"] is True
    e.finish_cold_start("c")
    second = snapshot(e)["containers"]
    assert second["s"] == first["s"]
    assert second["c"] == {**first["c"], "cold_start": False}
    assert first["c"]["cold_start"] is True
    assert list(second) == ["c", "s"]
