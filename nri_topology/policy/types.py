"""What goes into the policy and what comes out of it.

The policy knows nothing of NRI or protobuf: the daemon converts runtime messages into these
plain values and converts decisions back into adjustments and updates.

They are all values, never changed once made. Those made for every container or decision
(`Resources`, `PodInfo`, `ContainerInfo`, `Request`, `Decision`, `PoolScore`) are not frozen,
since a frozen dataclass pays a call per field at every construction; they hash as the frozen
ones do (`unsafe_hash`), and nothing assigns to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from nri_topology.topology.model import MemoryTier


class QoS(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class CpuKind(StrEnum):
    """How a container's CPUs are granted."""

    RESERVED = "reserved"  # the reserved CPUs (system pods), accounted in milli-CPU
    SHARED = "shared"  # the pool's shared CPUs only
    EXCLUSIVE = "exclusive"  # whole CPUs of its own, no shared part
    MIXED = "mixed"  # whole CPUs of its own plus the pool's shared CPUs
    ISOLATED = "isolated"  # kernel-isolated CPUs of its own
    PRESERVE = "preserve"  # CPU pinning left as it is (annotation cpu.preserve)


# The kinds that hold whole CPUs of their own.
EXCLUSIVE_KINDS = frozenset({CpuKind.EXCLUSIVE, CpuKind.MIXED, CpuKind.ISOLATED})


class CpuPriority(StrEnum):
    """Which kind of core exclusive CPUs come from first on hybrid machines (annotation
    `prefer-cpu-priority`): high and normal prefer performance cores, low efficiency cores,
    none has no preference. Machines that are not hybrid have performance cores only."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"
    NONE = "none"


@dataclass(slots=True, unsafe_hash=True)  # a value: see the module docstring
class Resources:
    """The Linux resources the runtime reports for a container (None = not set)."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory_limit: int | None = None
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    # hugetlb limits: (page size kB, bytes), as the runtime reports them (0 = none of that size)
    hugepages: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True, unsafe_hash=True)  # a value: see the module docstring
class PodInfo:
    id: str
    name: str
    namespace: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""  # QoS class is read from it (besteffort / burstable / else guaranteed)
    # the pod's resources as the runtime reports them with the sandbox (KEP-2837 pod-level ones,
    # else the sum of its containers'); None when it reports none (`podlevel`)
    resources: Resources | None = None


class HintSource(StrEnum):
    """Where a topology hint comes from (the values the `topologyhints` annotation names)."""

    DEVICES = "devices"  # the container's Linux devices (major:minor) and VFIO groups
    MOUNTS = "mounts"  # device nodes among the container's mounts
    POD_RESOURCES = "pod-resources"  # devices the kubelet's device plugins allocated


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """The locality of one device a container uses: its NUMA nodes and local CPUs.

    Found by the daemon (sysfs, the kubelet); the policy only reads it. Either set may be empty:
    a device without a NUMA node still has local CPUs, the kubelet reports only nodes.
    """

    source: HintSource
    provider: str  # what it describes: a device path, a PCI address, a resource name
    nodes: frozenset[int] = frozenset()
    cpus: frozenset[int] = frozenset()


@dataclass(slots=True, unsafe_hash=True)  # a value: see the module docstring
class ContainerInfo:
    id: str
    pod_id: str
    name: str
    resources: Resources = field(default_factory=Resources)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    oom_score_adj: int | None = None
    created_at: int = 0  # nanoseconds since the epoch, as the runtime reports it
    hints: tuple[TopologyHint, ...] = ()  # locality of the devices it uses (all sources)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a container runs. `None` fields are left untouched."""

    cpus: frozenset[int] | None
    mems: frozenset[int] | None
    cpu_shares: int | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """A changed placement of another, already running container."""

    container_id: str
    placement: Placement


class Outcome(StrEnum):
    CHOSEN = "chosen"
    UNFIT = "does not fit"
    LOST = "lost"
    FAILED = "grant failed"


class Verdict(NamedTuple):
    """How a pool fared in a decision, as data: callers read the winner and the criterion a
    losing pool lost on rather than parsing the rendered line (a tuple: one is made per pool per
    decision)."""

    outcome: Outcome
    detail: str = ""  # why it does not fit or why the grant failed
    winner: str = ""  # LOST: the chosen pool
    criterion: str = ""  # LOST: the sort-key criterion that decided

    def __str__(self) -> str:
        if self.outcome is Outcome.CHOSEN:
            return "chosen"
        if self.outcome is Outcome.LOST:
            return f"lost to {self.winner} on {self.criterion}"
        return f"{self.outcome.value}: {self.detail}"


CHOSEN = Verdict(Outcome.CHOSEN)


@dataclass(slots=True, unsafe_hash=True)  # a value: see the module docstring
class PoolScore:
    """One line of a decision's trace: a pool, its sort key and why it lost (or won)."""

    pool: str
    key: tuple[object, ...]
    result: Verdict

    @property
    def verdict(self) -> str:
        """The rendered line: "chosen", "does not fit: …", "lost to <pool> on <criterion>",
        "grant failed: …"."""
        return str(self.result)


@dataclass(frozen=True, slots=True)
class ColdStart:
    """Memory placement changes later: after `delay_ns`, widen the mems to `then_mems`."""

    delay_ns: int
    then_mems: frozenset[int]


