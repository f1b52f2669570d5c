"""The update schedule as a pure state machine: coalescing, batching, debounce, failures."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.daemon.updates.holding import batch_shrinks, shrinks
from nri_topology.daemon.updates.schedule import Closed, Pacing, Schedule
from nri_topology.policy.types import Placement, Update

PACING = Pacing(batch=3, gap_s=0.01, grow_delay_s=0.5, retries=2, retry_delay_s=0.2)


def cpus(*ids: int) -> Placement:
    return Placement(frozenset(ids), frozenset({0}))


def held(n: int, placement: Placement) -> Schedule:
    s = Schedule(PACING)
    s.reset((f"c{i}", placement) for i in range(n))
    return s


def drain(s: Schedule, now: float) -> list[dict[str, Placement]]:
    """Every batch as the plugin would send them, each acknowledged at once."""
    batches = []
    while (wait := s.wakeup(now)) is not None:
        now += wait
        batch = s.next_batch(now)
        assert batch
        batches.append(batch)
        s.done(now)
    return batches


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (cpus(0, 1, 2), cpus(0, 1), True),  # a CPU taken away
        (cpus(0, 1), cpus(0, 1, 2), False),  # only added
        (cpus(0, 1), cpus(2, 3), True),  # moved
        (None, cpus(0), True),  # unknown: assume it may hold anything
        (Placement(None, None), cpus(0), True),
        (cpus(0), Placement(None, None), False),  # nothing set: nothing taken
        (Placement(frozenset({0}), frozenset({0, 1})), cpus(0), True),  # a memory node taken
    ],
)
def test_shrinks(before: Placement | None, after: Placement, expected: bool) -> None:
    assert shrinks(before, after) is expected
    judged = batch_shrinks()
    assert judged(before, after) is expected
    assert judged(before, after) is expected  # the second time from what it remembered


_SETS = st.none() | st.frozensets(st.integers(0, 3))


@given(
    st.lists(
        st.tuples(
            st.none() | st.builds(Placement, _SETS, _SETS), st.builds(Placement, _SETS, _SETS)
        )
    )
)
def test_one_decisions_shrinks_are_judged_as_each_alone(
    pairs: list[tuple[Placement | None, Placement]],
) -> None:
    """Judged once per pair of sets within a decision: the same answers as one by one."""
    judged = batch_shrinks()
    for before, after in pairs + pairs:
        assert judged(before, after) is shrinks(before, after)


def test_a_container_changed_twice_before_it_is_sent_gets_the_latest_once() -> None:
    s = held(2, cpus(0, 1, 2, 3))
    s.change([Update("c0", cpus(0, 1, 2))], 0.0)
    s.change([Update("c0", cpus(0, 1)), Update("c1", cpus(0, 1))], 0.0)
    assert drain(s, 0.0) == [{"c0": cpus(0, 1), "c1": cpus(0, 1)}]


def test_shrinks_go_out_at_once_in_batches_of_the_pacing_with_a_gap_between() -> None:
    s = held(7, cpus(0, 1, 2, 3))
    s.change([Update(f"c{i}", cpus(0, 1, 2)) for i in range(7)], 5.0)
    assert s.wakeup(5.0) == 0.0
    first = s.next_batch(5.0)
    assert len(first) == 3
    assert s.next_batch(5.0) == {}  # one batch in flight at a time
    assert s.wakeup(5.0) is None
    s.done(5.02)
    assert s.next_batch(5.025) == {}  # the gap: the runtime's other events go first
    assert s.wakeup(5.025) == pytest.approx(0.005)
    assert len(s.next_batch(5.03)) == 3
    s.done(5.04)
    assert len(s.next_batch(5.05)) == 1


def test_growth_waits_and_a_shrink_back_meanwhile_touches_nobody() -> None:
    s = held(3, cpus(0, 1))
    grown = [Update(f"c{i}", cpus(0, 1, 2)) for i in range(3)]
    s.change(grown, 0.0)  # a release gives CPU 2 back
    assert s.next_batch(0.1) == {}
    assert s.wakeup(0.1) == pytest.approx(0.4)
    s.change([Update(f"c{i}", cpus(0, 1)) for i in range(3)], 0.2)  # a grant takes it again
    assert s.wakeup(0.2) is None and drain(s, 0.2) == []


def test_growth_goes_out_after_the_delay() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0, 1, 2))], 0.0)
    assert s.next_batch(0.49) == {}
    assert s.next_batch(0.5) == {"c0": cpus(0, 1, 2)}


def test_a_shrink_after_pending_growth_is_due_at_once() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1, 2, 3))], 0.0)
    s.change([Update("c0", cpus(0, 1))], 0.1)
    assert s.next_batch(0.1) == {"c0": cpus(0, 1)}


def test_the_window_closes_when_the_last_holder_of_the_granted_cpus_has_its_re_pin() -> None:
    s = held(5, cpus(0, 1, 2, 3))
    s.holds("g", cpus(3))
    s.change([Update(f"c{i}", cpus(0, 1, 2)) for i in range(5)], 1.0)
    assert s.grant("g", frozenset({3}), 1.0) is None
    assert s.open_windows() == 1
    s.running("g", 1.0)  # counted from its start
    s.next_batch(1.0)
    assert s.done(1.03).closed == ()
    s.next_batch(1.05)
    done = s.done(1.08)
    assert done.closed == (Closed("g", pytest.approx(0.08)),)
    assert s.open_windows() == 0


def test_a_grant_nobody_else_holds_closes_its_window_at_once() -> None:
    s = held(2, cpus(0, 1))
    assert s.grant("g", frozenset({3}), 0.0) == Closed("g", 0.0)
    assert s.grant("h", frozenset(), 0.0) is None  # no exclusive CPUs: no window


def test_a_retry_keeps_the_window_open_and_goes_out_later() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    s.running("g", 0.0)
    assert s.next_batch(0.0) == {"c0": cpus(0)}
    done = s.done(0.01, retry={"c0"})
    assert done.retried == ("c0",) and done.closed == ()
    assert s.next_batch(0.1) == {}
    assert s.next_batch(0.22) == {"c0": cpus(0)}
    assert s.done(0.23).closed == (Closed("g", pytest.approx(0.23)),)


def test_a_re_pin_that_never_lands_is_given_up_after_the_retries() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    s.running("g", 0.0)
    now, outcomes = 0.0, []
    while (wait := s.wakeup(now)) is not None:
        now += wait
        s.next_batch(now)
        outcomes.append(s.done(now, retry={"c0"}))
    assert [bool(d.retried) for d in outcomes] == [True, True, False]
    assert outcomes[-1].given_up == ("c0",)
    # bounded, not open for good; and said to have closed with the CPU perhaps still shared
    assert outcomes[-1].closed == (Closed("g", pytest.approx(now), freed=False),)


def test_a_container_gone_is_dropped_and_frees_the_window() -> None:
    s = held(2, cpus(0, 1))
    s.change([Update("c0", cpus(0)), Update("c1", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    s.running("g", 0.0)
    s.next_batch(0.0)
    done = s.done(0.02, drop={"c1"})
    assert done.dropped == ("c1",)
    assert done.closed == (Closed("g", pytest.approx(0.02)),)


def test_forgetting_a_waiting_container_closes_the_window_and_the_owners_own_is_void() -> None:
    s = held(2, cpus(0, 1))
    s.change([Update("c0", cpus(0)), Update("c1", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    s.running("g", 0.0)
    assert s.forget("c0", 0.1) == ()
    assert s.forget("c1", 0.2) == (Closed("g", pytest.approx(0.2)),)
    s.change([Update("c2", cpus(0))], 0.3)
    s.grant("h", frozenset({1}), 0.3)
    assert s.forget("h", 0.4) == () and s.open_windows() == 0


def test_a_newer_placement_while_in_flight_goes_out_after_it() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    assert s.next_batch(0.0) == {"c0": cpus(0, 1)}
    s.change([Update("c0", cpus(0))], 0.005)
    s.done(0.01, retry={"c0"})  # the older one failed: the newer one replaces the retry
    assert s.next_batch(0.02) == {"c0": cpus(0)}
    s.done(0.03)
    assert s.wakeup(0.03) is None


def test_a_placement_back_to_what_is_in_flight_is_not_sent_again() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    s.next_batch(0.0)
    s.change([Update("c0", cpus(0, 1, 2, 3))], 0.001)
    s.change([Update("c0", cpus(0, 1))], 0.002)
    s.done(0.01)
    assert s.wakeup(0.01) is None


def test_a_lost_batch_is_forgotten_for_synchronize_to_repair() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0))], 0.0)
    s.next_batch(0.0)
    s.lost(0.01)
    assert s.wakeup(0.01) is None and not s.busy("c0")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["c0", "c1", "c2", "c3", "c4"]),
            st.frozensets(st.integers(0, 5), min_size=1),
            st.floats(0, 0.3),
        ),
        max_size=40,
    )
)
def test_every_container_ends_on_its_latest_placement_each_update_sent_once_per_change(
    changes: list[tuple[str, frozenset[int], float]],
) -> None:
    """Whatever the order and timing, draining leaves every container on its latest placement,
    no batch exceeds the pacing, and no container is in one batch twice."""
    s = held(5, cpus(0, 1, 2, 3, 4, 5))
    applied = {f"c{i}": cpus(0, 1, 2, 3, 4, 5) for i in range(5)}
    latest = dict(applied)
    now, sent = 0.0, 0
    for cid, ids, step in changes:
        now += step
        s.change([Update(cid, Placement(ids, frozenset({0})))], now)
        latest[cid] = Placement(ids, frozenset({0}))
        if batch := s.next_batch(now):
            assert len(batch) <= PACING.batch
            applied.update(batch)
            sent += len(batch)
            s.done(now)
    for batch in drain(s, now):
        assert len(batch) <= PACING.batch
        applied.update(batch)
        sent += len(batch)
    assert applied == latest
    assert sent <= len(changes)


def test_re_pins_wait_for_the_granted_container_to_start_or_for_start_wait() -> None:
    s = held(2, cpus(0, 1, 2, 3))
    s.change([Update("c0", cpus(0, 1, 2)), Update("c1", cpus(0, 1, 2))], 0.0)
    s.grant("g", frozenset({3}), 0.0)
    s.starting("g", 0.0)
    assert s.next_batch(0.1) == {}  # its start would compete with their runc updates
    assert s.wakeup(0.1) == pytest.approx(PACING.start_wait_s - 0.1)
    assert s.started("g") and not s.started("g")
    assert s.next_batch(0.1) == {"c0": cpus(0, 1, 2), "c1": cpus(0, 1, 2)}
    # a start that never comes holds them back no longer than start_wait_s
    s.done(0.2)
    s.change([Update("c0", cpus(0, 1))], 0.3)
    s.starting("h", 0.3)
    assert s.next_batch(0.3) == {}
    assert s.next_batch(0.3 + PACING.start_wait_s) == {"c0": cpus(0, 1)}


# --- re-pins written into the cgroups first (the plugin writes what `to_write` hands out)


def test_a_shrink_is_written_at_once_and_closes_the_window_before_any_batch() -> None:
    s = held(3, cpus(0, 1, 2, 3))
    s.holds("g", cpus(3))
    s.change([Update(f"c{i}", cpus(0, 1, 2)) for i in range(3)], 0.0)
    assert s.grant("g", frozenset({3}), 0.0) is None
    s.starting("g", 0.0)
    assert s.to_write() == {f"c{i}": cpus(0, 1, 2) for i in range(3)}
    assert s.to_write() == {}  # handed out once
    # written before its workload started: it never ran beside them
    assert s.written({f"c{i}": cpus(0, 1, 2) for i in range(3)}, (), 0.004) == (Closed("g", 0.0),)
    assert s.next_batch(0.1) == {}  # the runtime's record still follows, after the start
    assert s.started("g")
    # the runtime's record follows, one container at a time (its cgroup holds it already)
    assert drain(s, 0.1) == [{f"c{i}": cpus(0, 1, 2)} for i in range(3)]
    assert s.open_windows() == 0


def test_a_grant_without_exclusive_cpus_opens_no_window_while_a_write_is_on_its_way() -> None:
    """A container being written may hold any CPU: it may hold none of a grant with none."""
    s = held(3, cpus(0, 1, 2, 3))
    s.holds("g", cpus(3))
    s.change([Update(f"c{i}", cpus(0, 1, 2)) for i in range(3)], 0.0)
    s.grant("g", frozenset({3}), 0.0)
    s.to_write()
    s.holds("be", cpus(0, 1, 2))
    assert s.grant("be", frozenset(), 0.001) is None
    assert s.open_windows() == 1
    assert s.written({f"c{i}": cpus(0, 1, 2) for i in range(3)}, (), 0.004) == (Closed("g", 0.0),)


def test_growth_is_written_at_once_and_reaches_the_runtime_after_the_delay() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0, 1, 2))], 0.0)
    assert s.to_write() == {"c0": cpus(0, 1, 2)}
    s.written({"c0": cpus(0, 1, 2)}, (), 0.001)
    assert s.next_batch(0.1) == {}
    assert drain(s, 0.1) == [{"c0": cpus(0, 1, 2)}]


def test_a_container_being_written_is_not_sent_until_the_write_is_told() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    assert s.to_write() == {"c0": cpus(0, 1)}
    assert s.next_batch(0.0) == {} and s.wakeup(0.0) is None
    s.written({"c0": cpus(0, 1)}, (), 0.001)
    assert s.wakeup(0.001) == PACING.grow_delay_s
    assert s.next_batch(0.001 + PACING.grow_delay_s) == {"c0": cpus(0, 1)}


def test_a_container_in_flight_is_written_only_after_the_runtime_answered() -> None:
    """The runtime could otherwise apply the older placement over the newer written one."""
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    assert s.next_batch(0.0) == {"c0": cpus(0, 1)}  # (its write failed, or writes are off)
    s.change([Update("c0", cpus(0))], 0.001)
    s.grant("g", frozenset({1}), 0.001)
    s.running("g", 0.001)
    assert s.to_write() == {}
    assert s.done(0.01).closed == ()
    assert s.to_write() == {"c0": cpus(0)}
    assert s.written({"c0": cpus(0)}, (), 0.011) == (Closed("g", pytest.approx(0.01)),)


def test_a_failed_write_leaves_the_window_to_the_runtime() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    s.running("g", 0.0)
    s.to_write()
    assert s.written({}, ("c0",), 0.001) == ()
    assert s.to_write() == {}  # not written again: the runtime re-pins it
    assert s.next_batch(0.001) == {"c0": cpus(0)}
    assert s.done(0.02).closed == (Closed("g", pytest.approx(0.02)),)


def test_a_written_shrink_given_back_before_the_runtime_applied_it_needs_no_runtime_call() -> None:
    """Written (0, 1), still (0, 1, 2) in the runtime's record: growing back to that record is
    written too, and the runtime is not asked at all."""
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    s.written(s.to_write(), (), 0.001)
    s.change([Update("c0", cpus(0, 1, 2))], 0.002)
    assert s.to_write() == {"c0": cpus(0, 1, 2)}
    s.written({"c0": cpus(0, 1, 2)}, (), 0.003)
    assert s.wakeup(0.003) is None and drain(s, 0.003) == []


def test_a_written_shrink_reaches_the_runtime_after_the_grow_delay() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    s.written(s.to_write(), (), 0.001)
    assert s.next_batch(0.1) == {}
    assert s.wakeup(0.1) == pytest.approx(PACING.grow_delay_s - 0.099)
    assert s.next_batch(0.001 + PACING.grow_delay_s) == {"c0": cpus(0, 1)}


def test_an_update_leaving_the_memory_nodes_unset_is_held_by_a_record_that_has_them() -> None:
    """Re-pins set only the CPUs; the record from the container's creation has both."""
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", Placement(frozenset({0, 1}), None))], 0.0)
    s.written(s.to_write(), (), 0.001)
    s.change([Update("c0", Placement(frozenset({0, 1, 2}), None))], 0.002)
    s.written(s.to_write(), (), 0.003)
    assert drain(s, 0.003) == []


