"""Test machines by short name, from committed machine files, plus synthetic sysfs trees.

`load("server")` gives the `Machine` of a real host from its committed machine description
(`nri_topology/data/machines/` for the simulator's bundled ones, `tests/data/machines/` for the
rest), so no test needs the sysfs dumps to run. The descriptions are converted from the dumps
in ../shared/topologies (see `main` below); `read_dump(name)` reads a dump with the topology
reader itself and `roots(name)` gives its sysfs and proc roots, for the tests of sysfs parsing
(they skip with the reason when ../shared is not beside the repository). Dumps are extracted
once per session into a scratch directory removed at exit. `write_sysfs(tmp_path,
SyntheticSpec(...))` writes a small, regular sysfs tree for edge cases and benchmarks;
`synthetic(...)` writes one and reads it back; `write_machine_sysfs` writes the tree of any
machine, e.g. a committed one for running the daemon on it.

Regenerate the committed descriptions after a change to the topology reader or the format:

    .venv/bin/python -m tests.machines            # rewrites tests/data/machines/*.json
    .venv/bin/python -m tests.machines --check    # exit 1 if any file differs
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nri_topology.simulate import bundle, machine_spec
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

# Tests import this module as `machines` (pytest puts tests/ on the path) and as `tests.machines`;
# one module object under both names keeps a single extraction cache per session.
sys.modules.setdefault("machines", sys.modules[__name__])
sys.modules.setdefault("tests.machines", sys.modules[__name__])

# shared/ is a sibling of the repository folder (CI clones the repo with shared/ beside it).
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
TOPOLOGIES = SHARED / "topologies"
NO_DUMPS = "needs the sysfs dumps in ../shared/topologies (not beside this checkout)"
# Test-only machine descriptions; the simulator's bundled ones live in the package.
DATA = Path(__file__).resolve().parent / "data" / "machines"

# short name -> (archive in ../shared/topologies, directory inside it holding sys/ and maybe proc/)
MACHINES: dict[str, tuple[str, str]] = {
    "server": ("nri-plugins-policy-sysfs.tar.bz2", "sysfs/server"),
    "4-socket": ("nri-plugins-policy-sysfs.tar.bz2", "sysfs/4-socket-server-nosnc"),
    "desktop": ("nri-plugins-policy-sysfs.tar.bz2", "sysfs/desktop"),
    "2s4n40c": ("nri-plugins-cpuallocator-sysfs.tar.bz2", "sysfs/2-socket-4-node-40-core"),
    "memorysidecaches": ("hwloc-memorysidecaches.tar.bz2", "memorysidecaches"),
    "amd64-8node": ("hwloc-64amd64-4s2n4ca2co.tar.bz2", "64amd64-4s2n4ca2co"),
    "sparse": ("hwloc-48amd64-4pa2n6c-sparse.tar.bz2", "48amd64-4d2n6c-sparse"),
    "heteromem": ("hwloc-fakeheteromemtiers.tar.bz2", "fakeheteromemtiers"),
    "meminitiators": (
        "hwloc-fakememinitiators-1np2c+1npp+gi.tar.bz2",
        "fakememinitiators-1np2c+1npp+gi",
    ),
    "arm128": ("hwloc-128arm-2pa2n8cluster4co.tar.bz2", "128arm-2pa2n8cluster4co"),
    "power9-gpu": ("hwloc-nvidiagpunumanodes.tar.bz2", "nvidiagpunumanodes"),
    "cpuid1f": (
        "hwloc-fakecpuid1f-64intel64-2p4d2n2c2t.tar.bz2",
        "fakecpuid1f-64intel64-2p4d2n2c2t",
    ),
    "amd16": ("hwloc-16amd64-8n2c.tar.bz2", "16amd64-8n2c"),
    "offline-cpu0": ("hwloc-offline-cpu0-node0.tar.bz2", "offline-cpu0-node0"),
}
ALL_MACHINES: tuple[str, ...] = tuple(MACHINES)
BUNDLED: dict[str, bundle.Source] = {s.name: s for s in bundle.SOURCES}

_extracted: dict[str, Path] = {}
_workdir: Path | None = None


def have_dumps() -> bool:
    return TOPOLOGIES.is_dir()


needs_dumps = pytest.mark.skipif(not have_dumps(), reason=NO_DUMPS)


def _archive(name: str) -> Path:
    """An archive of ../shared/topologies; skips the calling test when it is not there."""
    archive = TOPOLOGIES / name
    if not archive.is_file():
        pytest.skip(f"{NO_DUMPS}: no {name}")
    return archive


def _scratch() -> Path:
    """The session's extraction directory, on a tmpfs when the host has one.

    A dump is tens of thousands of small files; a memory file system writes and deletes them
    far faster than a disk, which matters at every test run.
    """
    global _workdir
    if _workdir is None:
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        _workdir = Path(tempfile.mkdtemp(prefix="nri-topology-machines-", dir=base))
        atexit.register(_cleanup)
    return _workdir


def _cleanup() -> None:
    if _workdir is not None:
        shutil.rmtree(_workdir, ignore_errors=True)


def extract(archive_name: str) -> Path:
    """Extract a whole archive of ../shared/topologies once per session; the extraction dir."""
    if archive_name not in _extracted:
        archive = _archive(archive_name)
        dst = _scratch() / archive_name.removesuffix(".tar.bz2")
        made: set[Path] = set()
        with tarfile.open(archive) as tar:
            for m in tar:
                _write_member(tar, m, dst, made)
        _extracted[archive_name] = dst
    return _extracted[archive_name]


# What discovery reads, so `roots` can skip the bulk of a dump (cpuidle, power, ... are most of
# its files and cost seconds to write on a busy CI machine).
_SKIP_DIRS = frozenset(
    {"cpuidle", "power", "acpi_cppc", "thermal_throttle", "hotplug", "microcode", "cpufreq"}
)
_CPU_FILES = frozenset({"online", "topology", "cache", "cpu_capacity", "cpufreq"})
_CPUFREQ = re.compile(r"^sys/devices/system/cpu/cpufreq(/policy\d+(/cpuinfo_max_freq)?)?$")
_TOPOLOGY_FILES = frozenset(
    {
        "physical_package_id",
        "die_id",
        "cluster_id",
        "core_id",
        "core_cpus_list",
        "core_cpus",
        "thread_siblings_list",
        "thread_siblings",
    }
)
_CACHE_FILES = frozenset({"level", "type", "shared_cpu_list", "id"})
_NODE_SKIP = re.compile(r"^(cpu\d+|memory\d+|numastat|vmstat|compact|subsystem|uevent)$")
_KEEP_TOP = ("sys/devices/", "sys/bus/dax/", "proc/cmdline", "proc/meminfo")
_lean: dict[str, Path] = {}


def _discovery_member(rel: str) -> bool:
    if not rel.startswith(_KEEP_TOP) and rel not in ("sys", "proc", "sys/devices", "sys/bus"):
        return rel == "sys/bus/dax"
    parts = rel.split("/")
    if _CPUFREQ.match(rel) or (len(parts) == 6 and parts[5] == "cpufreq"):
        return True  # cpuN/cpufreq links to cpufreq/policyN: only the maximum frequency is read
    if _SKIP_DIRS.intersection(parts):
        return False
    if rel.startswith("sys/devices/system/cpu/cpu") and len(parts) > 5:
        if parts[5] not in _CPU_FILES:
            return False
        if parts[5] == "topology" and len(parts) > 6:
            return parts[6] in _TOPOLOGY_FILES
        if len(parts) > 7:  # cache/indexN/<file>
            return parts[7] in _CACHE_FILES
    if rel.startswith("sys/devices/system/node/node") and len(parts) > 5:
        return not _NODE_SKIP.match(parts[5])
    return True


def _extract_lean(archive: str) -> Path:
    """Extract, once per session, only what discovery reads of every machine in `archive`."""
    if archive not in _lean:
        path = _archive(archive)
        dst = _scratch() / ("lean-" + archive.removesuffix(".tar.bz2"))
        prefixes = tuple(inner + "/" for a, inner in MACHINES.values() if a == archive)
        made: set[Path] = set()
        with tarfile.open(path) as tar:
            for m in tar:
                prefix = next((p for p in prefixes if m.name.startswith(p)), None)
                if prefix is not None and _discovery_member(m.name[len(prefix) :]):
                    _write_member(tar, m, dst, made)
        _lean[archive] = dst
    return _lean[archive]


def _write_member(tar: tarfile.TarFile, m: tarfile.TarInfo, dst: Path, made: set[Path]) -> None:
    """Write one member without owner, mode or time changes (tarfile's per-file chown and
    user/group look-ups dominate extraction time when running as root)."""
    parts = m.name.split("/")
    if m.name.startswith("/") or ".." in parts:
        raise ValueError(f"unsafe member {m.name!r} in {tar.name}")
    path = dst.joinpath(*parts)
    parent = path if m.isdir() else path.parent
    if parent not in made:
        parent.mkdir(parents=True, exist_ok=True)
        made.add(parent)
    if m.issym() and not m.linkname.startswith("/"):
        os.symlink(m.linkname, path)
    elif m.isfile():
        src = tar.extractfile(m)
        assert src is not None
        path.write_bytes(src.read())


def roots(name: str) -> tuple[Path, Path | None]:
    """(sysfs root, proc root or None) of a shared dump by short name; skips without ../shared.

    Only the files topology discovery reads are extracted (once per session and archive); use
    `extract(archive)` for the complete dump.
    """
    archive, inner = MACHINES[name]
    base = _extract_lean(archive) / inner
    proc = base / "proc"
    return base / "sys", proc if proc.is_dir() else None


@functools.cache
def read_dump(name: str) -> Machine:
    """A shared dump read by the topology reader itself (skips without ../shared), cached."""
    from nri_topology.topology.sysfs import read_machine

    sys_root, proc_root = roots(name)
    return read_machine(sys_root, proc_root=proc_root)


def machine_file(name: str) -> Path:
    """The committed description of a machine by short name."""
    if name in BUNDLED:
        return (
            Path(machine_spec.__file__).resolve().parents[1] / "data" / "machines" / f"{name}.json"
        )
    return DATA / f"{name}.json"


@functools.cache
def load(name: str) -> Machine:
    """The `Machine` of a real host by short name (see `MACHINES`), from its committed file.

    A machine just added to `MACHINES` without its file yet is read from its dump (and
    test_topology_machines.py fails until `python -m tests.machines` writes the file).
    """
    path = machine_file(name)
    if not path.is_file():
        return read_dump(name)
    return machine_spec.to_machine(machine_spec.load_spec(path), origin=str(path))


def describe(name: str, machine: Machine) -> str:
    """The committed file's text for `machine`, as converted from its dump."""
    if name in BUNDLED:
        return bundle.describe(BUNDLED[name], machine)
    archive, inner = MACHINES[name]
    doc = machine_spec.from_machine(
        machine, name=name, description=_summary(machine), source=f"{archive}:{inner}"
    )
    return machine_spec.dumps(doc)


