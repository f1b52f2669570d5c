"""Pool tree shapes on the shared machines and on hand-built ones."""

from __future__ import annotations

import pytest

from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.pools import build_pools
from nri_topology.policy.types import PolicyError
from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode
from tests import machines
from tests.test_request import pod_and_container

DRAM, PMEM, HBM = MemoryTier.DRAM, MemoryTier.PMEM, MemoryTier.HBM


def flat_machine(
    node_cpus: dict[int, list[int]],
    package: dict[int, int],
    distances: dict[int, dict[int, int]],
    memory: dict[int, int] | None = None,
    tiers: dict[int, MemoryTier] | None = None,
) -> Machine:
    """A machine without SMT: every CPU its own core; nodes without CPUs are memory-only."""
    cpus = {}
    for node, ids in node_cpus.items():
        for c in ids:
            cpus[c] = Cpu(
                id=c,
                package=package.get(node, 0),
                die=0,
                cluster=c,
                core=c,
                node=node,
                threads=frozenset({c}),
                l2=frozenset({c}),
                l3=frozenset(x for n, xs in node_cpus.items() for x in xs if n == node),
            )
    memory = memory or {}
    tiers = tiers or {}
    nodes = {
        n: NumaNode(
            id=n,
            cpus=frozenset(node_cpus.get(n, [])),
            memory=memory.get(n, 8 << 30),
            tier=tiers.get(n, DRAM),
            tier_source="config",
            distances=distances[n],
        )
        for n in distances
    }
    return Machine(cpus=cpus, nodes=nodes)


def matrix(rows: list[list[int]], ids: list[int] | None = None) -> dict[int, dict[int, int]]:
    ids = ids or list(range(len(rows)))
    return {a: {b: rows[i][j] for j, b in enumerate(ids)} for i, a in enumerate(ids)}


@pytest.mark.parametrize(
    ("name", "count", "leaf_cpus", "root_cpus"),
    [
        ("desktop", 1, 20, 20),
        ("server", 7, 28, 112),
        ("4-socket", 5, 36, 144),
    ],
)
def test_reference_fixture_shapes(name: str, count: int, leaf_cpus: int, root_cpus: int) -> None:
    m = machines.load(name)
    pools = build_pools(m, m.all_cpus, m.isolated, frozenset())
    assert len(pools) == count
    assert len(pools[0].cpus) == root_cpus
    leaves = [p for p in pools if not p.children]
    assert {len(p.cpus) for p in leaves} == {leaf_cpus}


def test_server_pmem_joins_closest_numa_nodes_and_their_ancestors() -> None:
    m = machines.load("server")
    pools = {p.name: p for p in build_pools(m, m.all_cpus, m.isolated, frozenset())}
    assert pools["NUMA node #0"].mems == {DRAM: frozenset({0}), PMEM: frozenset({4})}
    assert pools["NUMA node #2"].mems == {DRAM: frozenset({2}), PMEM: frozenset({5})}
    assert pools["socket #0"].mems == {DRAM: frozenset({0, 2}), PMEM: frozenset({4, 5})}
    assert pools["socket #1"].mems == {DRAM: frozenset({1, 3})}
    assert pools["root"].nodes == frozenset(range(6))
    assert pools["NUMA node #0"].isolated == frozenset({4, 60})


def test_children_partition_their_parent_and_depths_follow_parents() -> None:
    for name in ("server", "4-socket", "desktop"):
        m = machines.load(name)
        pools = build_pools(m, m.all_cpus, m.isolated, frozenset())
        for p in pools:
            if p.children:
                kids = [pools[c].cpus for c in p.children]
                assert frozenset().union(*kids) == p.cpus
                assert sum(len(k) for k in kids) == len(p.cpus)
            if p.parent is not None:
                assert pools[p.parent].depth == p.depth - 1
                assert p.index > p.parent


def test_single_socket_with_four_nodes_is_the_root() -> None:
    d = matrix([[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]])
    m = flat_machine({n: list(range(4 * n, 4 * n + 4)) for n in range(4)}, {}, d)
    pools = build_pools(m, m.all_cpus, frozenset(), frozenset())
    assert [p.name for p in pools] == [
        "socket #0",
        "NUMA node #0",
        "NUMA node #1",
        "NUMA node #2",
        "NUMA node #3",
    ]


def test_dozens_of_cpu_less_nodes_join_the_closest_cpu_node() -> None:
    # 34 nodes, 2 with CPUs (a GB200-like shape): 16 memory-only nodes near each CPU node.
    ids = list(range(34))
    rows = []
    for a in ids:
        row = []
        for b in ids:
            if a == b:
                row.append(10)
            elif a < 2 and b < 2:
                row.append(20)
            else:
                home_a = a if a < 2 else (a - 2) % 2
                home_b = b if b < 2 else (b - 2) % 2
                row.append(12 if home_a == home_b else 40)
        rows.append(row)
    tiers = {n: HBM for n in range(2, 34)}
    m = flat_machine({0: [0, 1], 1: [2, 3]}, {0: 0, 1: 1}, matrix(rows), tiers=tiers)
    pools = build_pools(m, m.all_cpus, frozenset(), frozenset())
    assert [p.name for p in pools] == ["root", "socket #0", "socket #1"]
    assert pools[1].mems[HBM] == frozenset(range(2, 34, 2))
    assert pools[2].mems[HBM] == frozenset(range(3, 34, 2))
    assert pools[0].nodes == frozenset(ids)
    hbm = {"memory-type.resource-policy.nri.io": "hbm"}  # 500m Guaranteed: shared CPUs
    d = Policy(m, Options(reserved_resources=CpuAmount(milli=0))).create(
        *pod_and_container(500, memory=1 << 30, annotations=hbm, cid="h")
    )
    assert d.pool in ("socket #0", "socket #1") and d.memory_tiers == {HBM}
    assert d.placement.mems is not None and len(d.placement.mems) == 16


def test_cpu_node_without_memory_borrows_the_closest_memory() -> None:
    m = machines.load("meminitiators")
    pools = build_pools(m, m.all_cpus, frozenset(), frozenset())
    for p in pools:
        assert p.mems, p.name
        assert DRAM in p.mems


def test_available_cpus_shrink_the_tree() -> None:
    m = machines.load("4-socket")
    keep = frozenset(c for c in m.cpus if m.cpus[c].package == 0)
    pools = Policy(m, Options(available_resources=CpuAmount(cpus=keep))).pools()
    assert [p.name for p in pools] == ["socket #0"]
    assert pools[0].cpus == keep


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        (CpuAmount(milli=4000), "quantity"),
        (CpuAmount(cpus=frozenset({100_000})), "no online CPU"),
    ],
)
def test_bad_available_resources_are_refused(amount: CpuAmount, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy(machines.load("desktop"), Options(available_resources=amount))
