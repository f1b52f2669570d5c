"""The update diff: exactly the containers whose pinning changed, with plain shared containers
holding their pool's shared set object (the fast path compares by identity)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.types import CpuKind, PolicyError, Update
from tests import machines
from tests.test_policy_engine import req

MACHINE = machines.load("server")
OPTIONS = (Options(), Options(reserved_resources=CpuAmount(milli=1500)))

# (kind, exclusive, shared, hide hyperthreads)
SHAPES = (
    (CpuKind.SHARED, 0, 100, False),
    (CpuKind.SHARED, 0, 0, False),
    (CpuKind.SHARED, 0, 200, True),
    (CpuKind.EXCLUSIVE, 2, 0, False),
    (CpuKind.MIXED, 1, 500, False),
    (CpuKind.RESERVED, 0, 100, False),
)

# (action, shape, slot); action 0 creates (releases when the slot is taken), 1 releases, 2
# resizes in place with hyperthreads hidden or shown the other way round (its pinning changes
# kind: plain shared or pinned on its own)
steps = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, len(SHAPES) - 1), st.integers(0, 11)),
    min_size=1,
    max_size=40,
)


def plain_shared(e: Engine, cid: str) -> bool:
    g = e.grants[cid]
    return g.kind is CpuKind.SHARED and not g.request.hide_hyperthreads


def check_updates(
    e: Engine, before: dict[str, frozenset[int] | None], ups: tuple[Update, ...], new: str
) -> None:
    """Updates name exactly the surviving other containers whose pinning moved, in id order."""
    expected = {
        cid: g.cpus
        for cid, g in e.grants.items()
        if cid != new and cid in before and before[cid] != g.cpus
    }
    assert [u.container_id for u in ups] == sorted(expected)
    for u in ups:
        assert u.placement.cpus == expected[u.container_id] and u.placement.mems is None
    for cid, g in e.grants.items():
        assert g.cpus == e.pin(g), f"{cid}: stale pinning"
        if plain_shared(e, cid):
            assert g.cpus == e.shared_cpus(g.pool), f"{cid}: not the pool's shared set"


def run_steps(e: Engine, steps: list[tuple[int, int, int]]) -> None:
    """Create, resize or release containers by slot, checking every step's updates."""
    for n, (action, shape, slot) in enumerate(steps):
        before = {cid: g.cpus for cid, g in e.grants.items()}
        cid = f"c{slot}"
        if action == 2 and cid in e.grants:
            asked = e.grants[cid].request
            d = e.resize(replace(asked, hide_hyperthreads=not asked.hide_hyperthreads))
            check_updates(e, before, d.updates, cid)
        elif action == 0 and cid not in e.grants:
            kind, excl, shared, hide = SHAPES[shape]
            try:
                d = e.place(req(cid, kind, exclusive=excl, shared=shared, hide_hyperthreads=hide))
            except PolicyError:
                assert {c: g.cpus for c, g in e.grants.items()} == before, f"step {n}"
                continue
            check_updates(e, before, d.updates, cid)
        else:
            check_updates(e, before, e.release(cid), cid)


@settings(max_examples=40, deadline=None)
@given(steps=steps, reserve=st.integers(0, len(OPTIONS) - 1))
def test_diff_names_exactly_the_changed_containers(
    steps: list[tuple[int, int, int]], reserve: int
) -> None:
    run_steps(Engine(MACHINE, OPTIONS[reserve]), steps)


def test_adopted_shared_cpuset_equal_to_the_new_shared_set_gets_no_update() -> None:
    """A runtime cpuset that is equal but not the same object is taken over without an update."""
    e = Engine(MACHINE, Options(reserved_resources=CpuAmount(milli=0)))
    probe = e.place(req("probe", CpuKind.EXCLUSIVE, exclusive=2))
    pool = e.pool_index(probe.pool)
    after = frozenset(set(e.shared_cpus(pool)))  # an equal copy of the shared set to come
    e.release("probe")
    g = e.adopt(req("s", shared=100), pool, frozenset(), False, None, after, None)
    assert g.cpus != e.shared_cpus(pool)
    d = e.place(req("probe", CpuKind.EXCLUSIVE, exclusive=2), hint=pool, keep=probe.exclusive)
    assert d.pool == probe.pool and d.exclusive == probe.exclusive
    assert d.updates == ()
    assert e.grants["s"].cpus == e.shared_cpus(pool)
    moved = e.release("probe")
    assert [u.container_id for u in moved] == ["s"]
    assert moved[0].placement.cpus == e.shared_cpus(pool)


def test_one_placement_per_pool_in_an_update_list() -> None:
    e = Engine(MACHINE, Options(reserved_resources=CpuAmount(milli=0)))
    first = e.place(req("s0", shared=100))
    for i in range(1, 4):
        assert e.place(req(f"s{i}", shared=100), hint=e.pool_index(first.pool)).pool == first.pool
    d = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=2), hint=e.pool_index(first.pool))
    assert d.pool == first.pool
    assert [u.container_id for u in d.updates] == ["s0", "s1", "s2", "s3"]
    assert all(u.placement == d.updates[0].placement for u in d.updates)
    assert d.updates[0].placement.cpus == e.shared_cpus(e.pool_index(first.pool))


