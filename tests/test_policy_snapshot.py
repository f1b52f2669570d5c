"""Changes reported per container: the checkpoint's entries kept from `changes` always equal a
snapshot made from scratch, through placements, moves, resizes, cold starts, restores and
reconfigurations."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.checkpoint import state
from nri_topology.policy.engine.changes import ChangeLog
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import CpuKind, PolicyError
from nri_topology.policy.views import Changes
from nri_topology.topology.model import MemoryTier
from tests import machines
from tests.test_policy_engine import GiB, req
from tests.test_policy_restore import Runtime, workload

MACHINE = machines.load("server")
PMEM_FIRST = frozenset({MemoryTier.PMEM})


def kept_up(kept: dict[str, Any], changes: Changes) -> None:
    """Apply reported changes as the checkpoint writer does."""
    if changes.complete:
        kept.clear()
    for cid, entry in changes.entries.items():
        if entry is None:
            kept.pop(cid, None)
        else:
            kept[cid] = entry


# action: 0 place shared, 1 place exclusive, 2 place cold-started, 3 release, 4 finish cold start,
# 5 resize to another amount, 6 resize to the same amount
actions = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(actions=actions)
def test_entries_of_the_changed_containers_keep_a_copy_equal_to_a_fresh_snapshot(
    actions: list[tuple[int, int]],
) -> None:
    e = Engine(MACHINE, Options(max_moves=2))
    kept: dict[str, Any] = {}
    for action, slot in actions:
        cid = f"c{slot}"
        try:
            if action == 0:
                e.place(req(cid, shared=100 * slot))
            elif action == 1:
                e.place(req(cid, CpuKind.EXCLUSIVE, exclusive=1 + 8 * (slot % 3)))
            elif action == 2:
                e.place(req(cid, shared=200, memory=GiB, memory_tiers=PMEM_FIRST, cold_start_ns=1))
            elif action == 3:
                e.release(cid)
            elif action == 4:
                e.finish_cold_start(cid)
            elif action == 5:
                e.resize(req(cid, shared=50 + 100 * slot))
            else:
                e.resize(req(cid, shared=100 * slot))
        except PolicyError:
            pass
        named = e.take_changed()
        assert named is not None
        kept_up(kept, Changes({cid: state.entry(e, cid) for cid in named}))
        assert kept == state.snapshot(e)["containers"]
        assert e.take_changed() == set()  # each change is reported once


def test_a_restore_and_a_reconfiguration_report_the_containers_gone_and_those_placed() -> None:
    policy, rt = Policy(MACHINE, Options()), Runtime()
    for i in range(6):
        rt.create(policy, *workload(i, "g" if i % 2 else "b", 1000 + 500 * i))
    kept: dict[str, Any] = {}
    kept_up(kept, policy.changes(everything=True))
    assert kept == policy.snapshot()["containers"] and len(kept) == 6
    gone = sorted(rt.ctrs)[0]
    del rt.ctrs[gone]
    policy.restore(list(rt.pods.values()), list(rt.ctrs.values()), policy.snapshot())
    changes = policy.changes()
    assert changes.complete and gone not in changes.entries
    kept_up(kept, changes)
    assert kept == policy.snapshot()["containers"] and len(kept) == 5
    rt.create(policy, *workload(9, "b", 700))
    changes = policy.changes()
    assert not changes.complete and list(changes.entries) == ["c9"]
    policy.reconfigure(Options(reserved_resources=CpuAmount(milli=4000)))
    kept_up(kept, policy.changes())
    assert kept == policy.snapshot()["containers"]
    assert policy.changes() == Changes({})


def test_too_many_changes_to_name_report_every_container() -> None:
    log = ChangeLog(named=3)
    for i in range(3):
        log.note(f"c{i}")
    assert log.take() == {"c0", "c1", "c2"}
    for i in range(3, 7):
        log.note(f"c{i}")
    assert log.take() is None
    log.note("c3")
    assert log.take() == {"c3"}
