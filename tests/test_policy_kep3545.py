"""KEP-3545 across pools: an exclusive grant spans the fewest, then closest, NUMA nodes of the
whole machine, whichever pools (sockets, dies) the free nodes are in.

The machines are the KEP's own 4-node and 8-node distance matrices, built in several package and
die layouts through the simulator's machine description; other containers hold CPUs node by node
so that the free CPUs sit where each case needs them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.allocator.numasets import average_distance, best_node_set
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import Decision
from nri_topology.simulate.machine_spec import parse_spec, to_machine
from nri_topology.topology.model import Machine
from tests.test_policy_restore import holding, workload

KEP4 = [
    [10, 11, 12, 12],
    [11, 10, 12, 12],
    [12, 12, 10, 11],
    [12, 12, 11, 10],
]
KEP8 = [
    [10, 11, 12, 12, 30, 30, 30, 30],
    [11, 10, 12, 12, 30, 30, 30, 30],
    [12, 12, 10, 11, 30, 30, 30, 30],
    [12, 12, 11, 10, 30, 30, 30, 30],
    [30, 30, 30, 30, 10, 11, 12, 12],
    [30, 30, 30, 30, 11, 10, 12, 12],
    [30, 30, 30, 30, 12, 12, 10, 11],
    [30, 30, 30, 30, 12, 12, 11, 10],
]

# Layouts: each package is a list of dies, each die a list of NUMA nodes.
LAYOUTS4: dict[str, list[list[list[int]]]] = {
    "1 socket": [[[0, 1, 2, 3]]],
    "2 sockets of near pairs": [[[0, 1]], [[2, 3]]],
    "2 sockets of far pairs": [[[0, 2]], [[1, 3]]],
    "1 socket, 2 dies": [[[0, 1], [2, 3]]],
    "4 sockets": [[[0]], [[1]], [[2]], [[3]]],
}
LAYOUTS8: dict[str, list[list[list[int]]]] = {
    "2 sockets x 4 nodes": [[[0, 1, 2, 3]], [[4, 5, 6, 7]]],
    "2 sockets x 2 dies": [[[0, 1], [2, 3]], [[4, 5], [6, 7]]],
    "4 sockets x 2 nodes": [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]],
    "1 socket x 8 nodes": [[list(range(8))]],
    "8 sockets": [[[n]] for n in range(8)],
    "2 sockets, odd and even nodes": [[[0, 2, 4, 6]], [[1, 3, 5, 7]]],
}

NO_RESERVE = Options(reserved_resources=CpuAmount(milli=0))


def kep_machine(
    rows: list[list[int]],
    layout: Sequence[Sequence[Sequence[int]]],
    per_node: int,
    threads: int = 1,
) -> Machine:
    """Node n holds CPUs n*per_node.., `threads` consecutive ids per core; packages and dies
    as `layout`."""

    def cores(nodes: Sequence[int]) -> list[list[int]]:
        return [
            [n * per_node + i + t for t in range(threads)]
            for n in nodes
            for i in range(0, per_node, threads)
        ]

    doc = {
        "name": "kep3545",
        "packages": [
            {"id": p, "dies": [{"id": d, "cores": cores(die)} for d, die in enumerate(dies)]}
            for p, dies in enumerate(layout)
        ],
        "nodes": [
            {
                "id": n,
                "cpus": f"{n * per_node}-{n * per_node + per_node - 1}",
                "memory": "4Gi",
            }
            for n in range(len(rows))
        ],
        "distances": rows,
    }
    return to_machine(parse_spec(doc))


def held(m: Machine, options: Options, used: Sequence[int]) -> Policy:
    """A policy restarted with a container holding the first used[n] CPUs of node n
    exclusively, as the runtime reports them."""
    cpus = [frozenset(sorted(m.nodes[n].cpus)[:count]) for n, count in enumerate(used) if count]
    return holding(m, options, *cpus)


def place(policy: Policy, k: int) -> Decision:
    """The decision for a new Guaranteed container of `k` whole CPUs."""
    return policy.create(*workload(1, "g", 1000 * k))


def span(m: Machine, cpus: frozenset[int]) -> frozenset[int]:
    return frozenset(m.cpus[c].node for c in cpus)


def global_best(m: Machine, used: Sequence[int], per_node: int, k: int) -> tuple[int, ...]:
    return best_node_set(m, {n: per_node - u for n, u in enumerate(used)}, k)


# (name, rows, per node, CPUs held per node, request, acceptable node sets)
CASES = [
    # The case of the issue: nodes 1 and 5 freed, 3 CPUs free on every other node; socket 1
    # alone would need 3 nodes, the two far free nodes are fewer (20 vs 11.1: fewer wins).
    ("8: freed 1 and 5", KEP8, 8, [5, 0, 5, 5, 5, 0, 5, 5], 14, [{1, 5}]),
    ("8: freed 0 and 4", KEP8, 8, [0, 5, 5, 5, 0, 5, 5, 5], 14, [{0, 4}]),
    ("8: freed 2 and 3", KEP8, 8, [5, 5, 0, 0, 5, 5, 5, 5], 14, [{2, 3}]),
    ("8: freed 6 and 7", KEP8, 8, [5, 5, 5, 5, 5, 5, 0, 0], 14, [{6, 7}]),
    ("8: 2 and 6 far, 7 near 6", KEP8, 8, [8, 8, 0, 8, 8, 8, 0, 2], 14, [{6, 7}]),
    ("8: fits one node", KEP8, 8, [5, 0, 5, 5, 5, 0, 5, 5], 6, [{1}, {5}]),
    ("8: three nodes near", KEP8, 8, [2, 2, 2, 8, 8, 8, 8, 8], 18, [{0, 1, 2}]),
    ("4: the closest pair, not the lowest ids", KEP4, 4, [3, 0, 0, 0], 6, [{2, 3}]),
    ("4: only a far pair is free", KEP4, 4, [4, 0, 4, 0], 6, [{1, 3}]),
    ("4: two near pairs tie", KEP4, 4, [2, 2, 2, 2], 4, [{0, 1}, {2, 3}]),
    ("4: 1 and 2 freed", KEP4, 4, [3, 0, 0, 3], 8, [{1, 2}]),
    ("4: 0 and 3 freed", KEP4, 4, [0, 3, 3, 0], 8, [{0, 3}]),
]


@pytest.mark.parametrize(
    ("layout", "rows", "per_node", "used", "k", "expected"),
    [
        pytest.param(layout, *case[1:], id=f"{case[0]} / {layout}")
        for case in CASES
        for layout in (LAYOUTS4 if len(case[1]) == 4 else LAYOUTS8)
    ],
)
def test_fewest_then_closest_nodes_in_any_layout(
    layout: str,
    rows: list[list[int]],
    per_node: int,
    used: list[int],
    k: int,
    expected: list[set[int]],
) -> None:
    layouts = LAYOUTS4 if len(rows) == 4 else LAYOUTS8
    m = kep_machine(rows, layouts[layout], per_node)
    d = place(held(m, NO_RESERVE, used), k)
    got = span(m, d.exclusive)
    assert got in [frozenset(s) for s in expected], d.reason
    best = global_best(m, used, per_node, k)
    assert (len(got), average_distance(m, got)) == (len(best), average_distance(m, best))
    assert d.placement.mems == got


@pytest.mark.parametrize("layout", list(LAYOUTS8))
def test_shared_containers_keep_their_cpus_inside_the_scored_span(layout: str) -> None:
    """A BestEffort container in the root keeps a CPU; the grant still uses the two free nodes
    when they hold enough sliceable CPUs."""
    m = kep_machine(KEP8, LAYOUTS8[layout], 8)
    policy = held(m, NO_RESERVE, [5, 0, 5, 5, 5, 0, 5, 5])
    policy.create(*workload(2, "be", 0))
    d = place(policy, 14)
    assert span(m, d.exclusive) == {1, 5}


@pytest.mark.parametrize("layout", list(LAYOUTS8))
def test_whole_cores_with_full_pcpus_only(layout: str) -> None:
    """Two threads per core and full_pcpus_only: the span counts whole free cores only."""
    m = kep_machine(KEP8, LAYOUTS8[layout], 8, threads=2)
    options = Options(reserved_resources=CpuAmount(milli=0), full_pcpus_only=True)
    # 2 cores held per node leave 2 free; socket 1 alone would need 3 nodes for 7 cores
    d = place(held(m, options, [4, 0, 4, 4, 4, 0, 4, 4]), 14)
    assert span(m, d.exclusive) == {1, 5}
    assert all(m.cpus[c].threads <= d.exclusive for c in d.exclusive)


@settings(max_examples=60, deadline=None)
@given(
    layout=st.sampled_from(list(LAYOUTS8)),
    used=st.lists(st.integers(0, 8), min_size=8, max_size=8),
    data=st.data(),
)
def test_grant_spans_as_few_and_as_close_nodes_as_the_machine_allows(
    layout: str, used: list[int], data: st.DataObject
) -> None:
    """Invariant: without shared containers, an exclusive grant's nodes measure exactly as the
    best node set of the machine's free CPUs (count, then average distance)."""
    free = 64 - sum(used)
    if free < 1:
        return
    k = data.draw(st.integers(1, free))
    m = kep_machine(KEP8, LAYOUTS8[layout], 8)
    d = place(held(m, NO_RESERVE, used), k)
    got = span(m, d.exclusive)
    best = global_best(m, used, 8, k)
    assert len(got) == len(best)
    assert average_distance(m, got) == pytest.approx(average_distance(m, best))