def test_a_written_re_pin_reaches_the_runtime_in_a_quiet_moment_or_after_quiet_max() -> None:
    s = held(2, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1)), Update("c1", cpus(0, 1))], 0.0)
    s.written(s.to_write(), (), 0.0)
    due = PACING.grow_delay_s
    s.event(due - 0.01)  # pods' events come: the runtime serves them first
    assert s.next_batch(due) == {}
    assert s.wakeup(due) == pytest.approx(PACING.quiet_s - 0.01)
    assert s.next_batch(due - 0.01 + PACING.quiet_s) == {"c0": cpus(0, 1)}  # one at a time
    s.done(due + PACING.quiet_s)
    now = due + PACING.quiet_s
    while now < due + PACING.quiet_max_s:  # events without end: bounded all the same
        s.event(now)
        assert s.next_batch(now) == {}
        now += 0.05
    assert s.next_batch(due + PACING.quiet_max_s) == {"c1": cpus(0, 1)}


def test_re_pins_the_cgroups_lack_go_in_batches_whatever_the_events() -> None:
    s = held(4, cpus(0, 1, 2))
    s.change([Update(f"c{i}", cpus(0, 1)) for i in range(4)], 0.0)
    s.event(0.0)
    assert len(s.next_batch(0.0)) == PACING.batch