def _summary(m: Machine) -> str:
    dies = {(c.package, c.die) for c in m.cpus.values()}
    return (
        f"{len(m.packages)} packages, {len(dies)} dies, {len(m.cores)} cores, {len(m.cpus)} CPUs,"
        f" NUMA nodes {cpuset.format(m.nodes)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Convert every dump to its committed description (or, with --check, compare)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is not fresh")
    args = parser.parse_args(argv)
    if not have_dumps():
        print(f"error: {NO_DUMPS}", file=sys.stderr)
        return 2
    stale = []
    for name in ALL_MACHINES:
        path, text = machine_file(name), describe(name, read_dump(name))
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        print(("stale: " if args.check else "wrote: ") + str(path))
    return 1 if args.check and stale else 0


# --- synthetic trees -------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryOnlyNode:
    """A CPU-less NUMA node attached to one CPU node (PMEM, HBM, CXL expander...)."""

    memory: int  # bytes
    near: int  # CPU node it hangs off
    distance: int = 17  # from `near`; every other node sees it at `far_distance`
    far_distance: int = 28
    bandwidth: int | None = None  # HMAT access1 read/write bandwidth from `near`, MB/s
    latency: int | None = None  # HMAT access1 read/write latency from `near`, ns


@dataclass(frozen=True)
class SyntheticSpec:
    """A regular machine: sockets x dies x NUMA nodes x cores x threads, Linux x86 CPU numbering.

    CPU ids run over all cores for thread 0 first, then thread 1, etc. (siblings are `n` apart),
    as x86 kernels number them. Node ids: CPU nodes 0..N-1 in socket/die order, then the
    memory-only nodes in the order given.
    """

    sockets: int = 1
    dies: int = 1  # per socket
    nodes: int = 1  # CPU NUMA nodes per die
    cores: int = 2  # per node
    threads: int = 2  # per core
    memory: int = 4 << 30  # bytes per CPU node
    l3: str = "node"  # L3 sharing: "node", "die" or "socket"
    memory_only: Sequence[MemoryOnlyNode] = ()
    isolated: str = ""  # devices/system/cpu/isolated
    offline: str = ""  # present but offline CPUs
    hugepages: dict[int, int] = field(default_factory=dict)  # per node: size kB -> pages
    dram_bandwidth: int | None = None  # HMAT access1 of CPU nodes to their own memory
    dram_latency: int | None = None
    near_distance: int = 11  # between nodes of the same socket
    remote_distance: int = 21  # between sockets
    # Hybrid: single-thread efficiency cores per node, numbered after every performance thread,
    # told apart by "atom" (devices/cpu_core,cpu_atom), "capacity" (cpu_capacity) or "freq"
    # (cpufreq/cpuinfo_max_freq); "none" writes no kind at all.
    e_cores: int = 0
    hybrid_from: str = "atom"

    @property
    def cpu_count(self) -> int:
        n_nodes = self.sockets * self.dies * self.nodes
        return n_nodes * (self.cores * self.threads + self.e_cores)

    @property
    def p_count(self) -> int:
        return self.sockets * self.dies * self.nodes * self.cores * self.threads


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def write_sysfs(tmp_path: Path, spec: SyntheticSpec) -> Path:
    """Write the sysfs tree of `spec` under `tmp_path/sys`; returns that sysfs root."""
    root = tmp_path / "sys"
    cpu_dir = root / "devices/system/cpu"
    node_dir = root / "devices/system/node"
    n_cores = spec.sockets * spec.dies * spec.nodes * spec.cores
    n_cpu_nodes = spec.sockets * spec.dies * spec.nodes
    offline = cpuset.parse(spec.offline)
    e_cpus: dict[int, int] = {}  # efficiency CPU -> its node
    all_ids = range(spec.cpu_count)
    online = [i for i in all_ids if i not in offline]

    # core index g -> (socket, die, node, core-in-die); thread t of core g is CPU t * n_cores + g
    node_cpus: dict[int, set[int]] = {n: set() for n in range(n_cpu_nodes)}
    node_socket: dict[int, int] = {}
    l3_groups: dict[tuple[int, ...], set[int]] = {}
    per_die = spec.nodes * spec.cores
    for g in range(n_cores):
        socket, rest = divmod(g, spec.dies * per_die)
        die, in_die = divmod(rest, per_die)
        node = (socket * spec.dies + die) * spec.nodes + in_die // spec.cores
        node_socket[node] = socket
        threads = [t * n_cores + g for t in range(spec.threads)]
        key = {"node": (node,), "die": (socket, die), "socket": (socket,)}[spec.l3]
        for cpu in threads:
            node_cpus[node].add(cpu)
            l3_groups.setdefault(key, set()).add(cpu)
        for cpu in threads:
            if cpu in offline:
                continue
            top = cpu_dir / f"cpu{cpu}" / "topology"
            _write(top / "physical_package_id", str(socket))
            _write(top / "die_id", str(die))
            _write(top / "core_id", str(in_die))
            _write(top / "thread_siblings_list", cpuset.format(threads))
            _write(top / "core_cpus_list", cpuset.format(threads))
    for n in range(n_cpu_nodes):
        socket, rest = divmod(n, spec.dies * spec.nodes)
        die = rest // spec.nodes
        for i in range(spec.e_cores):
            cpu = spec.p_count + n * spec.e_cores + i
            e_cpus[cpu] = n
            node_cpus[n].add(cpu)
            key = {"node": (n,), "die": (socket, die), "socket": (socket,)}[spec.l3]
            l3_groups.setdefault(key, set()).add(cpu)
            if cpu in offline:
                continue
            top = cpu_dir / f"cpu{cpu}" / "topology"
            _write(top / "physical_package_id", str(socket))
            _write(top / "die_id", str(die))
            _write(top / "core_id", str(per_die + (rest % spec.nodes) * spec.e_cores + i))
            _write(top / "thread_siblings_list", str(cpu))
            _write(top / "core_cpus_list", str(cpu))
    _write_core_kinds(root, spec, frozenset(e_cpus), offline)
    for group in l3_groups.values():
        for cpu in group:
            if cpu in offline:
                continue
            cache = cpu_dir / f"cpu{cpu}" / "cache"
            g = cpu % n_cores
            siblings = cpuset.format(t * n_cores + g for t in range(spec.threads))
            if cpu in e_cpus:
                siblings = str(cpu)
            for idx, (level, kind, shared) in enumerate(
                [(1, "Data", siblings), (2, "Unified", siblings), (3, "Unified", None)]
            ):
                d = cache / f"index{idx}"
                _write(d / "level", str(level))
                _write(d / "type", kind)
                _write(d / "shared_cpu_list", shared or cpuset.format(group))
    for cpu in all_ids:
        if cpu:  # cpu0 has no online file on x86
            _write(cpu_dir / f"cpu{cpu}" / "online", "0" if cpu in offline else "1")
    _write(cpu_dir / "online", cpuset.format(online))
    _write(cpu_dir / "present", cpuset.format(all_ids))
    _write(cpu_dir / "possible", cpuset.format(all_ids))
    _write(cpu_dir / "offline", cpuset.format(offline))
    _write(cpu_dir / "isolated", spec.isolated)

    n_nodes = n_cpu_nodes + len(spec.memory_only)
    dist = [[0] * n_nodes for _ in range(n_nodes)]
    for a in range(n_nodes):
        for b in range(n_nodes):
            if a == b:
                dist[a][b] = 10
            elif a < n_cpu_nodes and b < n_cpu_nodes:
                same = node_socket[a] == node_socket[b]
                dist[a][b] = spec.near_distance if same else spec.remote_distance
    for i, mem in enumerate(spec.memory_only):
        m = n_cpu_nodes + i
        for other in range(n_nodes):
            if other != m:
                d = mem.distance if other == mem.near else mem.far_distance
                dist[m][other] = dist[other][m] = d
    for n in range(n_nodes):
        d = node_dir / f"node{n}"
        is_cpu = n < n_cpu_nodes
        memory = spec.memory if is_cpu else spec.memory_only[n - n_cpu_nodes].memory
        _write(d / "cpulist", cpuset.format(node_cpus[n] - offline) if is_cpu else "")
        _write(d / "distance", " ".join(str(x) for x in dist[n]))
        _write(
            d / "meminfo",
            f"Node {n} MemTotal:       {memory // 1024} kB\nNode {n} MemFree:        0 kB",
        )
        for size, count in spec.hugepages.items():
            _write(d / f"hugepages/hugepages-{size}kB/nr_hugepages", str(count))
        if is_cpu and spec.dram_bandwidth is not None:
            _write_access(d, n, spec.dram_bandwidth, spec.dram_latency)
        elif not is_cpu:
            mem = spec.memory_only[n - n_cpu_nodes]
            if mem.bandwidth is not None:
                _write_access(d, mem.near, mem.bandwidth, mem.latency)
    _write(node_dir / "online", cpuset.format(range(n_nodes)))
    _write(node_dir / "possible", cpuset.format(range(n_nodes)))
    return root


