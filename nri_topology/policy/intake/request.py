"""From a pod and a container to a classified `Request`: QoS, amounts, CPU kind, memory, affinities.

Amounts. The pod annotation `noderesource.dev/resources` (JSON, written by a resource-annotator
webhook) gives the exact requests and limits; a request left out there defaults to the limit, as
the API server does. Pod authors can write it too, so no amount may exceed what the container's
cgroup settings allow (`_cgroup_bounds`); a larger one is cut back with a warning. Without it
(or for a container it does not list, or on resize, where the caller passes the new
`resources`) they are estimated from the Linux resources:
CPU request = ceil(shares * 1000 / 1024) with shares == 2 meaning 0, CPU limit from quota/period,
memory limit as given; Guaranteed containers get request = limit. For Burstable containers the
memory request is estimated from `oom_score_adj` by inverting the kubelet formula
`adj = 1000 - 1000 * request / capacity` (capacity = the machine's memory), used only when below
the limit; adj 999 (a request under 0.2 % of memory, or none) counts as no request.
Hugepages are the cgroup's hugetlb limits (0 for a size means none), or the annotation's
`hugepages-<size>` amounts, each cut to the cgroup's limit of its size when there is one.

CPU classification, first match wins:
0. pinned by the kubelet's static CPU manager (`Options.kubelet_pinned`) → PRESERVE with
   `shared` = 0 and `kubelet_cpus`, the cpuset it keeps: the kubelet's CPUs, outside those the
   policy grants from.
1. `cpu.preserve` → PRESERVE (pinning untouched; `shared` = request).
2. `prefer-reserved-cpus: true` → RESERVED; a namespace matching `Options.reserved_namespaces`
   (globs) → RESERVED unless `prefer-reserved-cpus` is annotated at all (`false` opts out).
   RESERVED carries `shared` = the request in milli-CPU exactly.
3. BestEffort → SHARED (0); Burstable → SHARED (request).
4. Guaranteed with request R = 1000·n + f:
   - n == 0 → SHARED (f).
   - n == 1 → SHARED (R) if shared CPUs are preferred (annotation, else option), else 1 exclusive
     CPU and f shared: EXCLUSIVE, MIXED (f > 0), or ISOLATED when isolated CPUs are preferred
     from either the annotation or `Options.prefer_isolated_cpus`.
   - n ≥ 2, f > 0 → SHARED (R) unless `prefer-shared-cpus: false` is annotated, then n exclusive
     plus f shared (MIXED, or ISOLATED as for n == 1).
   - n ≥ 2, f == 0 → SHARED (R) if shared CPUs are preferred, else n exclusive: EXCLUSIVE, or
     ISOLATED only when isolated CPUs are preferred by annotation (the option alone does not
     isolate multi-CPU containers, as kubelet-style pinning of large containers rarely wants it).
   ISOLATED means "prefer kernel-isolated CPUs for the exclusive part"; it is only chosen when the
   machine has isolated CPUs. `require-isolated-cpus` makes it strict (`require_isolated`); it
   fails here already when the machine has fewer isolated CPUs than the exclusive part. ISOLATED
   may carry a shared fraction like MIXED. `require-isolated-cpus` on a container without
   exclusive CPUs has nothing to require and is ignored.

Memory tiers come from `memory-type`, else `Options.default_memory_tiers` (plus PMEM when a cold
start is annotated), masked to the tiers the machine has memory in; when none remains the request
falls back to DRAM. A cold start > 0 removes DRAM from the tiers (the engine restores it later);
when no other tier remains the cold start is dropped, since there is nothing else to start on.

`prefer-cpu-priority` (high, normal, low, none; `default` or none given: Guaranteed high,
Burstable normal, BestEffort low) sets `cpu_priority`, the core kind exclusive CPUs come from
first on hybrid machines.

`numa-policy` (`single-numa-node` or `best-effort`, else the `single_numa_node` option) sets
`single_numa`: the engine then refuses the container rather than span NUMA nodes.

Every annotation is validated; an invalid value raises `AnnotationError` naming the container,
the annotation key, the value (shortened) and what is accepted, or the limit it broke
(`Options.annotation_limits`, `bounded`). The privileged annotations (`prefer-reserved-cpus`,
`cpu.preserve`, `memory.preserve`, the isolated-CPU ones) count only in the namespaces
`Options.trust` names; elsewhere a `true` is ignored with a warning on the request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from fnmatch import translate
from fractions import Fraction
from functools import lru_cache
from typing import Any

from nri_topology.policy.accounts import hugepages
from nri_topology.policy.intake import affinity
from nri_topology.policy.intake.annotations import (
    RESOURCES_KEY,
    Scope,
    ScopedAnnotation,
    lookup,
    relevant,
    shown,
)
from nri_topology.policy.intake.bounded import CACHE, Refused, load_json, load_yaml
from nri_topology.policy.options import Options
from nri_topology.policy.types import (
    AnnotationError,
    AnnotationWarning,
    ContainerInfo,
    CpuKind,
    CpuPriority,
    HintSource,
    PodInfo,
    PolicyError,
    QoS,
    Request,
    Resources,
    TopologyHint,
    qualified_name,
)
from nri_topology.quantity import (
    MAX_QUANTITY_CHARS,
    QUANTITY_HELP,
    QuantityError,
    cpu_milli,
    memory_bytes,
)
from nri_topology.topology.model import Machine, MemoryTier, tier_set

# ---------------------------------------------------------------------------------------------
# Go values: booleans (strconv.ParseBool) and durations (time.ParseDuration)

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
BOOL_HELP = "true or false (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"

_UNITS_NS: Mapping[str, Fraction] = {
    "ns": Fraction(1),
    "us": Fraction(10**3),
    "µs": Fraction(10**3),
    "μs": Fraction(10**3),
    "ms": Fraction(10**6),
    "s": Fraction(10**9),
    "m": Fraction(60 * 10**9),
    "h": Fraction(3600 * 10**9),
}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
MAX_COLD_START_NS = 3600 * 10**9
MAX_DURATION_CHARS = 64


def parse_bool(text: str) -> bool | None:
    """Go's ParseBool: the value, or None when the text is not a boolean."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def parse_duration(text: str) -> int | None:
    """A Go duration ("1m30s", "1.5h", "0") in nanoseconds, or None when it is not one (also
    beyond MAX_DURATION_CHARS: no real duration is that long, and its digits would cost)."""
    s = text.strip()
    if len(s) > MAX_DURATION_CHARS:
        return None
    sign = -1 if s.startswith("-") else 1
    if s[:1] in ("+", "-"):
        s = s[1:]
    if s == "0":
        return 0
    pos, total = 0, Fraction(0)
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            return None
        total += Fraction(m.group(1)) * _UNITS_NS[m.group(2)]
        pos = m.end()
    if pos == 0:
        return None
    return sign * int(total)


