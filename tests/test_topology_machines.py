"""Every real machine: its committed description is what the topology reader makes of its sysfs
dump (the one test per dump that reads sysfs), and it has the machine's known shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier
from nri_topology.topology.sysfs import read_machine
from tests.machines import (
    ALL_MACHINES,
    describe,
    load,
    machine_file,
    read_dump,
    write_machine_sysfs,
)

PMEM, HBM, DRAM = MemoryTier.PMEM, MemoryTier.HBM, MemoryTier.DRAM


@dataclass(frozen=True)
class Shape:
    cpus: int
    cores: int
    threads_per_core: int
    packages: tuple[int, ...]
    dies: int  # distinct (package, die) pairs
    nodes: tuple[int, ...]
    cpu_nodes: tuple[int, ...]
    memory_only: dict[int, tuple[MemoryTier, str]] = field(default_factory=dict)
    l3_groups: int = 0
    isolated: str = ""
    offline: str = ""
    clusters: int | None = None  # distinct (package, die, cluster) when the kernel reports them


SHAPES: dict[str, Shape] = {
    "server": Shape(
        112, 56, 2, (0, 1), 2, (0, 1, 2, 3, 4, 5), (0, 1, 2, 3),
        {4: (PMEM, "heuristic"), 5: (PMEM, "heuristic")}, l3_groups=2, isolated="4-7,60-63",
    ),
    "4-socket": Shape(144, 72, 2, (0, 1, 2, 3), 4, (0, 1, 2, 3), (0, 1, 2, 3), l3_groups=4),
    "desktop": Shape(20, 10, 2, (0,), 1, (0,), (0,), l3_groups=1),
    "2s4n40c": Shape(80, 40, 2, (0, 1), 2, (0, 1, 2, 3), (0, 1, 2, 3), l3_groups=2),
    "memorysidecaches": Shape(80, 40, 2, (0, 1), 2, (0, 1, 2, 3), (0, 1, 2, 3), l3_groups=2),
    "amd64-8node": Shape(
        64, 32, 2, (0, 1, 2, 3), 4, tuple(range(8)), tuple(range(8)), l3_groups=8
    ),
    "sparse": Shape(
        48, 48, 1, (0, 1, 2, 3), 4, (0, 1, 2, 33, 34, 45, 72, 73),
        (0, 1, 2, 33, 34, 45, 72, 73), l3_groups=8,
    ),
    "heteromem": Shape(
        6, 6, 1, (0,), 1, (0, 1, 2, 4, 6, 8, 9), (0, 1, 2),
        {4: (HBM, "hmat"), 6: (PMEM, "kernel"), 8: (PMEM, "kernel"), 9: (PMEM, "kernel")},
        l3_groups=1,
    ),
    "meminitiators": Shape(
        8, 8, 1, (0, 1), 2, tuple(range(11)), (0, 1, 2, 3),
        {
            5: (DRAM, "hmat"), 6: (DRAM, "hmat"), 7: (PMEM, "kernel"),
            8: (DRAM, "hmat"), 9: (DRAM, "hmat"), 10: (PMEM, "kernel"),
        },
        l3_groups=2,
    ),
    "arm128": Shape(
        128, 128, 1, (36, 8442), 2, (0, 1, 2, 3), (0, 1, 2, 3), l3_groups=4, clusters=32
    ),
    "power9-gpu": Shape(
        32, 8, 4, (0, 8), 2, (0, 8, 250, 251, 252, 253, 254, 255), (0, 8),
        {n: (HBM, "heuristic") for n in range(250, 256)}, l3_groups=2,
    ),
    "cpuid1f": Shape(64, 32, 2, (0, 1, 2, 3), 8, tuple(range(16)), tuple(range(16)), l3_groups=8),
    "amd16": Shape(16, 16, 1, tuple(range(8)), 8, tuple(range(8)), tuple(range(8)), l3_groups=8),
    "offline-cpu0": Shape(17, 17, 1, (0, 1), 2, (1,), (1,), l3_groups=2, offline="0-3,21-23"),
}  # fmt: skip


@pytest.mark.parametrize("name", ALL_MACHINES)
def test_committed_description_is_what_the_reader_makes_of_the_dump(name: str) -> None:
    """Regenerate with `python -m tests.machines` when the reader or the format changes."""
    dump = read_dump(name)
    assert machine_file(name).is_file(), f"no {machine_file(name)}: run python -m tests.machines"
    assert load(name) == dump
    assert describe(name, dump) == machine_file(name).read_text()


def test_every_shared_machine_has_a_shape() -> None:
    assert set(SHAPES) == set(ALL_MACHINES)


@pytest.mark.parametrize("name", ALL_MACHINES)
def test_shape(name: str) -> None:
    m, want = load(name), SHAPES[name]
    assert len(m.cpus) == want.cpus
    assert len(m.cores) == want.cores
    assert m.threads_per_core == want.threads_per_core
    assert m.packages == want.packages
    assert len({(c.package, c.die) for c in m.cpus.values()}) == want.dies
    assert tuple(sorted(m.nodes)) == want.nodes
    assert m.cpu_nodes == want.cpu_nodes
    got_memory_only = {n: (m.nodes[n].tier, m.nodes[n].tier_source) for n in m.memory_only_nodes}
    assert got_memory_only == want.memory_only
    assert len({c.l3 for c in m.cpus.values()}) == want.l3_groups
    assert m.isolated == cpuset.parse(want.isolated)
    assert m.offline == cpuset.parse(want.offline)
    if want.clusters is not None:
        assert len({(c.package, c.die, c.cluster) for c in m.cpus.values()}) == want.clusters


@pytest.mark.parametrize("name", ALL_MACHINES)
def test_invariants(name: str) -> None:
    """What the policy relies on, on every real machine."""
    m = load(name)
    assert not m.offline & m.all_cpus
    for cpu in m.cpus.values():
        assert cpu.id in cpu.threads <= m.all_cpus
        assert cpu.id in cpu.l2 and cpu.id in cpu.l3
        assert cpu.node == -1 or cpu.id in m.nodes[cpu.node].cpus
        assert all(m.cpus[t].core_key == cpu.core_key for t in cpu.threads)
    assert sorted(c for core in m.cores for c in core) == sorted(m.cpus)
    claimed = [c for n in m.nodes.values() for c in n.cpus]
    assert len(claimed) == len(set(claimed))
    for a in m.nodes:
        assert m.distance(a, a) == 10
        for b in m.nodes:
            assert m.distance(a, b) == m.distance(b, a)
    for n in m.nodes.values():
        if n.cpus:
            assert (n.tier, n.tier_source) == (MemoryTier.DRAM, "cpu")


def _node_cpus(m: Machine, node: int) -> str:
    return cpuset.format(m.nodes[node].cpus)


def test_server_details() -> None:
    m = load("server")
    assert _node_cpus(m, 0) == cpuset.format(range(0, 112, 4))
    assert (m.distance(0, 2), m.distance(0, 1), m.distance(0, 4), m.distance(1, 4)) == (
        11, 21, 17, 28,
    )  # fmt: skip
    assert m.nodes[4].memory == 130023424 * 1024
    assert m.nodes[0].memory == 32372996 * 1024
    assert m.nodes[0].hugepages == {2048: 0, 1048576: 0}
    assert m.cpus[0].threads == {0, 56}
    assert m.cpus[0].l3 == frozenset(range(0, 112, 2))
    assert not m.warnings


def test_2s4n40c_irregular_nodes_and_hugepages() -> None:
    m = load("2s4n40c")
    assert _node_cpus(m, 0) == "0-2,5-6,10-12,15-16,40-42,45-46,50-52,55-56"
    assert m.nodes[0].hugepages == {2048: 2560, 1048576: 0}
    assert m.distance(0, 1) == 11 and m.distance(0, 2) == 21


def test_arm128_clusters_and_odd_packages() -> None:
    m = load("arm128")
    cpu = m.cpus[5]
    assert (cpu.package, cpu.die, cpu.cluster, cpu.core) == (36, 0, 654, 5)
    assert {c.id for c in m.cpus.values() if c.cluster == cpu.cluster} == {4, 5, 6, 7}
    assert cpu.l3 == frozenset(range(32))
    assert {c.package for c in m.cpus.values() if c.id >= 64} == {8442}
    assert [m.distance(0, n) for n in range(4)] == [10, 16, 32, 33]


def test_sparse_node_ids_and_distances() -> None:
    m = load("sparse")
    assert _node_cpus(m, 72) == "36-41"
    assert m.distance(0, 33) == 22 and m.distance(0, 34) == 16
    assert "core_id" in " ".join(m.warnings)  # core ids repeat per node within a package


def test_amd64_three_distance_values() -> None:
    m = load("amd64-8node")
    assert {m.distance(a, b) for a in m.nodes for b in m.nodes} == {10, 16, 22}


def test_power9_trimmed_cpus_and_gpu_nodes() -> None:
    m = load("power9-gpu")
    assert cpuset.format(m.cpus) == "0-15,88-103"
    assert _node_cpus(m, 0) == "0-15"  # node lists 0-87, only 0-15 are online
    assert m.nodes[250].memory == 15728640 * 1024
    assert m.distance(0, 250) == 80


def test_offline_cpu0_and_missing_node0() -> None:
    m = load("offline-cpu0")
    assert 0 not in m.cpus
    assert m.nodes[1].distances == {1: 10}  # the row spans node/possible (0-1)
    assert {c for c, cpu in m.cpus.items() if cpu.node == -1} == set(range(4, 21, 2))
    assert any("4,6,8,10,12,14,16,18,20" in w for w in m.warnings)


def test_meminitiators_cpu_nodes_without_memory() -> None:
    m = load("meminitiators")
    assert [m.nodes[n].memory for n in (0, 1, 2, 3)] == [0, 0, 0, 0]
    assert _node_cpus(m, 1) == "2-3"  # from cpumap: this dump has no cpulist
    assert m.nodes[4].memory == 0 and not m.nodes[4].cpus  # generic initiator
    assert len(m.nodes) == 11


def test_cpuid1f_dies() -> None:
    m = load("cpuid1f")
    assert {(c.package, c.die) for c in m.cpus.values() if c.package == 0} == {(0, 0), (0, 1)}
    assert m.cpus[8].die == 1


@pytest.mark.parametrize("name", ["server", "2s4n40c", "amd64-8node", "power9-gpu", "offline-cpu0"])
def test_a_machine_written_as_sysfs_reads_back_the_same(name: str, tmp_path: Path) -> None:
    """The tree the benchmarks run the daemon on: isolated, offline, hybrid, caches, tiers."""
    m = load(name)
    back = read_machine(write_machine_sysfs(tmp_path, m))
    assert back.cpus == m.cpus
    assert (back.isolated, back.offline) == (m.isolated, m.offline)
    for n in m.nodes.values():
        got = back.nodes[n.id]
        assert (got.cpus, got.memory, got.distances, got.hugepages) == (
            n.cpus, n.memory, n.distances, n.hugepages,
        )  # fmt: skip
        if n.cpus:
            assert (got.tier, got.tier_source) == (n.tier, n.tier_source)
