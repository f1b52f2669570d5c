"""The update schedule as a pure state machine: coalescing, batching, debounce, failures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.daemon.schedule import Closed, Pacing, Schedule, shrinks
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
    now, outcomes = 0.0, []
    while (wait := s.wakeup(now)) is not None:
        now += wait
        s.next_batch(now)
        outcomes.append(s.done(now, retry={"c0"}))
    assert [bool(d.retried) for d in outcomes] == [True, True, False]
    assert outcomes[-1].given_up == ("c0",)
    assert outcomes[-1].closed == (Closed("g", pytest.approx(now)),)  # bounded: not open for good


def test_a_container_gone_is_dropped_and_frees_the_window() -> None:
    s = held(2, cpus(0, 1))
    s.change([Update("c0", cpus(0)), Update("c1", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
    s.next_batch(0.0)
    done = s.done(0.02, drop={"c1"})
    assert done.dropped == ("c1",)
    assert done.closed == (Closed("g", pytest.approx(0.02)),)


def test_forgetting_a_waiting_container_closes_the_window_and_the_owners_own_is_void() -> None:
    s = held(2, cpus(0, 1))
    s.change([Update("c0", cpus(0)), Update("c1", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
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
    assert s.written({f"c{i}": cpus(0, 1, 2) for i in range(3)}, (), 0.004) == (
        Closed("g", pytest.approx(0.004)),
    )
    assert s.next_batch(0.1) == {}  # the runtime's record still follows, after the start
    assert s.started("g")
    # the runtime's record follows, one container at a time (its cgroup holds it already)
    assert drain(s, 0.1) == [{f"c{i}": cpus(0, 1, 2)} for i in range(3)]
    assert s.open_windows() == 0


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
    assert s.to_write() == {}
    assert s.done(0.01).closed == ()
    assert s.to_write() == {"c0": cpus(0)}
    assert s.written({"c0": cpus(0)}, (), 0.011) == (Closed("g", pytest.approx(0.01)),)


def test_a_failed_write_leaves_the_window_to_the_runtime() -> None:
    s = held(1, cpus(0, 1))
    s.change([Update("c0", cpus(0))], 0.0)
    s.grant("g", frozenset({1}), 0.0)
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
