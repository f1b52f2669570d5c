"""Discover the machine from sysfs (and optionally procfs) into an immutable `Machine`.

What is read, relative to the sysfs root:

* `devices/system/cpu/{online,present,isolated}`; offline CPUs are present minus online.
* per online CPU `cpuN/topology/`: `physical_package_id`, `die_id` (missing or -1 -> 0),
  `cluster_id` (missing or -1 -> the core id), `core_id`, `core_cpus_list` (fallback
  `thread_siblings_list`); `cpuN/cache/index*/{level,type,shared_cpu_list}` for L2 and L3 groups.
* per NUMA node `devices/system/node/nodeN/`: `cpulist` (fallback `cpumap`), `distance`,
  `meminfo` (MemTotal), `hugepages/hugepages-*kB/nr_hugepages`, HMAT `access1`/`access0`
  initiator attributes and `memory_side_cache`.
* `devices/system/node/has_normal_memory`: nodes not listed (when the file exists) hold movable
  memory only (`NumaNode.normal`).
* core kinds on hybrid machines, first source that tells performance from efficiency cores:
  `devices/cpu_atom/cpus` (Intel E-cores; `devices/cpu_core/cpus` are the P-cores), else per CPU
  `cpuN/cpu_capacity` (Arm), else `cpuN/cpufreq/cpuinfo_max_freq`. From a number, CPUs below
  80% of the highest value are efficiency cores: small differences (favoured cores of Turbo
  Boost Max, per-core turbo bins) do not make a machine hybrid. A core is an efficiency core only
  when all its threads are; `Machine.core_kinds_from` names the source.
* `bus/dax/devices/*` (`target_node` and where the device sits) as a kernel hint of the memory kind.
* `<proc_root>/cmdline` for `isolcpus=` when a proc root is given; `<proc_root>/meminfo` when the
  kernel has no NUMA node directories at all.

Missing files are tolerated with a warning naming the file (collected in `Machine.warnings`),
except optional ones that older kernels lack: `die_id`, `cluster_id`, `isolated`, caches,
hugepages and HMAT. Inconsistent data raises `TopologyError` naming the file: a CPU claimed by
two nodes, a distance row whose length matches no node count, unparsable lists and numbers.
Asymmetric distances are replaced by the pair's average, with a warning.

Memory tier of a node, first rule that applies:

1. `tier_overrides` from the config ("config").
2. A node with online CPUs is DRAM ("cpu").
3. Kernel hints ("kernel"): the node is the target of a DAX device below an NVDIMM bus
   (`ndbus`) -> PMEM; below a CXL port or region (`cxl`, `ACPI0017`) -> CXL. Otherwise the
   kernel's memory tiers (`devices/virtual/memory_tiering/memory_tierN/nodelist`, N growing
   with abstract distance): a CPU-less node in a faster tier than the CPU nodes' -> HBM, the
   same tier -> DRAM, a slower one -> PMEM.
4. HMAT ("hmat"): the node's bandwidth and latency from its CPU initiators (`access1`, else
   `access0`) compared with the reference DRAM, which is the initiators' own memory when they
   have memory and attributes, else the median over all nodes with attributes. Bandwidth at least
   twice the reference (and latency at most 1.5 times) -> HBM; bandwidth at most half or latency
   at least twice the reference -> PMEM; otherwise DRAM. A CPU-less node behind a memory-side
   cache without usable attributes is far memory -> PMEM.
5. Heuristic ("heuristic"), as the reference implementation does: the reference DRAM size is
   the mean MemTotal of CPU nodes with memory; when CPU nodes have no memory, the CPU-less nodes
   at the smallest distance from any CPU node stand in for DRAM (tier DRAM) and give the
   reference. A CPU-less node smaller than the reference is HBM (on-package or device memory),
   one at least as large is PMEM (slower, larger far memory). A node without memory is DRAM.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from nri_topology.topology import cpuset
from nri_topology.topology.model import CoreKind, Cpu, Machine, MemoryTier, NumaNode

ENV_SYSFS = "NRI_TOPOLOGY_SYSFS"
_NODE_DIR = "devices/system/node"
_CPU_DIR = "devices/system/cpu"
_NUMBERED = re.compile(r"^([a-z_]+?)(\d+)$")
_HUGEPAGES = re.compile(r"^hugepages-(\d+)kB$")
_MEMTOTAL = re.compile(r"^(?:Node\s+\d+\s+)?MemTotal:\s+(\d+)\s*kB\s*$", re.MULTILINE)
_ISOLCPUS_FLAGS = {"nohz", "domain", "managed_irq"}


class TopologyError(ValueError):
    """sysfs data that contradicts itself or cannot be parsed; the message names the file."""


def default_sysfs_root() -> Path:
    """The sysfs root to read: `$NRI_TOPOLOGY_SYSFS` when set (tests, simulation), else /sys."""
    return Path(os.environ.get(ENV_SYSFS) or "/sys")


@dataclass
class _Reader:
    """Reads files under one root, strips the NUL padding some dumps carry, collects warnings."""

    root: Path
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._base = str(self.root) + os.sep  # plain strings: thousands of small reads

    def text(self, rel: str, *, optional: bool = False) -> str | None:
        try:
            with open(self._base + rel, "rb", buffering=0) as f:
                raw = f.read()
        except (FileNotFoundError, NotADirectoryError):
            if not optional:
                self.warnings.append(f"{rel}: missing")
            return None
        except OSError as err:
            self.warnings.append(f"{rel}: unreadable ({err.strerror or err})")
            return None
        return raw.replace(b"\0", b"").decode("utf-8", "replace").strip()

    def ids(self, rel: str, *, optional: bool = False) -> frozenset[int] | None:
        text = self.text(rel, optional=optional)
        if text is None:
            return None
        try:
            return cpuset.parse(text)
        except cpuset.CpuSetError as err:
            raise TopologyError(f"{self.root / rel}: {err}") from None

    def number(self, rel: str, *, optional: bool = False) -> int | None:
        text = self.text(rel, optional=optional)
        if text is None or (optional and not text):
            return None
        try:
            return int(text)
        except ValueError:
            raise TopologyError(f"{self.root / rel}: not an integer: {text!r}") from None

    def mask(self, rel: str, *, optional: bool = False) -> frozenset[int] | None:
        """A hex CPU mask in 32-bit words, most significant first ("00000000,0000000c")."""
        text = self.text(rel, optional=optional)
        if text is None:
            return None
        try:
            value = int(text.replace(",", ""), 16) if text else 0
        except ValueError:
            raise TopologyError(f"{self.root / rel}: not a CPU mask: {text!r}") from None
        return frozenset(i for i in range(value.bit_length()) if value >> i & 1)

    def numbered(self, rel: str, prefix: str) -> dict[int, str]:
        """Entries `<prefix>N` of a directory, by N."""
        try:
            names = os.listdir(self._base + rel)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        out: dict[int, str] = {}
        for name in names:
            m = _NUMBERED.match(name)
            if m and m.group(1) == prefix:
                out[int(m.group(2))] = f"{rel}/{name}"
        return out


def read_machine(
    sysfs_root: Path = Path("/sys"),
    *,
    proc_root: Path | None = None,
    tier_overrides: Mapping[int, MemoryTier] | None = None,
) -> Machine:
    """Read the machine under `sysfs_root` (see the module docstring for what and how)."""
    sysfs_root = Path(sysfs_root)
    if not (sysfs_root / _CPU_DIR).is_dir():
        raise TopologyError(f"{sysfs_root / _CPU_DIR}: not a directory (is {sysfs_root} a sysfs?)")
    r = _Reader(sysfs_root)
    online, offline = _online_cpus(r)
    isolated = (r.ids(f"{_CPU_DIR}/isolated", optional=True) or frozenset()) | _cmdline_isolcpus(
        proc_root, r.warnings
    )
    nodes_raw = _read_nodes(r, online, proc_root)
    cpu_node = {cpu: n.id for n in nodes_raw for cpu in n.cpus}
    unplaced = online - cpu_node.keys()
    if unplaced and nodes_raw:
        r.warnings.append(
            f"{_NODE_DIR}/node*/cpulist: no online node lists CPUs {cpuset.format(unplaced)}"
        )
    cpus = _read_cpus(r, online, cpu_node)
    efficiency, kinds_from = _efficiency_cpus(r, online)
    efficiency = frozenset(c for c in efficiency if cpus[c].threads <= efficiency)
    if efficiency:
        cpus = {
            c: replace(cpu, kind=CoreKind.EFFICIENCY) if c in efficiency else cpu
            for c, cpu in cpus.items()
        }
    else:
        kinds_from = ""
    distances = _distance_matrix(r, nodes_raw)
    tiers = _classify(r, nodes_raw, distances, tier_overrides or {})
    normal = r.ids(f"{_NODE_DIR}/has_normal_memory", optional=True)
    nodes = {
        n.id: NumaNode(
            id=n.id,
            cpus=n.cpus,
            memory=n.memory,
            tier=tiers[n.id][0],
            tier_source=tiers[n.id][1],
            distances=distances[n.id],
            hugepages=n.hugepages,
            normal=normal is None or n.id in normal or n.memory == 0,
        )
        for n in nodes_raw
    }
    return Machine(
        cpus=cpus,
        nodes=nodes,
        isolated=isolated & online,
        offline=offline,
        warnings=tuple(r.warnings),
        core_kinds_from=kinds_from,
    )


# --- CPUs --------------------------------------------------------------------------------------


def _online_cpus(r: _Reader) -> tuple[frozenset[int], frozenset[int]]:
    """(online, present-but-offline) CPU ids."""
    dirs = r.numbered(_CPU_DIR, "cpu")
    online = r.ids(f"{_CPU_DIR}/online")
    if online is None:
        # Fall back to the per-CPU online flags; cpu0 often has none and is then online.
        online = frozenset(
            cpu
            for cpu, rel in dirs.items()
            if (r.text(f"{rel}/online", optional=True) or "1") != "0"
        )
    present = r.ids(f"{_CPU_DIR}/present")
    if present is None:
        present = online | dirs.keys()
    return online, present - online


def _cmdline_isolcpus(proc_root: Path | None, warnings: list[str]) -> frozenset[int]:
    """CPUs taken out of the scheduler domains by `isolcpus=` on the kernel command line.

    `isolcpus=[flag,...,]<cpu-list>`: with no flag or with `domain` the CPUs leave the scheduler
    domains; `nohz` or `managed_irq` alone do not isolate them from scheduling.
    """
    if proc_root is None:
        return frozenset()
    path = Path(proc_root) / "cmdline"
    try:
        cmdline = path.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        warnings.append("proc/cmdline: missing")
        return frozenset()
    out: set[int] = set()
    for word in cmdline.split():
        key, sep, value = word.partition("=")
        if key != "isolcpus" or not sep:
            continue
        parts = value.split(",")
        flags = []
        while parts and parts[0] in _ISOLCPUS_FLAGS:
            flags.append(parts.pop(0))
        if flags and "domain" not in flags:
            continue
        try:
            out |= _kernel_cpulist(",".join(parts))
        except cpuset.CpuSetError as err:
            raise TopologyError(f"{path}: isolcpus: {err}") from None
    return frozenset(out)


def _kernel_cpulist(text: str) -> frozenset[int]:
    """The kernel command line list format: the sysfs form plus `a-b:used/group` strides."""
    out: set[int] = set()
    for part in text.split(","):
        rng, colon, stride = part.partition(":")
        ids = cpuset.parse(rng)
        if not colon:
            out |= ids
            continue
        used, slash, group = stride.partition("/")
        if not (slash and used.isdigit() and group.isdigit() and 0 < int(used) <= int(group)):
            raise cpuset.CpuSetError(f"bad stride {stride!r} in {part!r}")
        first = min(ids, default=0)
        out |= {i for i in ids if (i - first) % int(group) < int(used)}
    return frozenset(out)


def _read_cpus(r: _Reader, online: frozenset[int], cpu_node: Mapping[int, int]) -> dict[int, Cpu]:
    missing: dict[str, set[int]] = {}

    def need(cpu: int, rel: str) -> int | None:
        value = r.number(f"{_CPU_DIR}/cpu{cpu}/{rel}", optional=True)
        if value is None:
            missing.setdefault(rel, set()).add(cpu)
        return value

    raw: dict[int, tuple[int, int, int, int, frozenset[int]]] = {}
    l2: dict[int, frozenset[int]] = {}
    l3: dict[int, frozenset[int]] = {}
    for cpu in sorted(online):
        base = f"{_CPU_DIR}/cpu{cpu}"
        package = need(cpu, "topology/physical_package_id")
        core = need(cpu, "topology/core_id")
        die = r.number(f"{base}/topology/die_id", optional=True)
        cluster = r.number(f"{base}/topology/cluster_id", optional=True)
        threads = r.ids(f"{base}/topology/core_cpus_list", optional=True)
        if threads is None:
            threads = r.ids(f"{base}/topology/thread_siblings_list", optional=True)
        if threads is None:
            threads = r.mask(f"{base}/topology/core_cpus", optional=True)
        if threads is None:
            threads = r.mask(f"{base}/topology/thread_siblings", optional=True)
        if threads is None:
            missing.setdefault("topology/thread_siblings_list", set()).add(cpu)
            threads = frozenset()
        core = cpu if core is None else core
        raw[cpu] = (
            0 if package is None else package,
            0 if die is None or die < 0 else die,
            core if cluster is None or cluster < 0 else cluster,
            core,
            (threads & online) | {cpu},
        )
        if cpu in l2 and cpu in l3:
            continue  # both groups already known from a sibling's shared_cpu_list
        for level, shared in _caches(r, base, online):
            group = shared | {cpu}
            for member in group:
                (l2 if level == 2 else l3).setdefault(member, group)
    for rel, cpus in missing.items():
        r.warnings.append(f"{_CPU_DIR}/cpu*/{rel}: missing for CPUs {cpuset.format(cpus)}")
    _reconcile_cores(r, raw)
    by_package: dict[int, set[int]] = {}
    for cpu, (package, *_rest) in raw.items():
        by_package.setdefault(package, set()).add(cpu)
    return {
        cpu: Cpu(
            id=cpu,
            package=package,
            die=die,
            cluster=cluster,
            core=core,
            node=cpu_node.get(cpu, -1),
            threads=threads,
            l2=l2.get(cpu, frozenset({cpu})),
            l3=l3.get(cpu, frozenset(by_package[package])),
        )
        for cpu, (package, die, cluster, core, threads) in raw.items()
    }


# Below this share of the highest capacity or maximum frequency a CPU is an efficiency core.
_EFFICIENCY_SHARE = 0.8


def _efficiency_cpus(r: _Reader, online: frozenset[int]) -> tuple[frozenset[int], str]:
    """(efficiency-core CPUs, the source that said so); empty on machines that are not hybrid."""
    atom = r.ids("devices/cpu_atom/cpus", optional=True)
    if atom is not None:
        atom &= online
        if atom and atom != online:
            return atom, "devices/cpu_atom/cpus"
    for rel in ("cpu_capacity", "cpufreq/cpuinfo_max_freq"):
        if not online or r.number(f"{_CPU_DIR}/cpu{min(online)}/{rel}", optional=True) is None:
            continue  # one look before reading a file per CPU
        values = {c: r.number(f"{_CPU_DIR}/cpu{c}/{rel}", optional=True) for c in sorted(online)}
        known = {c: v for c, v in values.items() if v is not None and v > 0}
        if len(known) != len(online):
            continue
        top = max(known.values())
        low = frozenset(c for c, v in known.items() if v < _EFFICIENCY_SHARE * top)
        if low:
            return low, f"{_CPU_DIR}/cpu*/{rel}"
    return frozenset(), ""


def _reconcile_cores(r: _Reader, raw: dict[int, tuple[int, int, int, int, frozenset[int]]]) -> None:
    """Make (package, die, core_id) identify exactly the kernel's thread-sibling sets.

    Some kernels and dumps repeat a core_id for distinct cores of one package; then the lowest
    sibling id becomes the core id of every CPU in that package and die, with a warning.
    """
    groups: dict[tuple[int, int, int], set[int]] = {}
    for cpu, (package, die, _cluster, core, _threads) in raw.items():
        groups.setdefault((package, die, core), set()).add(cpu)
    bad = {
        (package, die)
        for (package, die, core), cpus in groups.items()
        if any(raw[c][4] != cpus for c in cpus)
    }
    if not bad:
        return
    # Sibling lists may also disagree with each other; their transitive closure is the core.
    parent = {cpu: cpu for cpu in raw}

    def find(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for cpu, (package, die, _cluster, _core, threads) in raw.items():
        for t in threads:
            if t in raw and raw[t][:2] == (package, die):
                a, b = find(cpu), find(t)
                parent[max(a, b)] = min(a, b)
    members: dict[int, set[int]] = {}
    for cpu in raw:
        members.setdefault(find(cpu), set()).add(cpu)
    fixed: set[int] = set()
    for cpu, (package, die, cluster, core, _threads) in raw.items():
        if (package, die) in bad:
            new = find(cpu)  # union by lowest id: the root is the lowest sibling
            group = frozenset(members[new])
            raw[cpu] = (package, die, new if cluster == core else cluster, new, group)
            fixed.add(cpu)
    r.warnings.append(
        f"{_CPU_DIR}/cpu*/topology/core_id: does not match the thread siblings of CPUs "
        f"{cpuset.format(fixed)}; using the lowest sibling id as the core id"
    )


def _caches(r: _Reader, base: str, online: frozenset[int]) -> Iterable[tuple[int, frozenset[int]]]:
    """(level, online sharing CPUs) of this CPU's unified or data L2/L3 caches."""
    for rel in r.numbered(f"{base}/cache", "index").values():
        level = r.number(f"{rel}/level", optional=True)
        if level not in (2, 3) or r.text(f"{rel}/type", optional=True) == "Instruction":
            continue
        shared = r.ids(f"{rel}/shared_cpu_list", optional=True)
        if shared is not None:
            yield level, shared & online


