"""The packer against a plain reference: its walk taken literally, step by step.

`take_cpus` works on bit masks, finds the smallest unit that holds the rest in one pass and
skips the parts of the machine tree that cannot matter. The reference below does what the
allocator's module docstring says in the plainest way (sets of ids, one pass per level, every
unit visited), so the two must pick exactly the same CPUs, or fail alike, on any free set of
any machine: the kubelet's test topologies, the committed machines and a synthetic one, from
nearly idle to nearly full, whole machines and single pools.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machines import DATA, SyntheticSpec, load, synthetic
from test_cpuallocator import PROPERTY_TOPOLOGIES, TOPOLOGIES

from nri_topology.policy.allocator import cpuallocator
from nri_topology.policy.allocator.cpuallocator import AllocationError, take_cpus
from nri_topology.topology.model import Machine

COMMITTED = ["4-socket", "server", *sorted(p.stem for p in DATA.glob("*.json"))]


@pytest.fixture(scope="module")
def all_machines(tmp_path_factory: pytest.TempPathFactory) -> list[Machine]:
    spec = SyntheticSpec(sockets=2, nodes=4, cores=16, threads=2, memory=64 << 30)
    return [
        *(TOPOLOGIES[n] for n in PROPERTY_TOPOLOGIES),
        *(load(n) for n in COMMITTED),
        synthetic(tmp_path_factory.mktemp("synthetic-256"), spec),
    ]


def _order(unit: cpuallocator._Unit, depth: int, free: set[int]) -> list[cpuallocator._Unit]:
    """Units at `depth` below `unit` with free CPUs; siblings by fewest free, then order id."""
    if unit.depth == depth:
        return [unit]
    kids = sorted(
        (k for k in unit.children if k.cpus & free), key=lambda k: (len(k.cpus & free), k.order)
    )
    return [u for k in kids for u in _order(k, depth, free)]


def _whole(m: Machine, cpus: set[int] | frozenset[int]) -> set[int]:
    return {c for core in m.cores if core <= cpus for c in core}


def reference_pack(m: Machine, cpus: set[int], count: int, full: bool) -> set[int]:
    tree = cpuallocator._tree(m)
    core_depth = tree.depths["core"]
    tpc = m.threads_per_core
    free = set(cpus)
    taken: set[int] = set()

    def need() -> int:
        return count - len(taken)

    def take(unit_cpus: set[int] | frozenset[int]) -> None:
        taken.update(unit_cpus)
        free.difference_update(unit_cpus)

    def holder(scope: cpuallocator._Unit) -> cpuallocator._Unit:
        whole, whole_need = _whole(m, free), need() - need() % tpc
        for depth in range(core_depth - 1, scope.depth, -1):
            for u in _order(scope, depth, free):
                if len(u.cpus & free) >= need() and len(u.cpus & whole) >= whole_need:
                    return u
        return scope

    scope = tree.root
    for depth in range(core_depth + 1):
        if depth < scope.depth:
            continue
        for u in _order(scope, depth, free):
            odd = full and (u.size < tpc if depth == core_depth else u.size % tpc)
            if u.size <= need() and u.cpus <= free and not odd:
                take(u.cpus)
        if need() == 0:
            return taken
        scope = holder(scope)
    for area in (scope, tree.root):
        for core in _order(area, core_depth, free):
            if full and core.size <= need() and core.cpus <= free:
                take(core.cpus)
            if not full:
                take(sorted(core.cpus & free)[: need()])  # type: ignore[arg-type]
        if need() == 0:
            return taken
    raise AllocationError("cores of unequal size")


def reference_take(
    m: Machine, available: frozenset[int], count: int, full: bool, prefer: frozenset[int]
) -> set[int]:
    tpc = m.threads_per_core
    pool = set(available)
    if full:
        pool = _whole(m, available)
        if count % tpc or count > len(pool):
            raise AllocationError("not whole cores")
    if count > len(available):
        raise AllocationError("not enough")
    if count == 0:
        return set()
    preferred = pool & prefer
    if full:
        preferred = _whole(m, preferred)
    first = min(count, len(preferred))
    if full:
        first -= first % tpc
    if first == 0:
        return reference_pack(m, pool, count, full)
    head = reference_pack(m, preferred, first, full)
    if first == count:
        return head
    return head | reference_pack(m, pool - head, count - first, full)


def _outcome(pick: Callable[[], set[int] | frozenset[int]]) -> set[int] | str:
    try:
        return set(pick())
    except AllocationError:
        return "refused"


@st.composite
def free_sets(draw: st.DrawFn, m: Machine) -> frozenset[int]:
    """A free set: in the whole machine or one NUMA node or package (a pool), from nearly
    idle to nearly full."""
    scopes = [m.all_cpus, *(m.nodes[n].cpus for n in m.cpu_nodes)]
    scopes += [frozenset(c for c in m.all_cpus if m.cpus[c].package == p) for p in m.packages]
    scope = sorted(draw(st.sampled_from(scopes)))
    density = draw(st.sampled_from((1.0, 0.97, 0.9, 0.7, 0.5, 0.2)))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return frozenset(c for c in scope if rng.random() < density)


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_take_cpus_picks_what_the_plain_walk_picks(
    all_machines: list[Machine], data: st.DataObject
) -> None:
    m = data.draw(st.sampled_from(all_machines))
    available = data.draw(free_sets(m))
    count = data.draw(
        st.one_of(st.integers(0, min(16, len(available))), st.integers(0, len(available)))
    )
    full = data.draw(st.booleans())
    prefer = frozenset()
    if data.draw(st.integers(0, 4)) == 0:
        prefer = data.draw(free_sets(m))
    got = _outcome(lambda: take_cpus(m, available, count, full_pcpus_only=full, prefer=prefer))
    assert got == _outcome(lambda: reference_take(m, available, count, full, prefer))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_core_mask_search_finds_the_first_holding_child(
    all_machines: list[Machine], data: st.DataObject
) -> None:
    """Where every child is one core (at most two threads), the packer finds the first child
    that holds `need` on masks of the cores' lowest threads; it must be the one the ranking
    of children by free CPUs (fewest first), then order id, puts first."""
    m = data.draw(st.sampled_from(all_machines))
    tree = cpuallocator._tree(m)
    free_set = data.draw(free_sets(m))
    free = cpuallocator._mask(free_set)
    whole = _whole(m, free_set)
    units = [
        u
        for depth in range(tree.core_depth)
        for u in _order(tree.root, depth, set(m.all_cpus))
        if u.core_kids
    ]
    if m.threads_per_core <= 2:
        assert units  # every machine of the test has some
    for need in (1, 2):
        whole_need = need - need % m.threads_per_core
        for u in units:
            holders = [
                k
                for k in sorted(u.children, key=lambda k: (len(k.cpus & free_set), k.order))
                if len(k.cpus & free_set) >= need and len(k.cpus & whole) >= whole_need
            ]
            found = cpuallocator._first_core(tree, u, free, need)
            if not holders:
                assert found is None
            else:
                assert found is not None and found.cpus == holders[0].cpus
                assert found.depth == tree.core_depth - 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_walk_of_a_level_is_the_plain_nested_order(
    all_machines: list[Machine], data: st.DataObject
) -> None:
    """The packer's list of the units of a level goes down single children at once and orders
    children that are single cores on masks; it must be the plain nested packing order."""
    m = data.draw(st.sampled_from(all_machines))
    tree = cpuallocator._tree(m)
    free_set = set(data.draw(free_sets(m)))
    depth = data.draw(st.integers(min_value=-1, max_value=tree.core_depth))
    scope = data.draw(st.sampled_from(_order(tree.root, depth, set(m.all_cpus))))
    level = data.draw(st.integers(min_value=scope.depth, max_value=tree.core_depth))
    free = cpuallocator._mask(free_set)
    assert cpuallocator._units_at(tree, scope, level, free) == _order(scope, level, free_set)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_search_finds_the_first_holder_at_the_deepest_level(
    all_machines: list[Machine], data: st.DataObject
) -> None:
    """The packer's search for the smallest unit that holds the rest is one walk that skips
    units that do not hold it and stops at the first chain reaching the level above the cores;
    that is right only because a unit's descendants never hold more, so it must find exactly
    the first holding unit of the plain order at the deepest level that has one."""
    m = data.draw(st.sampled_from(all_machines))
    tree = cpuallocator._tree(m)
    free_set = set(data.draw(free_sets(m)))
    need = data.draw(st.integers(min_value=1, max_value=max(1, len(free_set))))
    whole = _whole(m, free_set)
    whole_need = need - need % m.threads_per_core
    depth = data.draw(st.integers(min_value=-1, max_value=tree.core_depth))
    scope = data.draw(st.sampled_from(_order(tree.root, depth, set(m.all_cpus))))
    free = cpuallocator._mask(free_set)
    assert cpuallocator._whole_free(tree, free) == cpuallocator._mask(whole)
    plain = [
        u
        for d in range(tree.core_depth - 1, scope.depth, -1)
        for u in _order(scope, d, free_set)
        if len(u.cpus & free_set) >= need and len(u.cpus & whole) >= whole_need
    ]
    assert cpuallocator._deepest_holder(tree, scope, free, need) is (plain[0] if plain else scope)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_cpu_sets_read_as_masks_either_way(
    all_machines: list[Machine], data: st.DataObject
) -> None:
    """Large CPU sets become masks through a byte per CPU, small ones CPU by CPU."""
    m = data.draw(st.sampled_from(all_machines))
    cpus = data.draw(free_sets(m))
    assert cpuallocator._cpus_mask(cpuallocator._tree(m), cpus) == sum(1 << c for c in cpus)