def test_a_write_told_after_the_container_is_forgotten_is_ignored() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0))], 0.0)
    s.to_write()
    s.forget("c0", 0.001)
    assert s.written({"c0": cpus(0)}, (), 0.002) == ()
    assert s.wakeup(0.002) is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["c0", "c1", "c2"]),
            st.frozensets(st.integers(0, 4), min_size=1),
            st.floats(0, 0.3),
            st.sampled_from(["write", "fail", "batch", "none"]),
        ),
        max_size=40,
    )
)
def test_with_writes_every_cgroup_and_the_runtimes_record_end_on_the_latest_placement(
    steps: list[tuple[str, frozenset[int], float, str]],
) -> None:
    """Writes and batches interleaved as they may be: the cgroups (written by us, or by the
    runtime applying a batch) and the runtime's record both end on each container's latest
    placement; no write is handed out for a container in flight or being written."""
    start = cpus(0, 1, 2, 3, 4)
    s = held(3, start)
    cgroup = {f"c{i}": start for i in range(3)}
    record = dict(cgroup)
    latest = dict(cgroup)
    now = 0.0
    flying: dict[str, Placement] = {}
    for cid, ids, step, action in steps:
        now += step
        latest[cid] = Placement(ids, frozenset({0}))
        s.change([Update(cid, latest[cid])], now)
        if action in ("write", "fail"):
            handed = s.to_write()
            assert not set(handed) & set(flying)
            if action == "write":
                cgroup.update(handed)
                s.written(handed, (), now)
            else:
                s.written({}, list(handed), now)
        if action == "batch" and not flying and (batch := s.next_batch(now)):
            flying = batch
        elif flying:
            cgroup.update(flying)
            record.update(flying)
            flying = {}
            s.done(now)
    if flying:
        cgroup.update(flying)
        record.update(flying)
        s.done(now)
    while True:
        handed = s.to_write()
        cgroup.update(handed)
        s.written(handed, (), now)
        batches = drain(s, now)
        for batch in batches:
            cgroup.update(batch)
            record.update(batch)
        if not handed and not batches:
            break
    assert cgroup == latest
    assert record == latest


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["c0", "c1"]),
            st.frozensets(st.integers(0, 4), min_size=1),
            st.sampled_from(["change", "land", "fail", "batch", "ack", "lost"]),
        ),
        max_size=50,
    )
)
@settings(max_examples=1000)
def test_writes_asked_for_the_containers_an_event_touched_leave_none_behind(
    steps: list[tuple[str, frozenset[int], str]],
) -> None:
    """The plugin asks `to_write` only about the containers an event touched (changed, written,
    acknowledged, lost in flight), as a full node holds hundreds pending: asked so, nothing
    writable is ever left behind for a later event to find."""
    s = held(3, cpus(0, 1, 2, 3, 4))
    now = 0.0
    writing: dict[str, Placement] = {}
    flying: dict[str, Placement] = {}
    for cid, ids, action in steps:
        now += 0.01
        touched: Iterable[str] = ()
        if action == "change":
            s.change([Update(cid, Placement(ids, frozenset({0})))], now)
            touched = (cid,)
        elif action in ("land", "fail") and writing:
            touched, writing = writing, {}
            if action == "land":
                s.written(touched, (), now)
            else:
                s.written({}, list(touched), now)
        elif action == "batch" and not flying:
            flying = s.next_batch(now)
        elif action in ("ack", "lost") and flying:
            touched, flying = flying, {}
            if action == "ack":
                s.done(now)
            else:
                s.lost(now)
        writing.update(s.to_write(touched))
        assert s.to_write() == {}