# --- NUMA nodes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RawNode:
    id: int
    rel: str  # path of the node directory relative to the root
    cpus: frozenset[int]
    memory: int
    hugepages: dict[int, int]
    distance_row: tuple[int, ...] | None


def _read_nodes(r: _Reader, online: frozenset[int], proc_root: Path | None) -> list[_RawNode]:
    dirs = r.numbered(_NODE_DIR, "node")
    if not dirs:
        r.warnings.append(f"{_NODE_DIR}/node*: none; assuming one NUMA node 0 with every CPU")
        memory = 0
        if proc_root is not None:
            memory = _memtotal(_Reader(Path(proc_root), r.warnings), "meminfo") or 0
        return [_RawNode(0, _NODE_DIR, online, memory, {}, (10,))]
    owner: dict[int, int] = {}
    out: list[_RawNode] = []
    for node, rel in sorted(dirs.items()):
        cpus = r.ids(f"{rel}/cpulist", optional=True)
        if cpus is None:
            cpus = r.mask(f"{rel}/cpumap", optional=True)
        if cpus is None:
            r.warnings.append(f"{rel}/cpulist: missing (and no cpumap)")
            cpus = frozenset()
        for cpu in cpus:  # offline CPUs too: a double claim is wrong either way
            if cpu in owner:
                raise TopologyError(
                    f"{r.root / rel}/cpulist: CPU {cpu} is already claimed by node {owner[cpu]}"
                )
            owner[cpu] = node
        cpus &= online
        row = r.text(f"{rel}/distance")
        try:
            distance_row = None if row is None else tuple(int(x) for x in row.split())
        except ValueError:
            raise TopologyError(f"{r.root / rel}/distance: not a list of integers") from None
        out.append(
            _RawNode(
                id=node,
                rel=rel,
                cpus=cpus,
                memory=_memtotal(r, f"{rel}/meminfo") or 0,
                hugepages=_hugepages(r, rel),
                distance_row=distance_row,
            )
        )
    return out