def test_a_pool_back_at_an_earlier_shared_set_gives_the_same_updates() -> None:
    e = Engine(MACHINE, Options(reserved_resources=CpuAmount(milli=0)))
    e.place(req("s0", shared=100))
    pool = e.grants["s0"].pool
    e.place(req("s1", shared=100), hint=pool)
    first = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=2), hint=pool)
    before = e.release("x")
    back = e.shared_cpus(pool)
    again = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=2), hint=pool, keep=first.exclusive)
    assert again.exclusive == first.exclusive
    assert again.updates == first.updates and len(first.updates) == 2
    after = e.release("x")
    assert e.shared_cpus(pool) == back
    assert after == before and len(before) == 2


def outcomes(e: Engine, steps: list[tuple[int, int, int]]) -> list[object]:
    """Every step's decision, refusal or release updates, as `run_steps` takes them."""
    out: list[object] = []
    for action, shape, slot in steps:
        cid = f"c{slot}"
        if action == 2 and cid in e.grants:
            asked = e.grants[cid].request
            out.append(e.resize(replace(asked, hide_hyperthreads=not asked.hide_hyperthreads)))
        elif action == 0 and cid not in e.grants:
            kind, excl, shared, hide = SHAPES[shape]
            try:
                out.append(
                    e.place(req(cid, kind, exclusive=excl, shared=shared, hide_hyperthreads=hide))
                )
            except PolicyError as err:
                out.append(str(err))
        else:
            out.append(e.release(cid))
    return out


@settings(max_examples=20, deadline=None)
@given(steps=steps)
def test_kept_shared_sets_give_the_updates_of_none_kept(steps: list[tuple[int, int, int]]) -> None:
    """The speed seam against its plain path: with shared sets and their Updates kept (as by
    default, or only two, so forgotten all the time) every decision and update is the one of an
    engine that keeps none; the diff stays exactly the changed containers."""
    plain = outcomes(Engine(MACHINE, Options(), shared_sets_kept=0), steps)
    assert outcomes(Engine(MACHINE, Options()), steps) == plain
    assert outcomes(Engine(MACHINE, Options(), shared_sets_kept=2), steps) == plain
    run_steps(Engine(MACHINE, Options(), shared_sets_kept=2), steps)


def test_a_resize_that_hides_hyperthreads_keeps_later_updates_exact() -> None:
    """Resized in place, a shared container changes from plain (pinned to the pool's shared set)
    to pinned on its own and back; the diffs that follow treat it as what it now is."""
    e = Engine(MACHINE, Options(reserved_resources=CpuAmount(milli=0)))
    pool = e.pool_index(e.place(req("s", shared=100)).pool)
    for hide in (True, False):
        e.resize(req("s", shared=100, hide_hyperthreads=hide))
        before = {cid: g.cpus for cid, g in e.grants.items()}
        d = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=2), hint=pool)
        assert d.pool == e.pools[pool].name
        check_updates(e, before, d.updates, "x")
        assert [u.container_id for u in d.updates] == ["s"]
        before = {cid: g.cpus for cid, g in e.grants.items()}
        check_updates(e, before, e.release("x"), "x")


def test_updates_of_several_pools_come_in_container_id_order() -> None:
    """Exclusive CPUs of a NUMA node leave the shared sets of its socket and of the root too:
    the shared containers of all three are updated, in one list by container id."""
    e = Engine(MACHINE, Options(reserved_resources=CpuAmount(milli=0)))
    leaf = next(p.index for p in e.pools if not p.children)
    socket = e.pools[leaf].parent
    assert socket is not None
    for cid, pool in (("a", leaf), ("b", 0), ("c", socket), ("d", leaf), ("e", 0)):
        assert e.place(req(cid, shared=100), hint=pool).pool == e.pools[pool].name
    e.resize(req("d", shared=100, hide_hyperthreads=True))  # pinned on its own
    before = {cid: g.cpus for cid, g in e.grants.items()}
    d = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=2), hint=leaf)
    assert d.pool == e.pools[leaf].name
    check_updates(e, before, d.updates, "x")
    assert [u.container_id for u in d.updates] == ["a", "b", "c", "d", "e"]


def test_ledger_refuses_to_refile_a_user_it_never_filed() -> None:
    """The plain users are kept by position; refiling an id that is not there must fail rather
    than drop the user found at its place."""
    pools = Engine(machines.load("4-socket"), Options()).pools
    ledger = Ledger(pools, tuple((p.index,) for p in pools), frozenset(), (0,) * len(pools))
    grant = mock.sentinel.grant
    ledger.add_user(1, "b", grant, plain=True)  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        ledger.refile(1, "a", grant, plain=False)  # type: ignore[arg-type]
    assert ledger.plain_ids[1] == ["b"] and ledger.plain_grant(1, "b") is grant