def _write_core_kinds(
    root: Path, spec: SyntheticSpec, e_cpus: frozenset[int], offline: frozenset[int]
) -> None:
    """What tells efficiency cores from performance ones, as `spec.hybrid_from` says."""
    if not e_cpus or spec.hybrid_from == "none":
        return
    online = [c for c in range(spec.cpu_count) if c not in offline]
    if spec.hybrid_from == "atom":
        _write(root / "devices/cpu_atom/cpus", cpuset.format(c for c in online if c in e_cpus))
        _write(root / "devices/cpu_core/cpus", cpuset.format(c for c in online if c not in e_cpus))
        return
    rel, perf, eff = {
        "capacity": ("cpu_capacity", 1024, 410),
        "freq": ("cpufreq/cpuinfo_max_freq", 5000000, 3800000),
    }[spec.hybrid_from]
    for c in online:
        _write(root / f"devices/system/cpu/cpu{c}/{rel}", str(eff if c in e_cpus else perf))


def _write_access(node: Path, initiator: int, bandwidth: int, latency: int | None) -> None:
    init = node / "access1" / "initiators"
    init.mkdir(parents=True, exist_ok=True)
    (init / f"node{initiator}").mkdir(exist_ok=True)
    for kind in ("read", "write"):
        _write(init / f"{kind}_bandwidth", str(bandwidth))
        _write(init / f"{kind}_latency", str(latency or 0))


