"""Restore: take over the containers that already run, instead of re-placing them all.

Given what the runtime reports (each container's request and current cpuset and memset) and,
optionally, the policy's saved snapshot, every container is adopted verbatim when its placement
is consistent with the accounting; only the others are placed anew. Order is deterministic:

1. adoptions holding exclusive CPUs, then the other adoptions;
2. re-placements;

each in (QoS: Guaranteed, Burstable, BestEffort; larger CPU request first; older first; id)
order. A saved entry wins over what the runtime reports (it says which CPUs are exclusive and
which memory zone was charged); without one, an exclusive container's cpuset is its exclusive
set and a shared container belongs to the deepest pool that holds its cpuset. Mixed containers
(exclusive plus shared CPUs) cannot be told apart without a snapshot and are re-placed.

So a restart moves no exclusive CPU as long as the containers and the configuration are the same.
Updates are returned for every container whose reported pinning differs from the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nri_topology.policy import admission
from nri_topology.policy.engine import SNAPSHOT_VERSION, Engine
from nri_topology.policy.types import CpuKind, PolicyError, QoS, Request
from nri_topology.policy.views import RestoreReport
from nri_topology.topology import cpuset

_QOS_RANK = {QoS.GUARANTEED: 0, QoS.BURSTABLE: 1, QoS.BEST_EFFORT: 2}

# (requested kind, kind actually granted) pairs the engine produces when it falls back
_FALLBACKS = frozenset(
    {
        (CpuKind.RESERVED, CpuKind.SHARED),
        (CpuKind.ISOLATED, CpuKind.EXCLUSIVE),
        (CpuKind.ISOLATED, CpuKind.MIXED),
    }
)


@dataclass(frozen=True, slots=True)
class Found:
    """A running container as the runtime reports it."""

    request: Request
    cpus: frozenset[int] | None  # current cpuset (None: not pinned / unknown)
    mems: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class _Plan:
    found: Found
    pool: int
    exclusive: frozenset[int]
    isolated: bool
    zone: frozenset[int] | None


def order_key(req: Request) -> tuple[int, int, int, str]:
    """Restore order: QoS, then larger CPU request, then older, then id."""
    return (_QOS_RANK[req.qos], -req.cpu_request, req.created_at, req.container_id)


def saved_entries(saved: Mapping[str, Any] | None) -> tuple[dict[str, Mapping[str, Any]], str]:
    """The per-container entries of a snapshot, or none and why it was not usable."""
    if saved is None:
        return {}, "no saved state"
    if not isinstance(saved, Mapping) or saved.get("version") != SNAPSHOT_VERSION:
        version = saved.get("version") if isinstance(saved, Mapping) else None
        return {}, f"saved state version {version!r} is not {SNAPSHOT_VERSION}"
    containers = saved.get("containers")
    if not isinstance(containers, Mapping):
        return {}, "saved state has no containers map"
    return {str(k): v for k, v in containers.items() if isinstance(v, Mapping)}, ""


def _from_saved(engine: Engine, f: Found, entry: Mapping[str, Any]) -> _Plan:
    req = f.request
    try:
        pool = engine.by_name[str(entry["pool"])]
        kind = CpuKind(str(entry["kind"]))
        exclusive = cpuset.parse(str(entry["exclusive"]))
        isolated = bool(entry["isolated"])
        zone = cpuset.parse(str(entry["zone"]))
    except (KeyError, ValueError) as e:
        raise PolicyError(f"saved entry unusable: {e}") from None
    granted = admission.as_granted(req, kind, isolated) if kind != req.kind else None
    if granted is not None:
        f = Found(granted, f.cpus, f.mems)  # placed degraded
    elif kind != req.kind:
        if (req.kind, kind) not in _FALLBACKS or isolated:
            raise PolicyError(f"saved kind {kind} differs from the request's {req.kind}")
        if req.kind is CpuKind.RESERVED:  # it had spilled over to shared CPUs
            f = Found(dataclasses.replace(req, kind=CpuKind.SHARED), f.cpus, f.mems)
    return _Plan(f, pool, exclusive, isolated, zone or None)


def _deepest_holding(engine: Engine, cpus: frozenset[int]) -> int | None:
    best: int | None = None
    for p in engine.pools:
        if cpus <= p.cpus and (best is None or p.depth > engine.pools[best].depth):
            best = p.index
    return best


def _from_runtime(engine: Engine, f: Found) -> _Plan:
    req = f.request
    zone = f.mems if f.mems else None
    if req.kind in (CpuKind.RESERVED, CpuKind.PRESERVE):
        return _Plan(f, 0, frozenset(), False, zone)
    if not f.cpus:
        raise PolicyError("the runtime reports no cpuset")
    pool = _deepest_holding(engine, f.cpus)
    if pool is None:
        raise PolicyError(f"cpuset {cpuset.format(f.cpus)} is outside the available CPUs")
    if req.kind is CpuKind.SHARED:
        return _Plan(f, pool, frozenset(), False, zone)
    if req.kind is CpuKind.MIXED or req.shared:
        raise PolicyError("exclusive and shared CPUs cannot be told apart without saved state")
    isolated = f.cpus <= engine.isolated
    return _Plan(f, pool, f.cpus, isolated, zone)


def restore(
    engine: Engine, found: Sequence[Found], saved: Mapping[str, Any] | None
) -> RestoreReport:
    """Adopt or re-place every found container into an empty engine."""
    entries, no_saved = saved_entries(saved)
    plans: list[_Plan] = []
    again: list[Found] = []
    reasons: dict[str, str] = {}
    for f in sorted(found, key=lambda f: order_key(f.request)):
        cid = f.request.container_id
        try:
            entry = entries.get(cid)
            plans.append(_from_saved(engine, f, entry) if entry else _from_runtime(engine, f))
        except PolicyError as e:
            again.append(f)
            reasons[cid] = str(e) if entries or not no_saved else f"{no_saved}; {e}"
    adopted: list[str] = []
    plans.sort(key=lambda p: not p.exclusive)  # stable: exclusive holders first, order kept
    for plan in plans:
        f = plan.found
        try:
            g = engine.adopt(
                f.request, plan.pool, plan.exclusive, plan.isolated, plan.zone, f.cpus, f.mems
            )
        except PolicyError as e:
            again.append(f)
            reasons[f.request.container_id] = f"inconsistent: {e}"
            continue
        entry = entries.get(f.request.container_id)
        if g.cold_start is not None and (
            (entry is not None and not entry.get("cold_start", True))
            or (f.mems is not None and g.cold_start.then_mems <= f.mems)
        ):
            g.cold_start = None  # its cold start finished before the restart
        adopted.append(f.request.container_id)
    failed: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for f in sorted(again, key=lambda f: order_key(f.request)):
        cid = f.request.container_id
        try:
            engine.place(f.request)
        except PolicyError as e:
            failed[cid] = f"{reasons[cid]}; re-placing failed: {e}"
            continue
        replaced[cid] = reasons[cid]
    # Diff against what the containers run on now, not against intermediate decisions.
    for f in found:
        g = engine.grants.get(f.request.container_id)
        if g is not None:
            g.cpus = f.cpus if f.cpus is not None else frozenset()
            g.mems = f.mems if f.mems is not None else frozenset()
    updates = engine.refresh()
    decisions = {cid: engine.decision_of(cid) for cid in sorted(engine.grants)}
    return RestoreReport(
        adopted=tuple(adopted),
        replaced=replaced,
        failed=failed,
        updates=updates,
        decisions=decisions,
    )