# --- one ordered writer per container


def test_a_stale_growth_write_landing_after_the_next_grant_is_followed_by_the_latest() -> None:
    """Release then grant before the release's growth was written: the growth lands late, the
    cgroup holds the granted CPU for a moment, and the grant's shrink is written right behind
    it; the window waits for that write, not for the stale one."""
    s = held(2, cpus(0, 1, 2))
    s.change([Update(f"c{i}", cpus(0, 1)) for i in range(2)], 0.0)  # a grant of 2
    s.written(s.to_write(), (), 0.001)
    s.change([Update(f"c{i}", cpus(0, 1, 2)) for i in range(2)], 0.002)  # released
    growth = s.to_write()
    assert growth == {f"c{i}": cpus(0, 1, 2) for i in range(2)}  # on their way, not yet told
    s.change([Update(f"c{i}", cpus(0, 1)) for i in range(2)], 0.003)  # granted again
    assert s.grant("h", frozenset({2}), 0.003) is None  # what they hold is unknown: open
    assert s.to_write() == {}  # one write per container on its way at a time
    assert s.writes_due("h")
    assert s.written(growth, (), 0.004) == ()  # stale: they hold CPU 2 again
    assert s.to_write() == {f"c{i}": cpus(0, 1) for i in range(2)}
    assert s.written({f"c{i}": cpus(0, 1) for i in range(2)}, (), 0.005) == (Closed("h", 0.0),)
    assert not s.writes_due("h")


