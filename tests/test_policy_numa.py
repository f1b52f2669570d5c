"""NUMA node choice through the policy: KEP-3545 closest nodes and KEP-2902 distribution."""

from __future__ import annotations

import pytest

from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.topology import cpuset
from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode
from tests.test_policy_restore import holding, workload

NO_RESERVE = CpuAmount(milli=0)


def build_machine(
    node_cpus: dict[int, list[int]],
    package: dict[int, int],
    rows: list[list[int]],
    core_of: dict[int, int] | None = None,
) -> Machine:
    """CPUs grouped into cores by `core_of` (default: one CPU per core), one L3 per package."""
    core_of = core_of or {c: c for cs in node_cpus.values() for c in cs}
    node_of = {c: n for n, cs in node_cpus.items() for c in cs}
    threads: dict[int, set[int]] = {}
    for c, core in core_of.items():
        threads.setdefault(core, set()).add(c)
    by_pkg: dict[int, set[int]] = {}
    for c, n in node_of.items():
        by_pkg.setdefault(package[n], set()).add(c)
    cpus = {
        c: Cpu(
            id=c,
            package=package[node_of[c]],
            die=0,
            cluster=core_of[c],
            core=core_of[c],
            node=node_of[c],
            threads=frozenset(threads[core_of[c]]),
            l2=frozenset(threads[core_of[c]]),
            l3=frozenset(by_pkg[package[node_of[c]]]),
        )
        for c in node_of
    }
    ids = sorted(node_cpus)
    nodes = {
        n: NumaNode(
            id=n,
            cpus=frozenset(node_cpus[n]),
            memory=16 << 30,
            tier=MemoryTier.DRAM,
            tier_source="config",
            distances={m: rows[i][j] for j, m in enumerate(ids)},
        )
        for i, n in enumerate(ids)
    }
    return Machine(cpus=cpus, nodes=nodes)


# --- KEP-3545 prefer-closest-numa-nodes ---------------------------------------------------------


def four_nodes() -> Machine:
    rows = [[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]]
    return build_machine(
        {n: list(range(4 * n, 4 * n + 4)) for n in range(4)}, dict.fromkeys(range(4), 0), rows
    )


def eight_nodes() -> Machine:
    near = [[10, 16, 19, 16], [16, 10, 16, 19], [19, 16, 10, 16], [16, 19, 16, 10]]
    rows = [[*near[i % 4], *([50] * 4)] if i < 4 else [*([50] * 4), *near[i % 4]] for i in range(8)]
    return build_machine(
        {n: [2 * n, 2 * n + 1] for n in range(8)}, dict.fromkeys(range(8), 0), rows
    )


def nodes_of(m: Machine, cpus: frozenset[int]) -> set[int]:
    return {m.cpus[c].node for c in cpus}


def test_kep3545_four_nodes_prefers_the_closest_pair_over_lower_ids() -> None:
    m = four_nodes()
    policy = Policy(m, Options(reserved_resources=NO_RESERVE))
    first = policy.create(*workload(1, "g", 3000))
    assert nodes_of(m, first.exclusive) == {0}
    d = policy.create(*workload(2, "g", 6000))
    # {0,1} lacks room; {1,2} has lower ids but average distance 15.5; {2,3} has 10.5
    assert nodes_of(m, d.exclusive) == {2, 3}
    assert d.placement.mems == {2, 3}


def test_kep3545_eight_nodes_fewest_then_closest() -> None:
    m = eight_nodes()
    policy = holding(m, Options(reserved_resources=NO_RESERVE), m.nodes[0].cpus, m.nodes[2].cpus)
    d = policy.create(*workload(1, "g", 4000))
    # two nodes are needed; {1,3} would be the lowest ids (average 14.5), {4,5} is closer (13)
    assert nodes_of(m, d.exclusive) == {4, 5}
    wide = policy.create(*workload(2, "g", 6000))
    assert len(nodes_of(m, wide.exclusive)) == 3


def test_without_closest_numa_any_covering_cpus_do() -> None:
    m = four_nodes()
    policy = Policy(m, Options(reserved_resources=NO_RESERVE, prefer_closest_numa=False))
    policy.create(*workload(1, "g", 3000))
    d = policy.create(*workload(2, "g", 6000))
    assert len(d.exclusive) == 6 and 0 not in d.exclusive


# --- KEP-2902 distribute-cpus-across-numa (kubelet reference section 6.3) ------------------------


def dual_socket_snc() -> Machine:
    """topoDualSocketMultiNumaPerSocketHT: node k = 10k..10k+9 and 40+10k..; core = cpu mod 40."""
    rows = [[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]]
    node_cpus = {
        n: [*range(10 * n, 10 * n + 10), *range(40 + 10 * n, 50 + 10 * n)] for n in range(4)
    }
    return build_machine(node_cpus, {0: 0, 1: 0, 2: 1, 3: 1}, rows, {c: c % 40 for c in range(80)})


@pytest.mark.parametrize(
    ("taken", "count", "group", "expected"),
    [
        ("", 64, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
        ("", 48, 1, "0-7,10-17,20-27,40-47,50-57,60-67"),
        ("0,30-31,40,70-71", 48, 1, "1-8,10-17,20-27,41-48,50-57,60-67"),
        ("0-1,30,40-41,70", 48, 1, "10-17,20-27,31-38,50-57,60-67,71-78"),
        ("", 26, 1, "0-6,10-16,40-45,50-55"),
        ("", 26, 2, "0-6,10-15,40-46,50-55"),
    ],
)
def test_kubelet_distributed_cases(taken: str, count: int, group: int, expected: str) -> None:
    m = dual_socket_snc()
    opts = Options(
        reserved_resources=NO_RESERVE, distribute_across_numa=True, distribute_min_group=group
    )
    policy = holding(m, opts, cpuset.parse(taken)) if taken else Policy(m, opts)
    d = policy.create(*workload(1, "g", 1000 * count))
    assert cpuset.format(d.exclusive) == expected