# ---------------------------------------------------------------------------------------------
# Request building


def qos_of(pod: PodInfo) -> QoS:
    """QoS class from the pod's cgroup parent, as kubelet names its QoS cgroups."""
    parent = pod.cgroup_parent.lower()
    if "besteffort" in parent:
        return QoS.BEST_EFFORT
    if "burstable" in parent:
        return QoS.BURSTABLE
    return QoS.GUARANTEED


MIN_SHARES = 2
MAX_SHARES = 262144  # the kubelet's cap: shares say nothing about requests beyond 256 CPUs


def milli_to_shares(milli: int) -> int:
    """CPU shares for a milli-CPU request, as kubelet computes them (clamped to 2..262144)."""
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


def shares_to_milli(shares: int | None) -> int:
    """CPU request from cgroup shares; 2 (the minimum) means no request.

    Rounds up: the exact inverse of the kubelet's floor(milli * 1024 / 1000), so a request read
    back from shares we set ourselves stays the same across restarts (rounding to nearest drifts
    25m -> 24m -> 23m ...).
    """
    if not shares or shares <= 2:
        return 0
    return -(-shares * 1000 // 1024)


def _invalid(w: str, found: ScopedAnnotation, accepted: str) -> PolicyError:
    return AnnotationError(
        f"{w}: annotation {found.key}: invalid value {shown(found.value)}; {accepted}",
        key=found.key,
    )


def check_size(w: str, key: str, value: str, limit: int) -> None:
    """Refuse a value over `limit` bytes before anything reads it."""
    if len(value) * 4 <= limit:  # at most 4 bytes a character: cannot be over
        return
    size = len(value.encode("utf-8", "replace"))
    if size > limit:
        raise AnnotationError(
            f"{w}: annotation {key}: value {shown(value)} is over the limit of {limit} bytes "
            "(policy.annotation_limits.max_value_bytes)",
            key=key,
            limit="size",
        )


def _refused(w: str, key: str, e: Refused, value: str) -> AnnotationError:
    limit = f" (limit: {e.limit})" if e.limit else ""
    return AnnotationError(
        f"{w}: annotation {key}: {e}{limit}; value {shown(value)}", key=key, limit=e.limit
    )


@lru_cache(maxsize=16)
def _globs(globs: tuple[str, ...]) -> Callable[[str], object]:
    """A match of a namespace against any of the globs (case-sensitive fnmatch) as one regex:
    the options hold a few glob lists, asked about for every container."""
    if not globs:
        return lambda namespace: None
    return re.compile("|".join(f"(?:{translate(glob)})" for glob in globs)).match


def in_namespaces(namespace: str, globs: tuple[str, ...]) -> bool:
    """Whether `namespace` matches one of the `globs`."""
    return _globs(globs)(namespace) is not None


class _Annotations:
    """Effective-annotation reads for one container, each value size-checked and validated;
    what was ignored or cut back is collected in `warnings`. Without a key in the policy domains
    (most pods) every read is None at once."""

    def __init__(self, pod: PodInfo, container: ContainerInfo, options: Options) -> None:
        self.pod = pod
        self.container = container
        self.who = qualified_name(pod.namespace, pod.name, container.name)
        self.any = relevant(pod.annotations) or relevant(container.annotations)
        self.max_bytes = options.annotation_limits.max_value_bytes
        self.warnings: list[AnnotationWarning] = []

    def find(self, name: str) -> ScopedAnnotation | None:
        if not self.any:
            return None
        found = lookup(name, self.container.name, self.pod.annotations, self.container.annotations)
        if found is not None:
            check_size(self.who, found.key, found.value, self.max_bytes)
        return found

    def privileged(self, name: str, trusted: tuple[str, ...]) -> tuple[bool, Scope] | None:
        """A boolean annotation that only trusted namespaces may set to true; an untrusted true
        is ignored (as if not annotated) with a warning."""
        if not self.any:
            return None
        value = self.boolean(name)
        if value is None or not value[0] or in_namespaces(self.pod.namespace, trusted):
            return value
        self.warnings.append(
            AnnotationWarning(
                "untrusted",
                f"{name}: true ignored, namespace {self.pod.namespace!r} is not trusted with it "
                "(policy.trusted_namespaces)",
            )
        )
        return None

    def boolean(self, name: str) -> tuple[bool, Scope] | None:
        if not self.any:
            return None
        found = self.find(name)
        if found is None:
            return None
        value = parse_bool(found.value.strip())
        if value is None:
            raise _invalid(self.who, found, f"expected {BOOL_HELP}")
        return value, found.scope


_TIER_NAMES = {t.value: frozenset({t}) for t in MemoryTier} | {"mixed": frozenset(MemoryTier)}
_TIER_HELP = "expected a comma list of dram, pmem, hbm, cxl or mixed"
_DRAM = tier_set({MemoryTier.DRAM})  # where memory goes when no tier asked for is on the machine


def _memory_tiers(a: _Annotations) -> frozenset[MemoryTier] | None:
    found = a.find("memory-type")
    if found is None:
        return None
    tiers: set[MemoryTier] = set()
    for part in found.value.split(","):
        tier = _TIER_NAMES.get(part.strip().lower())
        if tier is None:
            raise _invalid(a.who, found, _TIER_HELP)
        tiers |= tier
    return frozenset(tiers)


_COLD_START_HELP = "expected YAML `duration: <Go duration>` from 0 to 1h, e.g. `duration: 60s`"


def _cold_start_value(text: str) -> int | None:
    """Nanoseconds of a cold-start annotation value, None when invalid (Refused when refused)."""
    data = load_yaml(text)
    if not isinstance(data, dict) or set(data) != {"duration"}:
        return None
    raw = data["duration"]
    ns = parse_duration(raw) if isinstance(raw, str) else (0 if raw == 0 else None)
    if ns is None or not 0 <= ns <= MAX_COLD_START_NS:
        return None
    return ns


def _cold_start_ns(a: _Annotations) -> int:
    found = a.find("cold-start")
    if found is None:
        return 0
    try:
        ns = CACHE.get(
            ("cold-start", found.value), len(found.value), lambda: _cold_start_value(found.value)
        )
    except Refused as e:
        if e.limit:
            raise _refused(a.who, found.key, e, found.value) from None
        ns = None
    if ns is None:
        raise _invalid(a.who, found, _COLD_START_HELP)
    return ns


def _from_annotation(
    pod: PodInfo, container: ContainerInfo, max_bytes: int
) -> dict[str, Any] | None:
    """The container's entry in the `noderesource.dev/resources` annotation, if any."""
    text = pod.annotations.get(RESOURCES_KEY)
    if text is None:
        return None
    w = qualified_name(pod.namespace, pod.name, container.name)
    check_size(w, RESOURCES_KEY, text, max_bytes)
    accepted = (
        'expected JSON {"containers": {NAME: {"requests": {"cpu": Q, "memory": Q}, '
        '"limits": {...}}}, "initContainers": {...}}'
    )
    try:
        data = load_json(text)
    except Refused as e:
        raise _refused(w, RESOURCES_KEY, e, text) from None
    if not isinstance(data, dict):
        raise AnnotationError(f"{w}: annotation {RESOURCES_KEY}: {accepted}", key=RESOURCES_KEY)
    for section in ("containers", "initContainers"):
        entries = data.get(section) or {}
        if not isinstance(entries, dict):
            raise AnnotationError(
                f"{w}: annotation {RESOURCES_KEY}: {section}: {accepted}", key=RESOURCES_KEY
            )
        entry = entries.get(container.name)
        if entry is not None:
            if not isinstance(entry, dict):
                raise AnnotationError(
                    f"{w}: annotation {RESOURCES_KEY}: {section}.{container.name}: {accepted}",
                    key=RESOURCES_KEY,
                )
            return entry
    return None


_AMOUNTS = ("cpu", "memory")


def _exact_amounts(w: str, entry: Mapping[str, Any]) -> tuple[int, int | None, int, int | None]:
    """(cpu request, cpu limit, memory request, memory limit) from an annotation entry."""
    parsed: dict[tuple[str, str], int] = {}
    for part in ("requests", "limits"):
        section = entry.get(part) or {}
        if not isinstance(section, dict):
            raise AnnotationError(
                f"{w}: annotation {RESOURCES_KEY}: {part}: expected a mapping", key=RESOURCES_KEY
            )
        for res in _AMOUNTS:
            if res not in section:
                continue
            raw = section[res]
            try:
                if not isinstance(raw, str | int | float) or isinstance(raw, bool):
                    raise QuantityError(f"{shown(raw)} is not a string or a number")
                parse = cpu_milli if res == "cpu" else memory_bytes
                parsed[part, res] = parse(raw)
            except QuantityError as e:
                limit = "number" if len(str(raw)) > MAX_QUANTITY_CHARS else ""
                raise AnnotationError(
                    f"{w}: annotation {RESOURCES_KEY}: {part}.{res}: {e}"
                    + (f" (limit: {limit})" if limit else f"; expected {QUANTITY_HELP}"),
                    key=RESOURCES_KEY,
                    limit=limit,
                ) from None
    cpu_limit = parsed.get(("limits", "cpu"))
    mem_limit = parsed.get(("limits", "memory"))
    cpu_req = parsed.get(("requests", "cpu"), cpu_limit or 0)
    mem_req = parsed.get(("requests", "memory"), mem_limit or 0)
    return cpu_req, cpu_limit, mem_req, mem_limit


def _hugepage_claims(w: str, entry: Mapping[str, Any]) -> dict[int, int]:
    """Bytes per page size (kB) an annotation entry states as `hugepages-<size>`: the limit,
    else the request (the API server requires them equal)."""
    out: dict[int, int] = {}
    for part in ("requests", "limits"):
        section = entry.get(part) or {}
        if not isinstance(section, dict):
            continue  # `_exact_amounts` refused it already
        for res, raw in section.items():
            if not isinstance(res, str) or not res.startswith("hugepages-"):
                continue
            size = hugepages.page_size_kb(res)
            try:
                if size is None:
                    raise QuantityError(f"{shown(res)} names no page size")
                if not isinstance(raw, str | int | float) or isinstance(raw, bool):
                    raise QuantityError(f"{shown(raw)} is not a string or a number")
                out[size] = memory_bytes(raw)
            except QuantityError as e:
                raise AnnotationError(
                    f"{w}: annotation {RESOURCES_KEY}: {part}.{shown(res)}: {e}; "
                    f"expected {QUANTITY_HELP}",
                    key=RESOURCES_KEY,
                ) from None
    return out


def _hugepages(
    w: str, entry: Mapping[str, Any] | None, res: Resources
) -> tuple[hugepages.Want, list[str]]:
    """The hugepages a container asks for: the annotation's, each cut to the cgroup's limit of
    its size where the runtime reports one; else the cgroup's limits. The notes say what was
    cut."""
    cgroup = dict(res.hugepages)
    if entry is None:
        return hugepages.want(cgroup.items()), []
    claimed = _hugepage_claims(w, entry)
    cut: list[str] = []
    for size, amount in claimed.items():
        most = cgroup.get(size)
        if most is not None and amount > most:
            name = hugepages.resource_name(size)
            cut.append(f"{name} {amount} bytes cut to {most} bytes")
            claimed[size] = most
    for size, amount in cgroup.items():
        claimed.setdefault(size, amount)
    return hugepages.want(claimed.items()), cut


_Amounts = tuple[int, int | None, int, int | None]  # cpu request, cpu limit, memory req., limit


def _estimated_amounts(
    qos: QoS, res: Resources, oom_score_adj: int | None, machine: Machine
) -> _Amounts:
    """(cpu request, cpu limit, memory request, memory limit) estimated from Linux resources."""
    cpu_req = shares_to_milli(res.cpu_shares)
    mem_limit = _memory_limit(res)
    if qos is QoS.GUARANTEED:
        return cpu_req, cpu_req, mem_limit or 0, mem_limit
    cpu_limit = _quota_milli(res, bound=False)
    mem_req = 0
    if qos is QoS.BURSTABLE and oom_score_adj is not None and 2 < oom_score_adj < 999:
        estimate = _memory_of_adj(oom_score_adj, machine, bound=False)
        if mem_limit is None or estimate < mem_limit:
            mem_req = estimate
    return cpu_req, cpu_limit, mem_req, mem_limit


def _cgroup_bounds(
    qos: QoS, res: Resources, oom_score_adj: int | None, machine: Machine
) -> _Amounts | tuple[int | None, int | None, int | None, int | None]:
    """The most that each amount may be claimed as, from the settings the runtime made for the
    container's cgroup (None: not bounded by them).

    CPU request: the shares (the kubelet writes ceil-inverse-exact shares for the request), or the
    quota when shares are capped or unknown. CPU limit: the quota. Memory limit: the memory limit.
    Memory request: the memory limit, else for Burstable the oom_score_adj the kubelet derives from
    it. BestEffort containers have no requests, so they may claim none.
    """
    cpu_limit = _quota_milli(res, bound=True)
    mem_limit = _memory_limit(res)
    if qos is QoS.BEST_EFFORT:
        return 0, cpu_limit, 0, mem_limit
    cpu_req = cpu_limit
    if res.cpu_shares is not None and 0 < res.cpu_shares < MAX_SHARES:
        cpu_req = max(shares_to_milli(res.cpu_shares), 2)  # shares 2 stand for 0 to 2m
        if cpu_limit is not None:
            cpu_req = min(cpu_req, cpu_limit)
    mem_req = mem_limit
    adj = oom_score_adj
    if mem_req is None and qos is QoS.BURSTABLE and adj is not None and 3 < adj <= 999:
        mem_req = _memory_of_adj(adj, machine, bound=True)
    return cpu_req, cpu_limit, mem_req, mem_limit


def _quota_milli(res: Resources, *, bound: bool) -> int | None:
    """The CPU limit the quota stands for: rounded up as a bound, else to the nearest."""
    if not (res.cpu_quota and res.cpu_quota > 0 and res.cpu_period and res.cpu_period > 0):
        return None
    if bound:
        return -(-res.cpu_quota * 1000 // res.cpu_period)
    return round(res.cpu_quota * 1000 / res.cpu_period)


def _memory_limit(res: Resources) -> int | None:
    return res.memory_limit if res.memory_limit and res.memory_limit > 0 else None


def _memory_of_adj(adj: int, machine: Machine, *, bound: bool) -> int:
    """The memory request a Burstable container's oom_score_adj stands for: the kubelet sets
    adj = 1000 - floor(1000 * request / capacity), so the request is at most (1001 - adj)
    thousandths of the machine's memory (`bound`), about (1000 - adj) of them."""
    capacity = sum(n.memory for n in machine.nodes.values())
    return ((1001 if bound else 1000) - adj) * capacity // 1000


_AMOUNT_NAMES = ("cpu request", "cpu limit", "memory request", "memory limit")


def _within(
    claimed: _Amounts, allowed: tuple[int | None, int | None, int | None, int | None]
) -> tuple[_Amounts, list[str]]:
    """The claimed amounts cut back to what is allowed, and a note per amount cut."""
    out: list[int | None] = []
    cut: list[str] = []
    for name, want, most in zip(_AMOUNT_NAMES, claimed, allowed, strict=True):
        if want is not None and most is not None and want > most:
            unit = "m" if name.startswith("cpu") else " bytes"
            cut.append(f"{name} {want}{unit} cut to {most}{unit}")
            want = most
        out.append(want)
    cpu_req, cpu_limit, mem_req, mem_limit = out
    assert cpu_req is not None and mem_req is not None
    return (cpu_req, cpu_limit, mem_req, mem_limit), cut


def _isolation(a: _Annotations, trusted: tuple[str, ...]) -> tuple[bool, bool] | None:
    """(prefer isolated, strictly required) from the annotations, None when not annotated.

    The narrower scope wins; at equal scope require-isolated-cpus wins.
    """
    prefer = a.privileged("prefer-isolated-cpus", trusted)
    require = a.privileged("require-isolated-cpus", trusted)
    if require is not None and (prefer is None or require[1] <= prefer[1]):
        return require[0], require[0]
    if prefer is not None:
        return prefer[0], False
    return None


def _classify(
    a: _Annotations, qos: QoS, cpu_req: int, options: Options, machine: Machine
) -> tuple[CpuKind, int, int, bool]:
    """(kind, exclusive CPUs, shared milli-CPU, require isolated) for a container.

    Every CPU annotation is read (and so validated) before any rule applies, so an invalid
    value is an error whichever rule decides.
    """
    trust = options.trust
    preserve = a.privileged("cpu.preserve", trust.preserve)
    reserved = a.privileged("prefer-reserved-cpus", trust.reserved_cpus)
    shared_annotation = a.boolean("prefer-shared-cpus")
    isolation = _isolation(a, trust.isolated_cpus)
    if (a.pod.uid, a.container.name) in options.kubelet_pinned:
        return CpuKind.PRESERVE, 0, 0, False
    if preserve is not None and preserve[0]:
        return CpuKind.PRESERVE, 0, cpu_req, False
    if reserved is not None and reserved[0]:
        return CpuKind.RESERVED, 0, cpu_req, False
    if reserved is None and in_namespaces(a.pod.namespace, options.reserved_namespaces):
        return CpuKind.RESERVED, 0, cpu_req, False
    if qos is not QoS.GUARANTEED:
        return CpuKind.SHARED, 0, cpu_req if qos is QoS.BURSTABLE else 0, False

    prefer_shared = (
        shared_annotation[0] if shared_annotation is not None else options.prefer_shared_cpus
    )
    prefer_isolated, required = isolation or (options.prefer_isolated_cpus, False)
    cores, frac = divmod(cpu_req, 1000)

    if cores == 0:
        return CpuKind.SHARED, 0, cpu_req, False
    if cores == 1:
        if prefer_shared:
            return CpuKind.SHARED, 0, cpu_req, False
        isolate = prefer_isolated
    elif frac:
        if shared_annotation is None or shared_annotation[0]:
            return CpuKind.SHARED, 0, cpu_req, False
        isolate = prefer_isolated
    else:
        if prefer_shared:
            return CpuKind.SHARED, 0, cpu_req, False
        isolate = prefer_isolated and isolation is not None

    required = required and isolate
    if frac and options.full_pcpus_only and not required:
        # the kubelet gives a fractional request no exclusive CPUs under full_pcpus_only
        return CpuKind.SHARED, 0, cpu_req, False
    if required and len(machine.isolated) < cores:
        raise PolicyError(
            f"{a.who}: require-isolated-cpus asks for {cores} isolated CPUs but the machine has "
            f"{len(machine.isolated)}"
        )
    if isolate and machine.isolated:
        return CpuKind.ISOLATED, cores, frac, required
    return (CpuKind.MIXED if frac else CpuKind.EXCLUSIVE), cores, frac, False


_ALL_SOURCES = frozenset(HintSource)
_SOURCE_WORDS = {s.value: frozenset({s}) for s in HintSource} | {
    "all": _ALL_SOURCES,
    "none": frozenset(),
}
_HINTS_HELP = f"expected {BOOL_HELP}, or a comma list of devices, mounts, pod-resources, all, none"


def _hint_sources(a: _Annotations, options: Options) -> frozenset[HintSource]:
    """The hint sources that apply: all unless turned off by option or annotation."""
    found = a.find("topologyhints")
    if found is None:
        return _ALL_SOURCES if options.topology_hints else frozenset()
    flag = parse_bool(found.value.strip())
    if flag is not None:
        return _ALL_SOURCES if flag else frozenset()
    sources: set[HintSource] = set()
    for part in found.value.split(","):
        words = _SOURCE_WORDS.get(part.strip().lower())
        if words is None:
            raise _invalid(a.who, found, _HINTS_HELP)
        sources |= words
    return frozenset(sources)


def hint_sources(pod: PodInfo, container: ContainerInfo, options: Options) -> frozenset[HintSource]:
    """Which hint sources the daemon needs to look at for a container (invalid values: none,
    since `build_request` refuses the container with the message anyway)."""
    try:
        return _hint_sources(_Annotations(pod, container, options), options)
    except PolicyError:
        return frozenset()


_NO_NODES: frozenset[int] = frozenset()  # kept by most requests: one object, not one each


def hint_nodes(hints: tuple[TopologyHint, ...], machine: Machine) -> frozenset[int]:
    """NUMA nodes of the hints; a hint with CPUs but no nodes counts the nodes of its CPUs."""
    if not hints:
        return _NO_NODES
    nodes: set[int] = set()
    for h in hints:
        nodes |= h.nodes
        if not h.nodes:
            nodes |= {machine.cpus[c].node for c in h.cpus if c in machine.cpus}
    return frozenset(n for n in nodes if n in machine.nodes) or _NO_NODES


_NUMA_POLICIES = {"single-numa-node": True, "best-effort": False}


def _single_numa(a: _Annotations, options: Options) -> bool:
    """Whether the container must stay in one NUMA node: `numa-policy`, else the option."""
    found = a.find("numa-policy")
    if found is None:
        return options.single_numa_node
    value = _NUMA_POLICIES.get(found.value.strip().lower())
    if value is None:
        raise _invalid(a.who, found, "expected single-numa-node or best-effort")
    return value


_QOS_PRIORITY = {
    QoS.GUARANTEED: CpuPriority.HIGH,
    QoS.BURSTABLE: CpuPriority.NORMAL,
    QoS.BEST_EFFORT: CpuPriority.LOW,
}
_PRIORITY_HELP = "expected high, normal, low, none or default"


def _cpu_priority(a: _Annotations, qos: QoS) -> CpuPriority:
    """`prefer-cpu-priority`, else (and for `default`) by QoS class."""
    found = a.find("prefer-cpu-priority")
    if found is None:
        return _QOS_PRIORITY[qos]
    value = found.value.strip().lower()
    if value == "default":
        return _QOS_PRIORITY[qos]
    try:
        return CpuPriority(value)
    except ValueError:
        raise _invalid(a.who, found, _PRIORITY_HELP) from None


def build_request(
    pod: PodInfo,
    container: ContainerInfo,
    options: Options,
    *,
    machine: Machine,
    resources: Resources | None = None,
    origin: ContainerInfo | None = None,
) -> Request:
    """Classify a container's resource request; `resources` overrides its own (resize).
    `origin`: the container data the policy records for it (default `container`)."""
    a = _Annotations(pod, container, options)
    w = a.who
    qos = qos_of(pod)
    limits = options.annotation_limits

    entry = _from_annotation(pod, container, limits.max_value_bytes) if resources is None else None
    if entry is not None:
        claimed = _exact_amounts(w, entry)
        allowed = _cgroup_bounds(qos, container.resources, container.oom_score_adj, machine)
        (cpu_req, cpu_limit, mem_req, mem_limit), cut = _within(claimed, allowed)
        huge, huge_cut = _hugepages(w, entry, container.resources)
        cut += huge_cut
        if cut:
            a.warnings.append(
                AnnotationWarning(
                    "claim_cut",
                    f"{RESOURCES_KEY}: {', '.join(cut)}: more than the container's cgroup "
                    "settings allow",
                )
            )
    else:
        cpu_req, cpu_limit, mem_req, mem_limit = _estimated_amounts(
            qos, resources or container.resources, container.oom_score_adj, machine
        )
        huge, _ = _hugepages(w, None, resources or container.resources)

    kind, exclusive, shared, require_isolated = _classify(a, qos, cpu_req, options, machine)

    preserve_mem = a.privileged("memory.preserve", options.trust.preserve)
    memory_preserve = preserve_mem is not None and preserve_mem[0]
    cold_start_ns = _cold_start_ns(a)
    asked = _memory_tiers(a)
    wanted = asked or options.default_memory_tiers
    if cold_start_ns and not asked:
        # A cold start means "start on PMEM, add DRAM later", whatever the default tiers are.
        wanted |= {MemoryTier.PMEM}
    tiers = tier_set(wanted & machine.memory_tiers or _DRAM)
    if memory_preserve:
        cold_start_ns = 0
    elif cold_start_ns:
        if tiers - {MemoryTier.DRAM}:
            tiers -= {MemoryTier.DRAM}
        else:
            cold_start_ns = 0

    hide = a.boolean("hide-hyperthreads")
    sources = _hint_sources(a, options)
    hints = tuple(h for h in container.hints if h.source in sources) if container.hints else ()
    strict = a.boolean("strict.topologyhints")
    single_numa = _single_numa(a, options)
    cpu_priority = _cpu_priority(a, qos)

    affinities: list[affinity.Affinity] = []
    for name, anti in (("affinity", False), ("anti-affinity", True)):
        found = a.find(name)
        if found is not None:
            affinities += affinity.parse(
                found.value,
                container=container.name,
                pod_id=pod.id,
                anti=anti,
                annotation=found.key,
                who=w,
                max_values=limits.max_affinity_values,
            )
            if len(affinities) > limits.max_affinity_rules:
                raise AnnotationError(
                    f"{w}: annotation {found.key}: {len(affinities)} affinity and anti-affinity "
                    f"rules apply to the container, the limit is {limits.max_affinity_rules} "
                    "(policy.annotation_limits.max_affinity_rules)",
                    key=found.key,
                    limit="rules",
                )
            globs = affinity.glob_patterns(affinities)
            if globs > limits.max_affinity_globs:
                raise AnnotationError(
                    f"{w}: annotation {found.key}: {globs} glob patterns with wildcards in the "
                    f"container's affinity rules, the limit is {limits.max_affinity_globs} "
                    "(policy.annotation_limits.max_affinity_globs)",
                    key=found.key,
                    limit="globs",
                )
    if not affinities:
        affinities += affinity.implicit(
            pod_id=pod.id,
            namespace=pod.namespace,
            colocate_pods=options.colocate_pods,
            colocate_namespaces=options.colocate_namespaces,
        )

    return Request(
        container_id=container.id,
        pod_id=pod.id,
        name=container.name,
        pod_name=pod.name,
        namespace=pod.namespace,
        qos=qos,
        kind=kind,
        cpu_request=cpu_req,
        cpu_limit=cpu_limit,
        memory_request=mem_req,
        memory_limit=mem_limit,
        exclusive=exclusive,
        shared=shared,
        require_isolated=require_isolated,
        single_numa=single_numa,
        cpu_priority=cpu_priority,
        memory_tiers=tiers,
        memory_preserve=memory_preserve,
        hide_hyperthreads=hide is not None and hide[0],
        cold_start_ns=cold_start_ns,
        affinities=tuple(affinities),
        labels=dict(container.labels),
        created_at=container.created_at,
        pod_labels=dict(pod.labels),
        hints=hints,
        hint_nodes=hint_nodes(hints, machine),
        strict_hints=strict[0] if strict is not None else options.strict_topology_hints,
        warnings=tuple(a.warnings),
        hugepages=huge,
        kubelet_cpus=options.kubelet_pinned.get((pod.uid, container.name)),
        origin=container if origin is None else origin,
    )