def test_a_grant_waits_for_a_re_pin_in_flight_that_would_put_its_cpu_back() -> None:
    """Written off CPU 3, then a release sent to the runtime (still short of CPU 0, so due at
    once): while that batch flies, CPU 3 is granted again. The cgroup does not hold it, but the
    runtime may apply the batch at any moment: the window waits for it, and for the write of
    the latest placement behind it."""
    s = held(1, cpus(0, 1, 2, 3))
    s.change([Update("c0", Placement(frozenset({1, 2}), None))], 0.0)  # 0 and 3 granted
    s.written(s.to_write(), (), 0.0)
    s.change([Update("c0", Placement(frozenset({1, 2, 3}), None))], 0.0)  # 3 released
    assert s.next_batch(0.0) == {"c0": Placement(frozenset({1, 2, 3}), None)}
    s.change([Update("c0", Placement(frozenset({1, 2}), None))], 0.001)  # 3 granted again
    assert s.grant("h", frozenset({3}), 0.001) is None
    assert s.done(0.01).closed == ()  # the runtime put 3 back
    assert s.to_write() == {"c0": Placement(frozenset({1, 2}), None)}
    assert s.written({"c0": Placement(frozenset({1, 2}), None)}, (), 0.02) == (Closed("h", 0.0),)


