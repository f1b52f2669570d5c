"""The immutable picture of a machine that the policy places containers on.

Read once from sysfs at start-up (see `sysfs.py`); everything downstream treats it as a value.
Only online CPUs appear in `cpus`; offline ones are listed in `offline` and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property


class MemoryTier(StrEnum):
    """Kind of memory behind a NUMA node."""

    DRAM = "dram"
    PMEM = "pmem"
    HBM = "hbm"
    CXL = "cxl"


_TIER_SETS: dict[frozenset[MemoryTier], frozenset[MemoryTier]] = {}


def tier_set(tiers: Iterable[MemoryTier]) -> frozenset[MemoryTier]:
    """`frozenset(tiers)`, one object for each distinct set (at most 2^4 of them): the policy
    keeps a set of tiers for every container and decision, and they are nearly all alike."""
    tiers = frozenset(tiers)
    return _TIER_SETS.setdefault(tiers, tiers)


class CoreKind(StrEnum):
    """Kind of core on a hybrid machine (Intel P/E cores, Arm big.LITTLE); all performance on
    others."""

    PERFORMANCE = "performance"
    EFFICIENCY = "efficiency"


@dataclass(frozen=True, slots=True)
class Cpu:
    """One online logical CPU and the hardware groups it belongs to."""

    id: int
    package: int  # physical_package_id (may be sparse, e.g. 36 and 8442)
    die: int  # die_id within the package; 0 when the kernel does not report dies (-1 mapped to 0)
    cluster: int  # cluster_id; equals `core` when the kernel reports none (-1)
    core: int  # core_id (unique only within package/die)
    node: int  # NUMA node id, -1 when no node lists this CPU
    threads: frozenset[int]  # online hardware-thread siblings, self included
    l2: frozenset[int]  # online CPUs sharing this CPU's L2 cache (self when unknown)
    l3: frozenset[int]  # online CPUs sharing this CPU's L3 cache (package when unknown)
    kind: CoreKind = CoreKind.PERFORMANCE

    @property
    def core_key(self) -> tuple[int, int, int]:
        """Identity of the physical core: (package, die, core)."""
        return (self.package, self.die, self.core)


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node: its CPUs (possibly none), memory and distances."""

    id: int
    cpus: frozenset[int]  # online CPUs of the node
    memory: int  # MemTotal in bytes (0 for CPU-only nodes without memory)
    tier: MemoryTier
    tier_source: str  # how the tier was decided: "cpu", "hmat", "kernel", "heuristic" or "config"
    distances: Mapping[int, int]  # node id -> distance (self included, usually 10)
    hugepages: Mapping[int, int] = field(default_factory=dict)  # page size kB -> total pages
    # In `has_normal_memory`: the kernel can put its own allocations here. Movable-only memory
    # (PMEM onlined as ZONE_MOVABLE) cannot hold them, so a container needs normal memory beside it.
    normal: bool = True

    def distance(self, other: int) -> int:
        return self.distances[other]


@dataclass(frozen=True)
class Machine:
    """Online CPUs, NUMA nodes and the CPU sets the kernel sets aside."""

    cpus: Mapping[int, Cpu]
    nodes: Mapping[int, NumaNode]
    isolated: frozenset[int] = frozenset()  # online CPUs isolated from the scheduler (isolcpus)
    offline: frozenset[int] = frozenset()  # present but offline CPUs (not in `cpus`)
    warnings: tuple[str, ...] = ()  # what could not be read, each naming the file
    core_kinds_from: str = ""  # the sysfs source of the core kinds, "" when not hybrid

    @cached_property
    def efficiency_cpus(self) -> frozenset[int]:
        """Online CPUs of efficiency cores (empty unless the machine is hybrid)."""
        return frozenset(c.id for c in self.cpus.values() if c.kind is CoreKind.EFFICIENCY)

    @cached_property
    def performance_cpus(self) -> frozenset[int]:
        return self.all_cpus - self.efficiency_cpus

    @cached_property
    def all_cpus(self) -> frozenset[int]:
        return frozenset(self.cpus)

    @cached_property
    def packages(self) -> tuple[int, ...]:
        return tuple(sorted({c.package for c in self.cpus.values()}))

    @cached_property
    def cores(self) -> tuple[frozenset[int], ...]:
        """Physical cores as sets of thread ids, ordered by their lowest CPU id."""
        groups: dict[tuple[int, int, int], set[int]] = {}
        for c in self.cpus.values():
            groups.setdefault(c.core_key, set()).add(c.id)
        return tuple(sorted((frozenset(g) for g in groups.values()), key=min))

    @cached_property
    def threads_per_core(self) -> int:
        return max((len(c) for c in self.cores), default=1)

    @cached_property
    def most_node_cpus(self) -> int:
        """The most online CPUs one NUMA node has."""
        per_node: dict[int, int] = {}
        for c in self.cpus.values():
            per_node[c.node] = per_node.get(c.node, 0) + 1
        return max(per_node.values())

    @cached_property
    def most_threads(self) -> int:
        """The most hardware threads one CPU's core has (its `threads`)."""
        return max(len(c.threads) for c in self.cpus.values())

    @cached_property
    def cpu_nodes(self) -> tuple[int, ...]:
        """Ids of NUMA nodes that have online CPUs."""
        return tuple(sorted(n.id for n in self.nodes.values() if n.cpus))

    @cached_property
    def memory_tiers(self) -> frozenset[MemoryTier]:
        """Tiers some NUMA node has memory in."""
        return tier_set(n.tier for n in self.nodes.values() if n.memory > 0)

    @cached_property
    def memory_only_nodes(self) -> tuple[int, ...]:
        """Ids of NUMA nodes with memory but no online CPU (PMEM, HBM, CXL, device memory)."""
        return tuple(sorted(n.id for n in self.nodes.values() if not n.cpus and n.memory > 0))

    def distance(self, a: int, b: int) -> int:
        return self.nodes[a].distances[b]