def _memtotal(r: _Reader, rel: str) -> int | None:
    text = r.text(rel)
    if text is None:
        return None
    m = _MEMTOTAL.search(text)
    if m is None:
        raise TopologyError(f"{r.root / rel}: no 'MemTotal: <n> kB' line")
    return int(m.group(1)) * 1024


def _hugepages(r: _Reader, node_rel: str) -> dict[int, int]:
    try:
        names = os.listdir(r.root / node_rel / "hugepages")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[int, int] = {}
    for name in names:
        m = _HUGEPAGES.match(name)
        if m:
            count = r.number(f"{node_rel}/hugepages/{name}/nr_hugepages")
            if count is not None:
                out[int(m.group(1))] = count
    return dict(sorted(out.items()))


def _distance_matrix(r: _Reader, nodes: list[_RawNode]) -> dict[int, dict[int, int]]:
    """Node id -> node id -> distance, complete and symmetric.

    A row lists the distances to the online nodes in id order; when node directories are missing
    (an offline node) the row may still span `online` or `possible`, so those lists are tried too.
    """
    ids = [n.id for n in nodes]
    id_set = set(ids)
    candidates = [ids]
    for name in ("online", "possible"):
        listed = r.ids(f"{_NODE_DIR}/{name}", optional=True)
        if listed and id_set <= listed:
            candidates.append(sorted(listed))
    known: dict[tuple[int, int], int] = {}
    for n in nodes:
        if n.distance_row is None:
            continue
        columns = next((c for c in candidates if len(c) == len(n.distance_row)), None)
        if columns is None:
            raise TopologyError(
                f"{r.root / n.rel}/distance: {len(n.distance_row)} entries for {len(ids)} nodes"
            )
        for other, d in zip(columns, n.distance_row, strict=True):
            if other in id_set:
                known[n.id, other] = d
    out: dict[int, dict[int, int]] = {a: {} for a in ids}
    asymmetric: list[str] = []
    guessed = False
    for a in ids:
        for b in ids:
            ab, ba = known.get((a, b)), known.get((b, a))
            if ab is None and ba is None:
                guessed = True
                out[a][b] = 10 if a == b else 20
            elif ab is None or ba is None or ab == ba:
                out[a][b] = ab if ab is not None else ba  # type: ignore[assignment]
            else:
                out[a][b] = (ab + ba) // 2
                if a < b:
                    asymmetric.append(f"{a}->{b}={ab}/{b}->{a}={ba}")
    if asymmetric:
        r.warnings.append(
            f"{_NODE_DIR}/node*/distance: asymmetric distances averaged: {', '.join(asymmetric)}"
        )
    if guessed:
        r.warnings.append(
            f"{_NODE_DIR}/node*/distance: unknown distances assumed 10 (self) and 20 (others)"
        )
    return out