def test_a_write_landing_after_a_reply_placed_the_container_anew_is_written_back() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    handed = s.to_write()
    s.holds("c0", cpus(2))  # its own reply (a resize) sets it anew meanwhile
    assert s.written(handed, (), 0.001) == ()
    assert s.to_write() == {"c0": cpus(2)}
    s.written({"c0": cpus(2)}, (), 0.002)
    assert s.wakeup(0.002) is None  # the runtime's record holds it: nothing to send


def test_a_container_with_no_cgroup_is_not_written_again_until_it_has_one() -> None:
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    s.written({}, (), 0.0, absent=s.to_write())
    s.change([Update("c0", cpus(0))], 0.1)  # the next grant: no write tried again
    assert s.to_write() == {}
    assert s.next_batch(0.1) == {"c0": cpus(0)}  # the runtime re-pins it
    s.done(0.11)
    s.change([Update("c0", cpus(0, 1))], 0.2)
    s.has_cgroup("c0")  # it started
    assert s.to_write() == {"c0": cpus(0, 1)}


def test_the_start_waits_only_for_writes_still_to_come() -> None:
    s = held(2, cpus(0, 1))
    s.change([Update("c0", cpus(0)), Update("c1", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    assert s.writes_due("g")
    handed = s.to_write()
    assert s.writes_due("g")
    s.written({"c0": handed["c0"]}, ("c1",), 0.001)  # c1 refused: the runtime re-pins it
    assert not s.writes_due("g") and s.open_windows() == 1
    s.running("g", 0.002)
    s.next_batch(0.002)
    assert s.done(0.03).closed == (Closed("g", pytest.approx(0.028)),)


def test_the_start_does_not_wait_for_a_write_behind_a_re_pin_in_flight() -> None:
    """The runtime answers that batch only after the event whose answer would wait for it."""
    s = held(1, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1))], 0.0)
    assert s.next_batch(0.0) == {"c0": cpus(0, 1)}  # (writes off meanwhile, or refused)
    s.change([Update("c0", cpus(0))], 0.001)
    s.grant("g", frozenset({1}), 0.001)
    assert not s.writes_due("g") and s.open_windows() == 1
    s.done(0.01)
    assert s.writes_due("g")  # now it can be written