def write_machine_sysfs(tmp_path: Path, machine: Machine) -> Path:
    """Write the sysfs tree of any `Machine` under `tmp_path/sys`; returns that sysfs root.

    For running the daemon on a committed machine without its dump. Reading it back gives the
    same machine, except how memory-only nodes' tiers are found (no HMAT or kernel tiers are
    written, so the reader's heuristic decides) and the original reader's warnings.
    """
    root = tmp_path / "sys"
    cpu_dir = root / "devices/system/cpu"
    node_dir = root / "devices/system/node"
    every = machine.all_cpus | machine.offline
    for c in machine.cpus.values():
        top = cpu_dir / f"cpu{c.id}" / "topology"
        for name, value in (
            ("physical_package_id", c.package),
            ("die_id", c.die),
            ("cluster_id", c.cluster),
            ("core_id", c.core),
        ):
            _write(top / name, str(value))
        _write(top / "core_cpus_list", cpuset.format(c.threads))
        cache = cpu_dir / f"cpu{c.id}" / "cache"
        for idx, level, shared in ((2, 2, c.l2), (3, 3, c.l3)):
            _write(cache / f"index{idx}" / "level", str(level))
            _write(cache / f"index{idx}" / "type", "Unified")
            _write(cache / f"index{idx}" / "shared_cpu_list", cpuset.format(shared))
        _write(cpu_dir / f"cpu{c.id}" / "online", "1")
    for cpu in machine.offline:
        _write(cpu_dir / f"cpu{cpu}" / "online", "0")
    _write(cpu_dir / "online", cpuset.format(machine.all_cpus))
    _write(cpu_dir / "present", cpuset.format(every))
    _write(cpu_dir / "possible", cpuset.format(every))
    _write(cpu_dir / "offline", cpuset.format(machine.offline))
    _write(cpu_dir / "isolated", cpuset.format(machine.isolated))
    if machine.efficiency_cpus:  # hybrid: the kinds as Intel kernels list them
        _write(root / "devices/cpu_atom/cpus", cpuset.format(machine.efficiency_cpus))
        _write(root / "devices/cpu_core/cpus", cpuset.format(machine.performance_cpus))
    ids = sorted(machine.nodes)
    for n in machine.nodes.values():
        d = node_dir / f"node{n.id}"
        _write(d / "cpulist", cpuset.format(n.cpus))
        _write(d / "distance", " ".join(str(n.distances[other]) for other in ids))
        _write(d / "meminfo", f"Node {n.id} MemTotal:       {n.memory // 1024} kB")
        for size, count in n.hugepages.items():
            _write(d / f"hugepages/hugepages-{size}kB/nr_hugepages", str(count))
    _write(node_dir / "online", cpuset.format(ids))
    _write(node_dir / "possible", cpuset.format(ids))
    return root