# --- memory tiers ------------------------------------------------------------------------------

_Tier = tuple[MemoryTier, str]


def _classify(
    r: _Reader,
    nodes: list[_RawNode],
    distances: Mapping[int, Mapping[int, int]],
    overrides: Mapping[int, MemoryTier],
) -> dict[int, _Tier]:
    out: dict[int, _Tier] = {}
    by_id = {n.id: n for n in nodes}
    for n in nodes:
        if n.cpus:
            out[n.id] = (MemoryTier.DRAM, "cpu")
    for node, tier in _dax_hints(r).items():
        if node in by_id and node not in out:
            out[node] = (tier, "kernel")
    for node, tier in _memory_tier_hints(r, [n.id for n in nodes if n.cpus]).items():
        if node in by_id and node not in out and by_id[node].memory:
            out[node] = (tier, "kernel")
    hmat = {n.id: a for n in nodes if (a := _hmat(r, n)) is not None}
    if hmat:
        _classify_hmat(r, nodes, hmat, out)
    for n in nodes:
        if n.id not in out and n.memory and (r.root / n.rel / "memory_side_cache").is_dir():
            out[n.id] = (MemoryTier.PMEM, "hmat")
    _classify_heuristic(nodes, distances, out)
    for node, tier in overrides.items():
        try:
            chosen = MemoryTier(tier)
        except ValueError:
            names = ", ".join(t.value for t in MemoryTier)
            raise TopologyError(
                f"tier override for node {node}: unknown tier {tier!r} (one of {names})"
            ) from None
        if node in by_id:
            out[node] = (chosen, "config")
        else:
            r.warnings.append(f"tier override for node {node}: no such node, ignored")
    return out


