"""Read-only views of the policy state for the daemon, metrics, `simulate` and `explain`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_topology.policy.types import ColdStart, CpuKind, Decision, QoS, Update
from nri_topology.topology.model import MemoryTier


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one container holds."""

    container_id: str
    pod_id: str
    pod_name: str
    name: str
    namespace: str
    qos: QoS
    pool: str
    kind: CpuKind
    cpus: frozenset[int] | None  # the cpuset it is pinned to (None: pinning left alone)
    mems: frozenset[int] | None
    exclusive: frozenset[int]
    shared: int  # milli-CPU from shared (or reserved) CPUs
    memory: int  # bytes charged
    memory_nodes: frozenset[int]  # the zone charged
    memory_relaxed: bool
    hugepages: tuple[tuple[int, int, int], ...] = ()  # (node, page size kB, pages) booked


@dataclass(frozen=True, slots=True)
class TierMemory:
    """Memory of one tier in a pool; `assigned` splits zones over tiers by capacity."""

    capacity: int
    assigned: int
    free: int
    nodes: frozenset[int]


@dataclass(frozen=True, slots=True)
class PoolView:
    name: str
    kind: str
    depth: int
    parent: str | None
    cpus: frozenset[int]
    isolated: frozenset[int]
    reserved: frozenset[int]
    shared: frozenset[int]  # free sharable CPUs: the cpuset of shared containers placed here
    capacity_milli: int  # shared capacity with no exclusive grants
    assigned_milli: int  # shared milli-CPU granted in the pool's subtree
    free_milli: int  # still grantable from shared CPUs
    containers: int  # containers placed in this pool
    memory: Mapping[MemoryTier, TierMemory]
    nodes: frozenset[int]
    # page size kB -> (pages on the pool's nodes, pages of them no container has booked)
    hugepages: Mapping[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One NUMA node as the scheduler should see it: CPUs in milli-CPU, memory in bytes.

    `allocatable` leaves out the reserved CPUs (exactly, to the milli-CPU) and CPUs outside
    `available_resources`; `available` further leaves out exclusive CPUs and the shared milli-CPU
    granted on the node (a pool spanning nodes charges each node by its share of the pool's
    shared CPUs), and memory charged to zones holding the node (by the node's share of the zone);
    hugepages are booked per node (`hugepages`), so their available pages are exact.
    """

    node: int
    cpu_capacity: int
    cpu_allocatable: int
    cpu_available: int
    memory_capacity: int
    memory_available: int
    # page size kB -> (pages the node holds, pages no container has booked)
    hugepages: Mapping[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Changes:
    """Snapshot entries of the containers whose placement changed (`Policy.changes`)."""

    entries: Mapping[str, Mapping[str, Any] | None]  # None: the container holds nothing now
    complete: bool = False  # `entries` holds every container: any other is gone


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a restore did with each container the runtime reported."""

    adopted: tuple[str, ...] = ()
    replaced: Mapping[str, str] = field(default_factory=dict)  # id -> why it was re-placed
    failed: Mapping[str, str] = field(default_factory=dict)  # id -> why it could not be placed
    updates: tuple[Update, ...] = ()  # containers whose pinning must change
    decisions: Mapping[str, Decision] = field(default_factory=dict)  # of the re-placed ones
    # every container still in cold start, adopted or re-placed; the daemon keeps their timers
    cold_starts: Mapping[str, ColdStart] = field(default_factory=dict)
    # saved entries not believed (they contradict the runtime or each other): id -> why
    dropped: Mapping[str, str] = field(default_factory=dict)
