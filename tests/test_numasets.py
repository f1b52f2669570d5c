"""NUMA node sets by distance (KEP-3545), with the KEP's own 4-node and 8-node examples."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machines import load

from nri_topology.policy.allocator.cpuallocator import AllocationError
from nri_topology.policy.allocator.numasets import (
    average_distance,
    best_node_set,
    closest_node_sets,
    grant_nodes,
)
from nri_topology.topology.model import Machine, MemoryTier, NumaNode


def machine(matrix: list[list[int]], ids: list[int] | None = None) -> Machine:
    """A CPU-less Machine that only carries NUMA distances (all these functions look at)."""
    ids = ids if ids is not None else list(range(len(matrix)))
    nodes = {
        n: NumaNode(
            n,
            frozenset(),
            1 << 30,
            MemoryTier.DRAM,
            "cpu",
            {m: matrix[i][j] for j, m in enumerate(ids)},
        )
        for i, n in enumerate(ids)
    }
    return Machine(cpus={}, nodes=nodes)


KEP4 = machine(
    [
        [10, 11, 12, 12],
        [11, 10, 12, 12],
        [12, 12, 10, 11],
        [12, 12, 11, 10],
    ]
)
KEP8 = machine(
    [
        [10, 11, 12, 12, 30, 30, 30, 30],
        [11, 10, 12, 12, 30, 30, 30, 30],
        [12, 12, 10, 11, 30, 30, 30, 30],
        [12, 12, 11, 10, 30, 30, 30, 30],
        [30, 30, 30, 30, 10, 11, 12, 12],
        [30, 30, 30, 30, 11, 10, 12, 12],
        [30, 30, 30, 30, 12, 12, 10, 11],
        [30, 30, 30, 30, 12, 12, 11, 10],
    ]
)
SNC2 = machine([[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]])


@pytest.mark.parametrize(
    ("m", "nodes", "expected"),
    [
        (KEP4, {0}, 10),
        (KEP4, {0, 1}, 10.5),
        (KEP4, {0, 2}, 11),
        (KEP4, {0, 3}, 11),
        (KEP4, {2, 3}, 10.5),
        (KEP4, {1, 2}, 11),
        (KEP8, {0, 4}, 20),
        (KEP8, {0, 1, 2}, 100 / 9),
        (SNC2, {0, 1}, 10.5),
        (SNC2, {0, 2}, 15.5),
    ],
)
def test_average_distance(m: Machine, nodes: set[int], expected: float) -> None:
    assert average_distance(m, nodes) == pytest.approx(expected)


def test_kep_4_node_example() -> None:
    """Of all pairs, {0,1} and {2,3} are closest (10.5); lower ids break the tie."""
    pairs = [set(p) for p in combinations(range(4), 2)]
    ranked = closest_node_sets(KEP4, pairs)
    assert ranked[:2] == [{0, 1}, {2, 3}]
    assert best_node_set(KEP4, {0: 4, 1: 4, 2: 4, 3: 4}, 6) == (0, 1)
    assert best_node_set(KEP4, {0: 0, 1: 4, 2: 4, 3: 4}, 6) == (2, 3)


def test_kep_8_node_example() -> None:
    """{0,4} (avg 20) beats {0,1,2} (avg 11.1): fewer nodes always win."""
    assert closest_node_sets(KEP8, [{0, 1, 2}, {0, 4}]) == [{0, 4}, {0, 1, 2}]
    # Only 0 and 4 have room enough for a two-node answer.
    free = {0: 5, 1: 2, 2: 2, 3: 2, 4: 5, 5: 0, 6: 0, 7: 0}
    assert best_node_set(KEP8, free, 10) == (0, 4)
    assert best_node_set(KEP8, free, 11) == (0, 1, 4)


def test_snc_pairs_prefer_same_socket() -> None:
    """§3.3: {1,2} vs {2,3}: 15.5 vs 10.5, so {2,3} when node 0 is full."""
    assert best_node_set(SNC2, {0: 0, 1: 6, 2: 6, 3: 6}, 10) == (2, 3)
    assert closest_node_sets(SNC2, [{1, 2}, {2, 3}]) == [{2, 3}, {1, 2}]


def test_single_node_wins_when_it_fits() -> None:
    assert best_node_set(SNC2, {0: 2, 1: 8, 2: 9, 3: 1}, 8) == (1,)


def test_fits_callback_filters() -> None:
    """A second resource (e.g. memory only on nodes 2 and 3) rules out the closest pair."""
    got = best_node_set(KEP4, {n: 4 for n in range(4)}, 6, fits=lambda s: 0 not in s)
    assert got == (2, 3)


def test_sparse_node_ids() -> None:
    m = machine([[10, 20, 30], [20, 10, 12], [30, 12, 10]], ids=[0, 33, 72])
    assert best_node_set(m, {0: 3, 33: 3, 72: 3}, 5) == (33, 72)


@pytest.mark.parametrize(
    ("free", "need", "message"),
    [
        ({0: 1, 1: 1}, 5, r"covers 5.*total 2\)$"),
        ({0: 1, 9: 1}, 1, r"NUMA nodes \[9\] are not nodes"),
        ({0: -1}, 0, "must not be negative"),
    ],
)
def test_best_node_set_errors(free: dict[int, int], need: int, message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        best_node_set(KEP4, free, need)


def test_nothing_accepted_says_so() -> None:
    with pytest.raises(AllocationError, match="no covering set was accepted"):
        best_node_set(KEP4, {0: 4, 1: 4}, 2, fits=lambda s: False)


def test_empty_sets_are_refused() -> None:
    with pytest.raises(AllocationError, match="empty"):
        average_distance(KEP4, [])
    with pytest.raises(AllocationError, match="empty"):
        closest_node_sets(KEP4, [set()])


def test_missing_distance_is_named() -> None:
    m = machine([[10, 11], [11, 10]])
    broken = Machine(
        cpus={},
        nodes={0: m.nodes[0], 1: NumaNode(1, frozenset(), 0, MemoryTier.DRAM, "cpu", {1: 10})},
    )
    with pytest.raises(AllocationError, match="no distance known"):
        average_distance(broken, [0, 1])


# --- properties ---------------------------------------------------------------------------------


@st.composite
def distance_machines(draw: st.DrawFn, max_nodes: int = 7) -> Machine:
    n = draw(st.integers(min_value=1, max_value=max_nodes))
    matrix = [[10] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            matrix[a][b] = matrix[b][a] = draw(st.integers(min_value=11, max_value=40))
    return machine(matrix)


@settings(max_examples=100, deadline=None)
@given(distance_machines(), st.randoms(use_true_random=False))
def test_average_distance_ignores_order(m: Machine, rnd: object) -> None:
    nodes = list(m.nodes)
    shuffled = nodes[:]
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert average_distance(m, nodes) == average_distance(m, shuffled)
    assert average_distance(m, nodes + nodes) == average_distance(m, nodes)


@settings(max_examples=100, deadline=None)
@given(distance_machines(), st.data())
def test_best_node_set_is_the_brute_force_best(m: Machine, data: st.DataObject) -> None:
    """Same answer as ranking every covering subset: fewest nodes, closest, lowest ids."""
    free = {n: data.draw(st.integers(min_value=0, max_value=8)) for n in m.nodes}
    need = data.draw(st.integers(min_value=0, max_value=sum(free.values()) + 2))
    covering = [
        set(c)
        for k in range(1, len(free) + 1)
        for c in combinations(sorted(free), k)
        if sum(free[n] for n in c) >= need
    ]
    if not covering:
        with pytest.raises(AllocationError):
            best_node_set(m, free, need)
        return
    got = best_node_set(m, free, need)
    assert set(got) == closest_node_sets(m, covering)[0]
    assert len(got) == min(len(c) for c in covering)


def test_sixteen_nodes_stay_cheap() -> None:
    """16 nodes, half of them needed: the pruned search still finds the nearest socket."""
    n = 16
    matrix = [
        [10 if a == b else (11 if a // 8 == b // 8 else 21) for b in range(n)] for a in range(n)
    ]
    m = machine(matrix)
    free = {i: 4 for i in range(n)}
    free[0] = 0
    assert best_node_set(m, free, 28) == (1, 2, 3, 4, 5, 6, 7)


GRANT_MACHINES = ["4-socket", "server", "2s4n40c", "amd64-8node", "amd16", "arm128", "sparse"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(GRANT_MACHINES), st.data())
def test_grant_nodes_is_the_best_set_of_free_cpus(name: str, data: st.DataObject) -> None:
    """`grant_nodes` stops at the lowest node that holds the grant; that must be the answer of
    `best_node_set` over the free CPUs of every node, and its refusals must read the same."""
    m = load(name)
    nodes = data.draw(st.sets(st.sampled_from(m.cpu_nodes), min_size=1))
    order = data.draw(st.permutations(sorted(nodes)))
    within = sorted(c for n in nodes for c in m.nodes[n].cpus)
    cpus = frozenset(within)
    if data.draw(st.booleans()):  # part taken
        cpus = frozenset(data.draw(st.lists(st.sampled_from(within), max_size=len(within))))
    count = data.draw(st.integers(0, len(within) + 2))
    full = data.draw(st.booleans())
    usable = frozenset(c for c in cpus if m.cpus[c].threads <= cpus) if full else cpus
    per_node = {n: len(usable & m.nodes[n].cpus) for n in order}

    def outcome(pick: Callable[[], tuple[int, ...]]) -> tuple[int, ...] | str:
        try:
            return pick()
        except AllocationError as e:
            return str(e)

    assert outcome(lambda: grant_nodes(m, cpus, count, order, full)) == outcome(
        lambda: best_node_set(m, per_node, count)
    )