def _dax_hints(r: _Reader) -> dict[int, MemoryTier]:
    """Nodes that are targets of DAX devices on an NVDIMM bus (PMEM) or a CXL region (CXL)."""
    base = r.root / "bus/dax/devices"
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[int, MemoryTier] = {}
    for name in sorted(names):
        path = (base / name).resolve()
        try:
            target = int((path / "target_node").read_text().strip())
        except (OSError, ValueError):
            continue
        if target < 0:
            continue
        parts = [p.lower() for p in path.parts]
        if any(p.startswith("cxl") or "acpi0017" in p for p in parts):
            out[target] = MemoryTier.CXL
        elif any(p.startswith("ndbus") for p in parts):
            out[target] = MemoryTier.PMEM
    return out


def _memory_tier_hints(r: _Reader, cpu_nodes: list[int]) -> dict[int, MemoryTier]:
    """Tier of each node relative to the CPU nodes' in the kernel's memory tiering."""
    tiers = r.numbered("devices/virtual/memory_tiering", "memory_tier")
    rank: dict[int, int] = {}
    for tier, rel in tiers.items():
        for node in r.ids(f"{rel}/nodelist", optional=True) or ():
            rank[node] = tier
    dram = [rank[n] for n in cpu_nodes if n in rank]
    if not dram:
        return {}
    reference = min(dram)
    return {
        node: MemoryTier.HBM
        if tier < reference
        else MemoryTier.DRAM
        if tier == reference
        else MemoryTier.PMEM
        for node, tier in rank.items()
    }


