"""Discovery edge cases on synthetic sysfs trees: missing files, bad data, isolcpus, tiers."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_topology.topology import cpuset
from nri_topology.topology.model import MemoryTier
from nri_topology.topology.sysfs import (
    ENV_SYSFS,
    TopologyError,
    _kernel_cpulist,
    default_sysfs_root,
    read_machine,
)
from tests.machines import MemoryOnlyNode, SyntheticSpec, synthetic, write_sysfs

NODE = "devices/system/node"
CPU = "devices/system/cpu"


def test_synthetic_shape(tmp_path: Path) -> None:
    m = synthetic(tmp_path, sockets=2, nodes=2, cores=3, threads=2)
    assert len(m.cpus) == 24 and len(m.cores) == 12 and m.threads_per_core == 2
    assert m.packages == (0, 1) and m.cpu_nodes == (0, 1, 2, 3)
    assert m.cpus[0].threads == {0, 12}
    assert m.cpus[0].l3 == m.nodes[0].cpus
    assert (m.distance(0, 1), m.distance(0, 2)) == (11, 21)
    assert not m.warnings


@pytest.mark.parametrize(
    ("rel", "needle"),
    [
        (f"{CPU}/cpu1/topology/physical_package_id", "physical_package_id: missing for CPUs 1"),
        (f"{CPU}/cpu2/topology/core_id", "core_id: missing for CPUs 2"),
        (f"{NODE}/node0/meminfo", "node0/meminfo: missing"),
        (f"{NODE}/node1/distance", "node1/distance: missing"),
        (f"{CPU}/online", f"{CPU}/online: missing"),
        (f"{CPU}/cpu3/topology/core_cpus_list", None),  # thread_siblings_list still there
    ],
)
def test_missing_file_warns_naming_it(tmp_path: Path, rel: str, needle: str | None) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(nodes=2, cores=2))
    (root / rel).unlink()
    m = read_machine(root)
    assert len(m.cpus) == 8
    if needle is None:
        assert not m.warnings
    else:
        assert any(needle in w for w in m.warnings), m.warnings


def test_missing_distance_row_is_taken_from_the_other_rows(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(sockets=2))
    (root / NODE / "node1/distance").unlink()
    m = read_machine(root)
    assert m.distance(1, 0) == 21 and m.distance(1, 1) == 10


def test_missing_thread_siblings_makes_single_thread_cores(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(threads=1, cores=2))
    for cpu in (0, 1):
        for name in ("core_cpus_list", "thread_siblings_list"):
            (root / CPU / f"cpu{cpu}/topology" / name).unlink()
    m = read_machine(root)
    assert m.cpus[0].threads == {0}
    assert any("thread_siblings_list: missing for CPUs 0-1" in w for w in m.warnings)


@pytest.mark.parametrize(
    ("rel", "text", "needle"),
    [
        (f"{NODE}/node1/cpulist", "0-3", "node1/cpulist: CPU 0 is already claimed by node 0"),
        (f"{NODE}/node0/distance", "10 11 21", "node0/distance: 3 entries for 2 nodes"),
        (f"{NODE}/node0/distance", "10 x", "node0/distance: not a list of integers"),
        (f"{CPU}/online", "0-a", f"{CPU}/online"),
        (f"{NODE}/node0/cpulist", "3-1", "node0/cpulist"),
        (f"{CPU}/cpu0/topology/core_id", "zero", "cpu0/topology/core_id: not an integer"),
        (f"{NODE}/node0/meminfo", "Node 0 MemFree: 1 kB", "node0/meminfo: no 'MemTotal"),
        (f"{CPU}/cpu0/topology/core_cpus_list", "0-", "cpu0/topology/core_cpus_list"),
    ],
)
def test_inconsistent_data_is_refused_naming_the_file(
    tmp_path: Path, rel: str, text: str, needle: str
) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(nodes=2, cores=2, threads=1))
    (root / rel).write_text(text + "\n")
    with pytest.raises(TopologyError, match=needle):
        read_machine(root)


def test_not_a_sysfs_root(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="not a directory"):
        read_machine(tmp_path)


def test_asymmetric_distances_are_averaged(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(sockets=2))
    (root / NODE / "node0/distance").write_text("10 21\n")
    (root / NODE / "node1/distance").write_text("26 10\n")
    m = read_machine(root)
    assert m.distance(0, 1) == m.distance(1, 0) == 23
    assert any("asymmetric" in w and "0->1=21/1->0=26" in w for w in m.warnings)


def test_no_node_directories_gives_one_node(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=2))
    shutil.rmtree(root / NODE)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal:        1024 kB\nMemFree:  12 kB\n")
    (proc / "cmdline").write_text("root=/dev/sda\n")
    m = read_machine(root, proc_root=proc)
    assert list(m.nodes) == [0] and m.nodes[0].cpus == m.all_cpus
    assert m.nodes[0].memory == 1024 * 1024 and m.distance(0, 0) == 10
    assert all(c.node == 0 for c in m.cpus.values())
    assert any("node*: none" in w for w in m.warnings)


def test_offline_cpus_are_excluded(tmp_path: Path) -> None:
    m = synthetic(tmp_path, cores=4, threads=2, offline="1,5")
    assert m.offline == {1, 5}
    assert 1 not in m.all_cpus and 5 not in m.all_cpus
    assert m.cpus[0].threads == {0, 4}
    assert m.nodes[0].cpus == {0, 2, 3, 4, 6, 7}


@pytest.mark.parametrize(
    ("cmdline", "isolated"),
    [
        ("root=/dev/sda isolcpus=2-3 quiet", "2-3"),
        ("isolcpus=domain,managed_irq,4-7", "4-7"),
        ("isolcpus=managed_irq,domain,1,3", "1,3"),
        ("isolcpus=nohz,1-2", ""),  # tick isolation only: still scheduled
        ("isolcpus=managed_irq,6", ""),
        ("isolcpus=0-7:2/4", "0-1,4-5"),
        ("isolcpus=1 isolcpus=6", "1,6"),
        ("isolcpus=12-15", ""),  # not online here
        ("noisolcpus=1", ""),
    ],
)
def test_isolcpus_from_cmdline(tmp_path: Path, cmdline: str, isolated: str) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4, threads=2))
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cmdline").write_text(cmdline + "\n")
    assert read_machine(root, proc_root=proc).isolated == cpuset.parse(isolated)


def test_isolated_file_and_cmdline_are_merged(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4, threads=2, isolated="0"))
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cmdline").write_text("isolcpus=7\n")
    assert read_machine(root, proc_root=proc).isolated == {0, 7}
    assert read_machine(root).isolated == {0}


@pytest.mark.parametrize("bad", ["isolcpus=1-x", "isolcpus=0-7:3/2", "isolcpus=domain,"])
def test_bad_isolcpus_is_refused(tmp_path: Path, bad: str) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4))
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cmdline").write_text(bad + "\n")
    if bad.endswith(","):
        assert read_machine(root, proc_root=proc).isolated == frozenset()
        return
    with pytest.raises(TopologyError, match="cmdline: isolcpus"):
        read_machine(root, proc_root=proc)


GiB = 1 << 30


@pytest.mark.parametrize(
    ("bandwidth", "latency", "tier"),
    [
        (5000, 90, MemoryTier.HBM),  # 5x bandwidth
        (3000, 200, MemoryTier.PMEM),  # latency doubled outweighs bandwidth
        (400, 100, MemoryTier.PMEM),  # under half the bandwidth
        (900, 110, MemoryTier.DRAM),  # comparable: e.g. a CPU-less DRAM node
        (None, None, MemoryTier.PMEM),  # no HMAT: large node falls to the heuristic
    ],
)
def test_hmat_classification(
    tmp_path: Path, bandwidth: int | None, latency: int | None, tier: MemoryTier
) -> None:
    spec = SyntheticSpec(
        memory=4 * GiB,
        dram_bandwidth=1000,
        dram_latency=100,
        memory_only=(MemoryOnlyNode(8 * GiB, near=0, bandwidth=bandwidth, latency=latency),),
    )
    node = synthetic(tmp_path, spec).nodes[1]
    assert node.tier == tier
    assert node.tier_source == ("hmat" if bandwidth else "heuristic")


def test_hmat_reference_is_the_median_without_initiator_memory(tmp_path: Path) -> None:
    spec = SyntheticSpec(
        sockets=2,
        memory_only=(
            MemoryOnlyNode(8 * GiB, near=0, bandwidth=1000, latency=100),
            MemoryOnlyNode(8 * GiB, near=1, bandwidth=1000, latency=100),
            MemoryOnlyNode(64 * GiB, near=0, bandwidth=600, latency=300),
        ),
    )
    m = synthetic(tmp_path, spec)
    assert [m.nodes[n].tier for n in (2, 3, 4)] == [
        MemoryTier.DRAM,
        MemoryTier.DRAM,
        MemoryTier.PMEM,
    ]


@pytest.mark.parametrize(
    ("memory", "tier"), [(1 * GiB, MemoryTier.HBM), (4 * GiB, MemoryTier.PMEM)]
)
def test_size_heuristic(tmp_path: Path, memory: int, tier: MemoryTier) -> None:
    spec = SyntheticSpec(memory=4 * GiB, memory_only=(MemoryOnlyNode(memory, near=0),))
    node = synthetic(tmp_path, spec).nodes[1]
    assert (node.tier, node.tier_source) == (tier, "heuristic")


def test_heuristic_without_dram_on_cpu_nodes(tmp_path: Path) -> None:
    spec = SyntheticSpec(
        memory=0,
        memory_only=(
            MemoryOnlyNode(96 * GiB, near=0, distance=11),
            MemoryOnlyNode(768 * GiB, near=0, distance=17),
            MemoryOnlyNode(16 * GiB, near=0, distance=17),
        ),
    )
    m = synthetic(tmp_path, spec)
    assert [m.nodes[n].tier for n in (1, 2, 3)] == [
        MemoryTier.DRAM,
        MemoryTier.PMEM,
        MemoryTier.HBM,
    ]


def test_memory_side_cache_marks_far_memory(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(memory_only=(MemoryOnlyNode(1 * GiB, near=0),)))
    (root / NODE / "node1/memory_side_cache/index1").mkdir(parents=True)
    node = read_machine(root).nodes[1]
    assert (node.tier, node.tier_source) == (MemoryTier.PMEM, "hmat")


@pytest.mark.parametrize(
    ("device_path", "tier"),
    [
        ("devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0", "cxl"),
        ("devices/LNXSYSTM:00/ACPI0012:00/ndbus0/region1/dax1.1/dax1.0", "pmem"),
        ("devices/platform/hmem.0/dax0.0", "hbm"),  # no hint: size heuristic decides
    ],
)
def test_dax_device_hints(tmp_path: Path, device_path: str, tier: str) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(memory_only=(MemoryOnlyNode(1 * GiB, near=0),)))
    device = root / device_path
    device.mkdir(parents=True)
    (device / "target_node").write_text("1\n")
    (root / "bus/dax/devices").mkdir(parents=True)
    (root / "bus/dax/devices" / device.name).symlink_to(device)
    node = read_machine(root).nodes[1]
    assert node.tier == MemoryTier(tier)
    assert node.tier_source == ("heuristic" if tier == "hbm" else "kernel")


def test_tier_overrides(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(memory_only=(MemoryOnlyNode(8 << 30, near=0),)))
    m = read_machine(root, tier_overrides={1: MemoryTier.CXL, 9: MemoryTier.HBM})
    assert (m.nodes[1].tier, m.nodes[1].tier_source) == (MemoryTier.CXL, "config")
    assert any("node 9: no such node" in w for w in m.warnings)
    with pytest.raises(TopologyError, match="unknown tier 'nvm' \\(one of dram, pmem, hbm, cxl\\)"):
        read_machine(root, tier_overrides={1: "nvm"})  # type: ignore[dict-item]


def test_dozens_of_cpu_less_nodes(tmp_path: Path) -> None:
    mem = tuple(MemoryOnlyNode(GiB * (1 + i % 7), near=i % 2) for i in range(60))
    m = synthetic(tmp_path, SyntheticSpec(sockets=2, memory=4 * GiB, memory_only=mem))
    assert len(m.nodes) == 62 and len(m.memory_only_nodes) == 60
    assert {m.nodes[n].tier for n in m.memory_only_nodes} == {MemoryTier.HBM, MemoryTier.PMEM}


def test_hugepages_per_node(tmp_path: Path) -> None:
    m = synthetic(tmp_path, hugepages={2048: 16, 1048576: 1})
    assert m.nodes[0].hugepages == {2048: 16, 1048576: 1}


def test_default_sysfs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SYSFS, raising=False)
    assert default_sysfs_root() == Path("/sys")
    monkeypatch.setenv(ENV_SYSFS, "/tmp/elsewhere")
    assert default_sysfs_root() == Path("/tmp/elsewhere")


specs = st.builds(
    SyntheticSpec,
    sockets=st.integers(1, 3),
    dies=st.integers(1, 2),
    nodes=st.integers(1, 2),
    cores=st.integers(1, 3),
    threads=st.integers(1, 2),
    l3=st.sampled_from(["node", "die", "socket"]),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_regular_machines_round_trip(spec: SyntheticSpec) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        m = read_machine(write_sysfs(Path(tmp), spec))
    assert len(m.cpus) == spec.cpu_count
    assert len(m.cores) == spec.cpu_count // spec.threads
    assert m.threads_per_core == spec.threads
    assert len(m.packages) == spec.sockets
    assert len({(c.package, c.die) for c in m.cpus.values()}) == spec.sockets * spec.dies
    assert len(m.nodes) == spec.sockets * spec.dies * spec.nodes
    per_socket = {"node": spec.dies * spec.nodes, "die": spec.dies, "socket": 1}[spec.l3]
    assert len({c.l3 for c in m.cpus.values()}) == spec.sockets * per_socket
    assert not m.warnings


@given(
    st.integers(0, 200),
    st.integers(0, 200),
    st.integers(1, 16).flatmap(lambda g: st.tuples(st.integers(1, g), st.just(g))),
)
def test_isolcpus_stride_selects_used_of_each_group(
    first: int, length: int, stride: tuple[int, int]
) -> None:
    used, group = stride
    want = {c for c in range(first, first + length + 1) if (c - first) % group < used}
    assert _kernel_cpulist(f"{first}-{first + length}:{used}/{group},999") == want | {999}


def test_nul_padding_and_cpumap_fallback(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(sockets=2, cores=2, threads=1))
    (root / NODE / "node0/distance").write_bytes(b"10 21\n\0\0\0")
    (root / NODE / "node1/cpulist").unlink()
    (root / NODE / "node1/cpumap").write_text("00000000,0000000c\n")
    m = read_machine(root)
    assert m.distance(0, 1) == 21
    assert m.nodes[1].cpus == {2, 3} and m.cpus[3].node == 1
    assert not m.warnings


def test_node_without_cpulist_or_cpumap_warns(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(sockets=2, cores=1, threads=1))
    (root / NODE / "node1/cpulist").unlink()
    m = read_machine(root)
    assert m.nodes[1].cpus == frozenset() and m.cpus[1].node == -1
    assert any("node1/cpulist: missing (and no cpumap)" in w for w in m.warnings)
    assert any("no online node lists CPUs 1" in w for w in m.warnings)


@pytest.mark.parametrize(
    ("core_ids", "siblings", "cores"),
    [
        # core ids repeat per node inside a package (old AMD kernels)
        ((0, 1, 0, 1), ("0", "1", "2", "3"), [{0}, {1}, {2}, {3}]),
        # compute-unit pairs reported as thread siblings with distinct core ids
        ((0, 1, 2, 3), ("0-1", "0-1", "2-3", "2-3"), [{0, 1}, {2, 3}]),
        # sibling lists that disagree: their closure is the core
        ((0, 0, 1, 1), ("0-1", "1", "2", "2-3"), [{0, 1}, {2, 3}]),
    ],
)
def test_core_ids_reconciled_with_siblings(
    tmp_path: Path, core_ids: tuple[int, ...], siblings: tuple[str, ...], cores: list[set[int]]
) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4, threads=1))
    for cpu, (core, sib) in enumerate(zip(core_ids, siblings, strict=True)):
        top = root / CPU / f"cpu{cpu}/topology"
        (top / "core_id").write_text(f"{core}\n")
        (top / "core_cpus_list").write_text(f"{sib}\n")
    m = read_machine(root)
    assert [set(c) for c in m.cores] == cores
    assert all(m.cpus[t].core_key == c.core_key for c in m.cpus.values() for t in c.threads)
    assert any("core_id: does not match" in w for w in m.warnings)


@pytest.mark.parametrize(
    ("tiers", "want"),
    [
        ({4: "0,2-3", 5: "1"}, {1: MemoryTier.PMEM, 2: MemoryTier.DRAM, 3: MemoryTier.DRAM}),
        ({3: "1", 4: "0", 6: "2-3"}, {1: MemoryTier.HBM, 2: MemoryTier.PMEM, 3: MemoryTier.PMEM}),
    ],
)
def test_kernel_memory_tiers(
    tmp_path: Path, tiers: dict[int, str], want: dict[int, MemoryTier]
) -> None:
    # three 1 GiB CPU-less nodes: the size heuristic alone would call every one HBM
    mem = tuple(MemoryOnlyNode(GiB, near=0) for _ in range(3))
    root = write_sysfs(tmp_path, SyntheticSpec(memory=4 * GiB, memory_only=mem))
    for tier, nodes in tiers.items():
        d = root / f"devices/virtual/memory_tiering/memory_tier{tier}"
        d.mkdir(parents=True)
        (d / "nodelist").write_text(nodes + "\n")
    m = read_machine(root)
    assert {n: m.nodes[n].tier for n in want} == want
    assert {m.nodes[n].tier_source for n in want} == {"kernel"}
    assert m.nodes[0].tier_source == "cpu"