def test_a_written_placement_undone_by_another_writer_is_written_again() -> None:
    s = held(2, cpus(0, 1, 2))
    s.change([Update("c0", cpus(0, 1)), Update("c1", cpus(0, 1))], 0.0)
    s.written(s.to_write(), (), 0.001)
    assert s.unrecorded() == {"c0": cpus(0, 1), "c1": cpus(0, 1)}
    s.reverted(["c1"])  # systemd put its scope back on the runtime's record
    assert s.unrecorded() == {"c0": cpus(0, 1)}
    assert s.to_write() == {"c1": cpus(0, 1)}
    assert s.unrecorded() == {"c0": cpus(0, 1)}  # nothing being written is read back
    s.written({"c1": cpus(0, 1)}, (), 0.002)
    drain(s, 0.002)
    assert s.unrecorded() == {}  # on the runtime's record now


def _window_cpus(owner: str) -> frozenset[int]:
    return frozenset({int(owner[1:])})


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["grant", "release", "hand", "land", "fail", "batch", "ack"]),
            st.integers(0, 3),
            st.floats(0, 0.002),
        ),
        max_size=60,
    )
)
def test_decisions_with_slow_reordered_writers_never_leave_a_closed_window_shared(
    steps: list[tuple[str, int, float]],
) -> None:
    """Owners g0..g3 are granted CPU 0..3 and released in any order while three shared
    containers' writes are handed out, land in any order and late, fail, or are overtaken by
    the runtime's batches. Whenever a window is closed and its owner still holds its CPU, no
    shared container's cgroup holds that CPU (freed windows); at the end every cgroup and the
    runtime's record hold the latest placement."""
    every = frozenset(range(5))  # CPU 4 is never granted
    s = held(3, Placement(every, frozenset({0})))
    shared = [f"c{i}" for i in range(3)]
    cgroup = dict.fromkeys(shared, every)
    record = dict(cgroup)
    granted: set[int] = set()
    closed: set[str] = set()  # owners whose window closed, freed, and who hold their CPU
    writes: list[dict[str, Placement]] = []  # handed out, not landed: any order
    flying: dict[str, Placement] = {}
    now = 0.0

    def latest() -> frozenset[int]:
        return every - granted

    def tell(out: tuple[Closed, ...]) -> None:
        closed.update(c.owner for c in out if c.freed and int(c.owner[1:]) in granted)

    for action, k, step in steps:
        now += step
        owner = f"g{k}"
        if action == "grant" and k not in granted:
            granted.add(k)
            s.change([Update(c, Placement(latest(), None)) for c in shared], now)
            s.holds(owner, Placement(_window_cpus(owner), None))
            if (c := s.grant(owner, _window_cpus(owner), now)) is not None:
                tell((c,))
            s.running(owner, now)
        elif action == "release" and k in granted:
            granted.discard(k)
            closed.discard(owner)
            tell(s.forget(owner, now))
            s.change([Update(c, Placement(latest(), None)) for c in shared], now)
        elif action == "hand":
            if handed := s.to_write():
                assert not set(handed) & set(flying)
                assert not {c for w in writes for c in w} & set(handed)
                writes.append(handed)
        elif action in ("land", "fail") and writes:
            w = writes.pop(k % len(writes))
            if action == "land":
                cgroup.update({c: p.cpus for c, p in w.items()})
                tell(s.written(w, (), now))
            else:
                tell(s.written({}, list(w), now))
        elif action == "batch" and not flying:
            flying = s.next_batch(now)
        elif action == "ack" and flying:
            cgroup.update({c: p.cpus for c, p in flying.items()})
            record.update({c: p.cpus for c, p in flying.items()})
            flying = {}
            tell(s.done(now).closed)
        for owner in closed:
            assert all(int(owner[1:]) not in cpus for cpus in cgroup.values()), (owner, cgroup)
    for w in writes:
        cgroup.update({c: p.cpus for c, p in w.items()})
        tell(s.written(w, (), now))
    if flying:
        cgroup.update({c: p.cpus for c, p in flying.items()})
        record.update({c: p.cpus for c, p in flying.items()})
        tell(s.done(now).closed)
    while True:
        handed = s.to_write()
        cgroup.update({c: p.cpus for c, p in handed.items()})
        tell(s.written(handed, (), now))
        batches = drain(s, now)
        for batch in batches:
            cgroup.update({c: p.cpus for c, p in batch.items()})
            record.update({c: p.cpus for c, p in batch.items()})
        if not handed and not batches:
            break
    assert cgroup == dict.fromkeys(shared, latest())
    assert record == dict.fromkeys(shared, latest())
    assert s.open_windows() == 0