@dataclass(frozen=True)
class _Access:
    bandwidth: int  # MB/s, 0 when unknown
    latency: int  # ns, 0 when unknown
    initiators: frozenset[int]


def _hmat(r: _Reader, n: _RawNode) -> _Access | None:
    """HMAT performance of a node from its CPU initiators (access1), else any (access0)."""
    for cls in ("access1", "access0"):
        rel = f"{n.rel}/{cls}/initiators"
        if not (r.root / rel).is_dir():
            continue
        bw = r.number(f"{rel}/read_bandwidth", optional=True) or 0
        lat = r.number(f"{rel}/read_latency", optional=True) or 0
        if bw or lat:
            return _Access(bw, lat, frozenset(r.numbered(rel, "node")))
    return None


def _classify_hmat(
    r: _Reader, nodes: list[_RawNode], hmat: Mapping[int, _Access], out: dict[int, _Tier]
) -> None:
    by_id = {n.id: n for n in nodes}
    bws = [a.bandwidth for a in hmat.values() if a.bandwidth]
    lats = [a.latency for a in hmat.values() if a.latency]
    median_bw = statistics.median(bws) if bws else 0
    median_lat = statistics.median(lats) if lats else 0
    for node, access in hmat.items():
        if node in out or not by_id[node].memory:
            continue
        local = [
            hmat[i]
            for i in access.initiators
            if i != node and i in hmat and i in by_id and by_id[i].memory
        ]
        ref_bw = max((a.bandwidth for a in local), default=0) or median_bw
        ref_lat = min((a.latency for a in local if a.latency), default=0) or median_lat
        bw = access.bandwidth / ref_bw if access.bandwidth and ref_bw else None
        lat = access.latency / ref_lat if access.latency and ref_lat else None
        if bw is not None and bw >= 2 and (lat is None or lat <= 1.5):
            out[node] = (MemoryTier.HBM, "hmat")
        elif (bw is not None and bw <= 0.5) or (lat is not None and lat >= 2):
            out[node] = (MemoryTier.PMEM, "hmat")
        elif bw is not None or lat is not None:
            out[node] = (MemoryTier.DRAM, "hmat")


def _classify_heuristic(
    nodes: list[_RawNode], distances: Mapping[int, Mapping[int, int]], out: dict[int, _Tier]
) -> None:
    cpu_nodes = [n for n in nodes if n.cpus]
    dram_sizes = [n.memory for n in cpu_nodes if n.memory]
    todo = [n for n in nodes if n.id not in out]
    if not dram_sizes and cpu_nodes:
        with_memory = [n for n in todo if n.memory]
        reach = {n.id: min(distances[n.id][c.id] for c in cpu_nodes) for n in with_memory}
        if reach:
            nearest = min(reach.values())
            for n in with_memory:
                if reach[n.id] == nearest:
                    out[n.id] = (MemoryTier.DRAM, "heuristic")
                    dram_sizes.append(n.memory)
    reference = statistics.fmean(dram_sizes) if dram_sizes else 0.0
    for n in todo:
        if n.id in out:
            continue
        if not n.memory or not reference:
            out[n.id] = (MemoryTier.DRAM, "heuristic")
        elif n.memory < reference:
            out[n.id] = (MemoryTier.HBM, "heuristic")
        else:
            out[n.id] = (MemoryTier.PMEM, "heuristic")
