"""The CPU allocator and node-set choice on real machines (the shared sysfs dumps)."""

from __future__ import annotations

import pytest

pytest.importorskip("nri_topology.topology.sysfs")

from machines import load

from nri_topology.policy.allocator.cpuallocator import take_cpus, take_distributed
from nri_topology.policy.allocator.numasets import best_node_set
from nri_topology.topology.cpuset import parse
from nri_topology.topology.model import Machine


def clusters(m: Machine, cpus: frozenset[int]) -> set[tuple[int, int, int]]:
    return {(m.cpus[c].package, m.cpus[c].die, m.cpus[c].cluster) for c in cpus}


@pytest.mark.parametrize(
    ("count", "expected", "n_clusters"),
    [
        (2, "1-2", 1),  # fills the cluster CPU 0 already broke
        (4, "4-7", 1),  # a whole idle cluster rather than 3 + 1
        (6, "1-2,4-7", 2),
        (8, "4-11", 2),
    ],
)
def test_arm_clusters_kept_together(count: int, expected: str, n_clusters: int) -> None:
    """Kunpeng 920: 4-core clusters without SMT; CPU 0 is busy."""
    m = load("arm128")
    got = take_cpus(m, m.all_cpus - {0}, count)
    assert got == parse(expected)
    assert len(clusters(m, got)) == n_clusters


def test_arm_socket_first_levels() -> None:
    """2 packages and 4 NUMA nodes: a node's worth stays in one node."""
    m = load("arm128")
    got = take_cpus(m, m.all_cpus - parse("0-3"), 32)
    assert {m.cpus[c].node for c in got} == {1}


def test_server_snc_interleaved_numbering() -> None:
    """SNC-2 with round-robin CPU ids: 8 CPUs = 4 whole cores of node 0."""
    m = load("server")
    got = take_cpus(m, m.all_cpus, 8)
    assert got == parse("0,4,8,12,56,60,64,68")
    assert all(core <= got or not core & got for core in m.cores)


def test_server_distributed_stays_on_one_socket() -> None:
    """40 CPUs need two of the 28-CPU nodes; the nodes of socket 0 (0 and 2) are used."""
    m = load("server")
    got = take_distributed(m, m.all_cpus, 40)
    assert {m.cpus[c].node for c in got} == {0, 2}
    assert len(got & m.nodes[0].cpus) == len(got & m.nodes[2].cpus) == 20


def test_server_closest_pair_is_same_socket() -> None:
    m = load("server")
    free = {n: len(m.nodes[n].cpus) for n in m.cpu_nodes}
    assert best_node_set(m, free, 40) == (0, 2)
    free[0] = 0
    assert best_node_set(m, free, 40) == (1, 3)


def test_amd_nodes_prefer_near_neighbours() -> None:
    """Opteron 6276, distances 10/16/22: node 0 needs a neighbour at 16, not 22."""
    m = load("amd64-8node")
    free = {n: 8 for n in m.cpu_nodes}
    got = best_node_set(m, free, 12)
    assert got == (0, 1)
    assert m.distance(0, 1) == 16


def test_sparse_node_ids_distributed() -> None:
    m = load("sparse")
    got = take_distributed(m, m.all_cpus, 24)
    assert {m.cpus[c].node for c in got} == {0, 1, 2, 33}
    assert all(len(got & m.nodes[n].cpus) == 6 for n in (0, 1, 2, 33))


def test_four_socket_whole_node() -> None:
    m = load("4-socket")
    got = take_cpus(m, m.all_cpus - {0}, 36)
    assert {m.cpus[c].node for c in got} == {1}
