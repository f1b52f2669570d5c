"""Policy options: the validated, typed form of the policy part of the configuration.

`nri_topology.configured` builds it from a validated configuration; the policy only ever sees
this value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nri_topology.topology.model import MemoryTier


@dataclass(frozen=True, slots=True)
class CpuAmount:
    """A CPU amount given either as an explicit CPU list or as a quantity in milli-CPU."""

    cpus: frozenset[int] | None = None  # "cpuset:0-1" or a plain list
    exclude: frozenset[int] | None = None  # "exclude-cpuset:0-1"
    milli: int | None = None  # "750m" or "2"


@dataclass(frozen=True, slots=True)
class AnnotationLimits:
    """Bounds on what one pod's annotations may cost (docs/annotations.md, "Limits")."""

    max_value_bytes: int = 16384  # any annotation value the policy reads
    max_affinity_rules: int = 8  # affinity plus anti-affinity rules that apply to one container
    max_affinity_values: int = 16  # values (names or glob patterns) of one expression
    max_affinity_globs: int = 8  # glob patterns with wildcards in all rules of one container


@dataclass(frozen=True, slots=True)
class Trust:
    """Namespaces (globs) whose pods may use each privileged annotation; others are ignored."""

    reserved_cpus: tuple[str, ...] = ("kube-system",)  # prefer-reserved-cpus: true
    preserve: tuple[str, ...] = ("kube-system",)  # cpu.preserve, memory.preserve: true
    isolated_cpus: tuple[str, ...] = ("*",)  # prefer-/require-isolated-cpus: true


@dataclass(frozen=True, slots=True)
class Options:
    pin_cpu: bool = True
    pin_memory: bool = True
    prefer_isolated_cpus: bool = True
    prefer_shared_cpus: bool = False
    reserved_resources: CpuAmount = CpuAmount(milli=750)
    available_resources: CpuAmount | None = None
    reserved_namespaces: tuple[str, ...] = ("kube-system",)  # globs
    colocate_pods: bool = False
    colocate_namespaces: bool = False
    prefer_closest_numa: bool = True  # KEP-3545
    distribute_across_numa: bool = False  # KEP-2902
    distribute_min_group: int = 1  # KEP-2902 cpuGroupSize (>= threads per core if full_pcpus_only)
    full_pcpus_only: bool = False
    topology_hints: bool = True  # steer pool choice by the locality of the container's devices
    strict_topology_hints: bool = False  # refuse rather than place outside the hinted nodes
    single_numa_node: bool = False  # numa_policy: single-numa-node (refuse rather than span)
    # DRAM unless a pod asks for another tier: defaulting to PMEM too would pull every container
    # towards the few pools with PMEM nearby (on SNC machines, all of one socket).
    default_memory_tiers: frozenset[MemoryTier] = frozenset({MemoryTier.DRAM})
    # What to do with a container that does not fit as asked: "degrade" places it all the same
    # (shared instead of exclusive CPUs, another memory tier, the reserved CPUs), as the kubelet
    # admitted it; "refuse" fails its creation.
    on_unfit: str = "degrade"
    # The kubelet's strict-cpu-reservation: no container runs on reserved CPUs but those placed
    # there on purpose (reserved namespaces, prefer-reserved-cpus).
    strict_reserved_cpus: bool = False
    # Shared containers per pool: "spread" to the idlest pool, or "pack" into pools that already
    # host shared containers, leaving whole pools for exclusive grants. Spread by default: on the
    # churn trace of benchmarks/quality.py packing put fewer containers in one NUMA node.
    shared_placement: str = "spread"
    # Shared containers that may be moved to make room for one grant that does not fit otherwise.
    max_moves: int = 4
    annotation_limits: AnnotationLimits = AnnotationLimits()
    trust: Trust = Trust()
    # Memory another owner holds on a node (the kubelet's Memory Manager, `daemon.coexist`), left
    # out of what the node's memory and hugepages can grant: (node, bytes) and (node, page size
    # kB, pages).
    outside_memory: tuple[tuple[int, int], ...] = ()
    outside_hugepages: tuple[tuple[int, int, int], ...] = ()
    # The cpusets the kubelet's static CPU manager pins containers to, by (pod uid, container
    # name): those containers keep them (preserved, charged nothing: the kubelet's CPUs are
    # outside the available ones, `daemon.coexist`).
    kubelet_pinned: Mapping[tuple[str, str], frozenset[int]] = field(default_factory=dict)
