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

`ANNOTATIONS` is the one list of keys the policy understands (adding a key is adding an entry);
`UNSUPPORTED` names keys of the predecessor projects' features this plugin does not have. Any other
key in the two domains is unknown: `key_problems` says which key it probably meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
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
class ScopedAnnotation:
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

# Keys of nri-plugins (topology-aware) and cri-resource-manager features this plugin does not have.
UNSUPPORTED: frozenset[str] = frozenset(
    {
        "allow.topologyhints",
        "blockioclass",
        "cpu-class",
        "deny.topologyhints",
        "irq-affinity",
        "pick-resources-by-hints",
        "rdtclass",
        "scheduling-class",
        "test.topologyhints",
        "toptierlimit",
        "unlimited-burstable",
    }
)

SHOWN_CHARS = 64  # of a value or key quoted in a message or log line


def shown(value: object) -> str:
    """A value as messages quote it: repr, cut to SHOWN_CHARS characters with its full size."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= SHOWN_CHARS:
        return repr(text) if isinstance(value, str) else text
    size = len(text.encode("utf-8", "replace"))
    return f"{text[:SHOWN_CHARS]!r}…({size} bytes)"


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


def in_domains(key: str) -> bool:
    """Whether a key is in one of the policy domains."""
    return DOMAIN in key or ALIAS_DOMAIN in key


def relevant(annotations: Mapping[str, str]) -> bool:
    """Whether any key is in one of the policy domains (else every lookup finds nothing)."""
    return bool(annotations) and any(in_domains(key) for key in annotations)


def lookup(
    name: str,
    container: str,
    pod_annotations: Mapping[str, str],
    container_annotations: Mapping[str, str] | None = None,
) -> ScopedAnnotation | None:
    """The annotation `name` that applies to `container`, or None when none is set."""
    if name not in SPECS:
        raise KeyError(f"unknown annotation {name!r}")
    sources = (container_annotations or {}, pod_annotations)
    for key, scope in _candidates(name, container):
        for source in sources:
            value = source.get(key)
            if value is not None:
                return ScopedAnnotation(key, value, scope)
    return None


_SUGGESTED = 32  # keys of one pod that get a suggestion (thousands of keys stay cheap)


@dataclass(frozen=True, slots=True)
class KeyProblem:
    """A key in the policy domains that the policy does not act on."""

    key: str
    kind: str  # "unknown" or "unsupported" (metric label)
    message: str


def _name_and_scope(key: str) -> tuple[str, str, bool] | None:
    """(base name, domain, prefixed) of a key in one of the domains, None when in neither or
    when its scope suffix is malformed."""
    for domain in DOMAINS:
        if key.startswith(f"{domain}/"):
            return key.removeprefix(f"{domain}/"), domain, True
        marker = f".{domain}"
        if marker in key:
            name, _, rest = key.partition(marker)
            if rest in ("", "/pod") or (rest.startswith("/container.") and len(rest) > 11):
                return name, domain, False
            return None
    return None


def _known(name: str, prefixed: bool) -> bool:
    spec = SPECS.get(name)
    return spec is not None and spec.prefixed == prefixed


def key_problems(keys: Iterable[str]) -> list[KeyProblem]:
    """The keys in our domains that the policy does not understand, each with what was meant."""
    out: list[KeyProblem] = []
    for key in keys:
        if not in_domains(key):
            continue
        parsed = _name_and_scope(key)
        if parsed is not None and _known(parsed[0], parsed[2]):
            continue
        name = parsed[0] if parsed is not None else key
        if parsed is not None and name in UNSUPPORTED:
            out.append(
                KeyProblem(key, "unsupported", f"{shown(key)}: {name} is not supported, ignored")
            )
            continue
        names = [spec.name for spec in ANNOTATIONS]
        close = []
        if len(out) < _SUGGESTED:
            close = difflib.get_close_matches(name[:SHOWN_CHARS], names, n=1, cutoff=0.6)
        if close:
            spec = SPECS[close[0]]
            same_form = parsed is not None and spec.prefixed == parsed[2]
            meant = key.replace(name, spec.name, 1) if same_form else spec.key
            hint = f"did you mean {shown(meant)}?"
        elif parsed is None:
            hint = "scopes are KEY.DOMAIN, KEY.DOMAIN/pod, KEY.DOMAIN/container.NAME"
        else:
            hint = "no similar key" if len(out) < _SUGGESTED else "not compared (too many keys)"
        out.append(KeyProblem(key, "unknown", f"{shown(key)}: unknown key, ignored; {hint}"))
    return out