def synthetic(tmp_path: Path, spec: SyntheticSpec | None = None, **kwargs: object) -> Machine:
    """Write `spec` (or `SyntheticSpec(**kwargs)`) under tmp_path and read it back."""
    from nri_topology.topology.sysfs import read_machine

    spec = spec or SyntheticSpec(**kwargs)  # type: ignore[arg-type]
    return read_machine(write_sysfs(tmp_path, spec))


def add_pci_device(
    sys_root: Path,
    address: str,
    *,
    node: int = -1,
    cpus: str = "",
    char: tuple[int, int] | None = None,
    block: tuple[int, int] | None = None,
    iommu_group: int | None = None,
    child: str = "",
) -> Path:
    """A PCI function under `sys_root/devices/pci0000:00` as the kernel lays it out: its
    `numa_node` and `local_cpulist`, the `dev/{char,block}/M:m` link of a device node on it (at
    `child`, e.g. `drm/card0`, like a GPU's DRM card or an NVMe namespace), an IOMMU group."""
    dev = sys_root / "devices" / "pci0000:00" / address
    _write(dev / "numa_node", str(node))
    if cpus:
        _write(dev / "local_cpulist", cpus)
    target = dev / child if child else dev
    target.mkdir(parents=True, exist_ok=True)
    for kind, number in (("char", char), ("block", block)):
        if number is not None:
            link = sys_root / "dev" / kind / f"{number[0]}:{number[1]}"
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(target, link.parent))
    if iommu_group is not None:
        group = sys_root / "kernel" / "iommu_groups" / str(iommu_group) / "devices"
        group.mkdir(parents=True, exist_ok=True)
        (group / address).symlink_to(os.path.relpath(dev, group))
    return dev


if __name__ == "__main__":
    sys.exit(main())