@dataclass(slots=True, unsafe_hash=True)  # a value: see the module docstring
class Decision:
    container_id: str
    pool: str
    kind: CpuKind
    placement: Placement
    exclusive: frozenset[int] = frozenset()  # CPUs granted to this container alone
    memory_tiers: frozenset[MemoryTier] = frozenset()
    updates: tuple[Update, ...] = ()  # other containers whose cpuset or memset actually changed
    reason: str = ""  # one sentence: why this pool and this kind
    trace: tuple[PoolScore, ...] = ()
    memory_relaxed: bool = False  # memory widened beyond the pool because it ran out
    cold_start: ColdStart | None = None
    warnings: tuple[AnnotationWarning, ...] = ()  # annotations ignored or cut back
    degraded: tuple[Degradation, ...] = ()  # what the container got less of than it asked for
    moved: tuple[str, ...] = ()  # shared containers moved to make room (their updates included)
    hints_missed: str = ""  # why its CPUs are not all on its devices' NUMA nodes ("": they are)
    hugepages: tuple[tuple[int, int, int], ...] = ()  # (node, page size kB, pages) booked


class Degradation(StrEnum):
    """How a placement falls short of what the container asked for (it runs all the same)."""

    SHARED_CPUS = "shared-cpus"  # exclusive CPUs asked for, shared CPUs given
    RESERVED_CPUS = "reserved-cpus"  # no shared CPU left anywhere: the reserved CPUs are shared
    MEMORY_TIER = "memory-tier"  # memory widened into a tier the container did not ask for
    ISOLATED_MIXED = "isolated-cpus-mixed"  # exclusive CPUs partly kernel-isolated ones
    MEMORY_CHARGE = "memory-charge"  # less memory charged than asked: the rest fits nowhere
    SHARED_OVERCOMMIT = "shared-overcommit"  # less shared CPU charged than asked: no pool holds it
    HUGEPAGES_REMOTE = "hugepages-remote"  # hugepages on nodes beyond the pool's: its own were full
    HUGEPAGES_CHARGE = "hugepages-charge"  # fewer hugepages booked than its limit (adopted so)


class PolicyError(Exception):
    """A request that cannot be met or is invalid; the policy state is unchanged."""


class AnnotationError(PolicyError):
    """An annotation value refused: `key` is the annotation, `limit` the bound it broke ("" when
    the value is merely invalid). The message names the container, the key and the limit."""

    def __init__(self, message: str, *, key: str, limit: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.limit = limit


@dataclass(frozen=True, slots=True)
class AnnotationWarning:
    """An annotation the policy ignored or cut back rather than refuse; `kind` is its metric label
    ("untrusted": a privileged annotation from a namespace not trusted with it; "claim_cut":
    `noderesource.dev/resources` asked for more than the container's cgroup settings allow)."""

    kind: str
    message: str


def qualified_name(namespace: str, pod: str, container: str) -> str:
    """The name messages and logs give a container: namespace/pod/container."""
    return f"{namespace}/{pod}/{container}"


@dataclass(slots=True, unsafe_hash=True)  # a value: see the module docstring
class Request:
    """A container's classified resource request: what the engine places.

    Built by `request.build_request` from pod and container data, annotations and options.
    """

    container_id: str
    pod_id: str
    name: str
    pod_name: str
    namespace: str
    qos: QoS
    kind: CpuKind
    cpu_request: int  # milli-CPU
    cpu_limit: int | None  # milli-CPU, None = unlimited
    memory_request: int  # bytes (0 = none)
    memory_limit: int | None  # bytes, None = unlimited
    exclusive: int = 0  # whole CPUs of its own (EXCLUSIVE, MIXED, ISOLATED)
    shared: int = 0  # milli-CPU from the pool's shared CPUs (or the reserved CPUs for RESERVED)
    require_isolated: bool = False  # fail unless all exclusive CPUs are isolated
    single_numa: bool = False  # fail unless CPUs and memory fit one NUMA node
    cpu_priority: CpuPriority = CpuPriority.NONE  # core kind preferred for exclusive CPUs
    memory_tiers: frozenset[MemoryTier] = frozenset({MemoryTier.DRAM})
    memory_preserve: bool = False  # leave cpuset.mems untouched
    hide_hyperthreads: bool = False  # pin one thread per physical core
    cold_start_ns: int = 0  # > 0: start without DRAM, add it after this long
    affinities: tuple[object, ...] = ()  # policy.intake.affinity.Affinity values
    labels: Mapping[str, str] = field(default_factory=dict)
    created_at: int = 0
    pod_labels: Mapping[str, str] = field(default_factory=dict)  # affinity keys pod/labels/<k>
    hints: tuple[TopologyHint, ...] = ()  # the hints that apply (sources not turned off)
    hint_nodes: frozenset[int] = frozenset()  # NUMA nodes of the hints, CPUs resolved to nodes
    strict_hints: bool = False  # refuse pools outside the hinted nodes instead of preferring
    warnings: tuple[AnnotationWarning, ...] = ()  # annotations ignored or cut back
    hugepages: tuple[tuple[int, int], ...] = ()  # (page size kB, bytes) asked, sizes ascending
    kubelet_cpus: frozenset[int] | None = None  # PRESERVE: the cpuset the kubelet pinned it to
    # The container data it was built from, as the policy records it (`Policy.container`); not
    # part of the request's value.
    origin: ContainerInfo | None = field(default=None, compare=False, repr=False)

    @property
    def who(self) -> str:
        """The container's name in messages (`qualified_name`)."""
        return qualified_name(self.namespace, self.pod_name, self.name)
