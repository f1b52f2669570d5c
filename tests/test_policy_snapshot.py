"""Changes reported per container: the checkpoint's entries kept from `changes` always equal a
snapshot made from scratch, through placements, moves, resizes, cold starts, restores and
reconfigurations."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.engine.changes import ChangeLog
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import PolicyError, QoS
from nri_topology.policy.views import Changes
from tests import machines
from tests.test_policy_engine import GiB
from tests.test_policy_restore import Runtime, workload
from tests.test_request import pod_and_container

MACHINE = machines.load("server")


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


COLD = {"cold-start.resource-policy.nri.io": "duration: 10s"}


@settings(max_examples=40, deadline=None)
@given(actions=actions)
def test_entries_of_the_changed_containers_keep_a_copy_equal_to_a_fresh_snapshot(
    actions: list[tuple[int, int]],
) -> None:
    policy = Policy(MACHINE, Options(max_moves=2))
    kept: dict[str, Any] = {}
    for action, slot in actions:
        cid = f"c{slot}"
        try:
            if action == 0:
                policy.create(*pod_and_container(100 * slot, QoS.BURSTABLE, cid=cid))
            elif action == 1:
                policy.create(*pod_and_container(1000 + 8000 * (slot % 3), cid=cid))
            elif action == 2:
                pair = pod_and_container(200, QoS.BURSTABLE, memory=GiB, annotations=COLD, cid=cid)
                policy.create(*pair)
            elif action == 3:
                policy.release(cid)
            elif action == 4:
                policy.cold_start_done(cid)
            elif (known := policy.container(cid)) is not None:
                milli = 50 + 100 * slot if action == 5 else 100 * slot
                res = replace(known[1].resources, cpu_shares=max(2, milli * 1024 // 1000))
                policy.resize(*known, res)
        except PolicyError:
            pass
        changes = policy.changes()
        assert not changes.complete
        kept_up(kept, changes)
        assert kept == policy.snapshot()["containers"]
        assert policy.changes() == Changes({})  # each change is reported once


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
