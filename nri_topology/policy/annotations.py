"""Which annotation applies to a container, and the table of keys the policy understands.

Users steer placement with pod annotations in the `resource-policy.nri.io` domain. A per-container
key is looked up in three scopes, narrowest first, and the first one present wins:

1. `KEY.resource-policy.nri.io/container.NAME` — this container only,
2. `KEY.resource-policy.nri.io/pod` — every container of the pod,
3. `KEY.resource-policy.nri.io` — the same, unscoped.

Keys of the predecessor project's domain `cri-resource-manager.intel.com` are accepted as aliases
so that existing manifests keep working. Precedence, first match wins:
scope (container, pod, unscoped), then domain (primary before alias), then source (the
container's own annotations before the pod's). Scope goes first because a narrower scope is the
more specific statement of intent, whichever domain spells it.

The affinity keys are domain *prefixed* (`resource-policy.nri.io/affinity`) and unscoped: their
value itself maps container names to affinities.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

DOMAIN = "resource-policy.nri.io"
ALIAS_DOMAIN = "cri-resource-manager.intel.com"
DOMAINS = (DOMAIN, ALIAS_DOMAIN)

RESOURCES_KEY = "noderesource.dev/resources"


class Scope(IntEnum):
    """Where a found annotation applies; lower is narrower."""

    CONTAINER = 0
    POD = 1
    UNSCOPED = 2


@dataclass(frozen=True, slots=True)
class Found:
    """An annotation that applies: the exact key it was found under, its value and scope."""

    key: str
    value: str
    scope: Scope


@dataclass(frozen=True, slots=True)
class AnnotationSpec:
    """One supported annotation: its base name, accepted values and what it does."""

    name: str
    values: str
    meaning: str
    prefixed: bool = False  # DOMAIN/name (affinity keys) instead of name.DOMAIN

    @property
    def key(self) -> str:
        """The primary, unscoped spelling of the key."""
        return f"{DOMAIN}/{self.name}" if self.prefixed else f"{self.name}.{DOMAIN}"


_BOOL = "true or false (also 1, t, T, TRUE, True, 0, f, F, FALSE, False)"

ANNOTATIONS: tuple[AnnotationSpec, ...] = (
    AnnotationSpec(
        "prefer-isolated-cpus",
        _BOOL,
        "Prefer kernel-isolated CPUs for the exclusive CPUs; falls back to ordinary ones.",
    ),
    AnnotationSpec(
        "require-isolated-cpus",
        _BOOL,
        "Like prefer-isolated-cpus, but creation fails unless every exclusive CPU is isolated. "
        "At equal scope it wins over prefer-isolated-cpus.",
    ),
    AnnotationSpec(
        "prefer-shared-cpus",
        _BOOL,
        "true: no exclusive CPUs, only the pool's shared CPUs. false: opt in to exclusive CPUs, "
        "including exclusive plus shared for fractional requests of 2 CPUs or more.",
    ),
    AnnotationSpec(
        "prefer-reserved-cpus",
        _BOOL,
        "true: run on the reserved CPUs whatever the namespace or QoS class. false: opt out of "
        "the reserved CPUs in a reserved namespace such as kube-system.",
    ),
    AnnotationSpec(
        "hide-hyperthreads",
        _BOOL,
        "Pin only one hardware thread of each physical core of the granted CPUs.",
    ),
    AnnotationSpec(
        "memory-type",
        "comma list of dram, pmem, hbm, cxl; mixed = all (case-insensitive)",
        "Memory tiers to allocate from; tiers the machine lacks are dropped, DRAM if none remain.",
    ),
    AnnotationSpec(
        "cold-start",
        "YAML `duration: 60s` (Go duration, 0 to 1h; 0 = off)",
        "Start without DRAM and add DRAM after the duration (needs another tier to start on).",
    ),
    AnnotationSpec(
        "cpu.preserve",
        _BOOL,
        "Leave the container's CPU pinning as the runtime set it.",
    ),
    AnnotationSpec(
        "memory.preserve",
        _BOOL,
        "Leave the container's memory node pinning as the runtime set it.",
    ),
    AnnotationSpec(
        "topologyhints",
        f"{_BOOL}, or a comma list of devices, mounts, pod-resources, all, none",
        "Which device locality hints steer the pool choice (default: all sources the daemon "
        "has turned on); false or none turns them off for the container.",
    ),
    AnnotationSpec(
        "strict.topologyhints",
        _BOOL,
        "true: refuse the container rather than place it on CPUs outside its devices' NUMA "
        "nodes; false: prefer them only. Overrides the strict_topology_hints option.",
    ),
    AnnotationSpec(
        "affinity",
        "YAML map of container name to a list of affinities or of container names",
        "Pull the named containers' placements towards each other (weight +1 by default).",
        prefixed=True,
    ),
    AnnotationSpec(
        "anti-affinity",
        "same as affinity",
        "Push placements apart (weight -1 by default; a positive weight is negated).",
        prefixed=True,
    ),
    AnnotationSpec(
        "prefer-cpu-priority",
        "high, normal, low, none or default",
        "Which cores exclusive CPUs come from first on hybrid machines: high and normal prefer "
        "performance cores, low efficiency cores, none no preference; default (or no "
        "annotation): by QoS class, Guaranteed high, Burstable normal, BestEffort low.",
    ),
    AnnotationSpec(
        "numa-policy",
        "single-numa-node or best-effort",
        "single-numa-node: CPUs and memory of one NUMA node only; creation fails when no NUMA "
        "node can hold the container. best-effort: span nodes when needed (overrides the "
        "numa_policy option).",
    ),
)

SPECS: Mapping[str, AnnotationSpec] = {spec.name: spec for spec in ANNOTATIONS}


@lru_cache(maxsize=4096)
def _candidates(name: str, container: str) -> tuple[tuple[str, Scope], ...]:
    """The keys `name` may be spelled with for `container`, in precedence order."""
    if SPECS[name].prefixed:
        return tuple((f"{domain}/{name}", Scope.UNSCOPED) for domain in DOMAINS)
    return tuple(
        (f"{name}.{domain}{suffix}", scope)
        for scope, suffix in (
            (Scope.CONTAINER, f"/container.{container}"),
            (Scope.POD, "/pod"),
            (Scope.UNSCOPED, ""),
        )
        for domain in DOMAINS
    )


def relevant(annotations: Mapping[str, str]) -> bool:
    """Whether any key is in one of the policy domains (else every lookup finds nothing)."""
    return any(DOMAIN in key or ALIAS_DOMAIN in key for key in annotations)


def lookup(
    name: str,
    container: str,
    pod_annotations: Mapping[str, str],
    container_annotations: Mapping[str, str] | None = None,
) -> Found | None:
    """The annotation `name` that applies to `container`, or None when none is set."""
    if name not in SPECS:
        raise KeyError(f"unknown annotation {name!r}")
    sources = (container_annotations or {}, pod_annotations)
    for key, scope in _candidates(name, container):
        for source in sources:
            value = source.get(key)
            if value is not None:
                return Found(key, value, scope)
    return None
