"""Restore: take over the containers that already run, instead of re-placing them all.

Given what the runtime reports (each container's request and current cpuset and memset) and,
optionally, the policy's saved snapshot, every container is adopted verbatim when its placement
is still valid: its exclusive CPUs are free and usable, its memory nodes usable, its accounting
fits. Only the others are placed anew. The pool tree may differ from the one the snapshot was
taken under (a configuration change can collapse or remove pools): a saved pool that is gone,
or no longer holds the container's CPUs, is replaced by the deepest pool that does, so a
container moves only when its own CPUs or memory nodes left the usable set.

Order is deterministic:

1. adoptions holding exclusive CPUs, then the other adoptions;
2. re-placements;

each in (QoS: Guaranteed, Burstable, BestEffort; larger CPU request first; older first; id)
order. A saved entry wins over what the runtime reports (it says which CPUs are exclusive, which
memory zone was charged, and how much: an over-committed or squeezed grant keeps its charge,
which adoption in this order, not the order of placement, could not work out again); without
one, an exclusive container's cpuset is its exclusive set, a shared container belongs to the
deepest pool that holds its cpuset, and a mixed container (exclusive plus shared CPUs) holds
exclusively the CPUs of its cpuset no other container runs on; when their number is not its
exclusive request, it is re-placed.

A cold start is the container's, not its placement's: a re-placed container whose cold start was
over is placed without one, and the report lists every container still in cold start so that the
daemon keeps (or, without saved state, starts) its timer.

Saved entries are believed only where they agree with the runtime (`believed`): an entry
whose exclusive CPUs the container does not run on, that claims CPUs another entry claims too,
names CPUs, memory nodes or a pool this machine cannot have, is dropped (the report says why)
and the container is taken as the runtime reports it. So a damaged or forged checkpoint, even
with a valid checksum, never moves an exclusive container whose cpuset is consistent.

The engine restored into comes from `new_engine`: a quantity reservation keeps the CPUs it held
(saved in the snapshot) while they remain usable and never takes CPUs a running exclusive
container holds unless nothing else is left, so a changed configuration does not pick a reserved
CPU from under a container it does not concern.

So a restart moves no exclusive CPU as long as the containers and the configuration are the same.
Updates are returned for every container whose reported pinning differs from the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nri_topology.policy.admission import parity
from nri_topology.policy.checkpoint.state import read_entry, saved_entries, saved_reserved
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.options import Options
from nri_topology.policy.pools import could_exist
from nri_topology.policy.types import ColdStart, CpuKind, PolicyError, QoS, Request
from nri_topology.policy.views import RestoreReport
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier

_MAX_TEXT = 1 << 16  # of a saved CPU or node list: far more than any machine's list takes

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
class _Believed:
    """A saved entry read once and checked against this machine (`believed`)."""

    pool: str
    kind: CpuKind
    exclusive: frozenset[int]
    isolated: bool
    zone: frozenset[int]
    cold_start: bool
    shared: int | None  # the charges saved (None: not saved)
    memory: int | None


@dataclass(frozen=True, slots=True)
class _Plan:
    found: Found
    pool: int
    exclusive: frozenset[int]
    isolated: bool
    zone: frozenset[int] | None
    charged: tuple[int | None, int | None] = (None, None)  # saved shared and memory charges


def order_key(req: Request) -> tuple[int, int, int, str]:
    """Restore order: QoS, then larger CPU request, then older, then id."""
    return (_QOS_RANK[req.qos], -req.cpu_request, req.created_at, req.container_id)


def _from_saved(engine: Engine, f: Found, entry: _Believed) -> _Plan:
    req = f.request
    name, kind, isolated = entry.pool, entry.kind, entry.isolated
    exclusive, zone = entry.exclusive, entry.zone
    granted = parity.as_granted(req, kind, isolated) if kind != req.kind else None
    if granted is not None:
        f = Found(granted, f.cpus, f.mems)  # placed degraded
    elif kind != req.kind:
        if (req.kind, kind) not in _FALLBACKS or isolated:
            raise PolicyError(f"saved kind {kind} differs from the request's {req.kind}")
        if req.kind is CpuKind.RESERVED:  # it had spilled over to shared CPUs
            f = Found(dataclasses.replace(req, kind=CpuKind.SHARED), f.cpus, f.mems)
    pool = _pool_now(engine, name, kind, exclusive, f.cpus)
    _check_nodes(engine, zone)
    return _Plan(f, pool, exclusive, isolated, zone or None, (entry.shared, entry.memory))


def _checked(engine: Engine, f: Found, entry: Mapping[str, Any]) -> _Believed | str:
    """One saved entry read and checked on its own, or why it cannot be believed."""
    m = engine.machine
    try:
        saved = read_entry(entry)
    except (KeyError, ValueError) as e:
        return f"malformed ({type(e).__name__}: {str(e)[:80]})"
    pool, cpus, nodes = saved.pool, saved.exclusive, saved.zone
    if not could_exist(m, pool):
        return f"pool {pool[:80]!r} does not exist on this machine"
    if max(len(cpus), len(nodes)) > _MAX_TEXT:
        return f"a CPU or node list longer than {_MAX_TEXT} characters"
    try:
        exclusive = cpuset.parse(cpus, max(m.cpus) + 1)
    except ValueError as e:
        return f"exclusive CPUs not on this machine or malformed: {e}"
    try:
        zone = cpuset.parse(nodes, max(m.nodes) + 1)
    except ValueError as e:
        return f"memory nodes not on this machine or malformed: {e}"
    if outside := exclusive - frozenset(m.cpus):
        return f"CPUs {cpuset.format(outside)} are not on this machine"
    if outside := zone - frozenset(m.nodes):
        return f"memory nodes {cpuset.format(outside)} are not on this machine"
    # (hide-hyperthreads pins a container to one thread of each of its cores)
    if f.cpus and any(not m.cpus[c].threads & f.cpus for c in exclusive - f.cpus):
        return (
            f"exclusive CPUs {cpuset.format(exclusive)} but the runtime reports cpuset "
            f"{cpuset.format(f.cpus)}"
        )
    return _Believed(
        pool,
        saved.kind,
        exclusive,
        saved.isolated,
        zone,
        saved.cold_start,
        saved.shared,
        saved.memory,
    )


def believed(
    engine: Engine, found: Sequence[Found], entries: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, _Believed], dict[str, str]]:
    """The saved entries of found containers, each read once: those believed, and those that
    contradict the runtime or each other with the reason for each."""
    read: dict[str, _Believed] = {}
    dropped: dict[str, str] = {}
    claims: dict[int, list[str]] = {}
    for f in found:
        cid = f.request.container_id
        entry = entries.get(cid)
        if entry is None:
            continue
        checked = _checked(engine, f, entry)
        if isinstance(checked, str):
            dropped[cid] = checked
            continue
        read[cid] = checked
        for c in checked.exclusive:
            claims.setdefault(c, []).append(cid)
    for c, holders in sorted(claims.items()):
        if len(holders) > 1:
            for cid in holders:
                others = ", ".join(h for h in holders if h != cid)
                dropped.setdefault(cid, f"exclusive CPU {c} is claimed by {others} too")
    return {cid: b for cid, b in read.items() if cid not in dropped}, dropped


def _pool_now(
    engine: Engine,
    name: str,
    kind: CpuKind,
    exclusive: frozenset[int],
    cpus: frozenset[int] | None,
) -> int:
    """The pool a saved entry belongs to under the current tree.

    The saved pool when it still exists and holds the exclusive CPUs; otherwise (the tree
    changed with the configuration) the deepest pool holding the CPUs the container uses.
    """
    pool = engine.pool_index(name)
    if kind is CpuKind.RESERVED or kind is CpuKind.PRESERVE:
        return 0 if pool is None else pool
    if pool is not None and exclusive <= engine.pools[pool].cpus:
        return pool
    probes = [exclusive | cpus, exclusive] if cpus else [exclusive]
    for probe in probes:
        if probe and (deepest := _deepest_holding(engine, probe)) is not None:
            return deepest
    held = exclusive or cpus or frozenset()
    if held:
        raise PolicyError(f"CPUs {cpuset.format(held)} are no longer all available")
    raise PolicyError(f"saved pool {name!r} is gone and the runtime reports no cpuset")


def _check_nodes(engine: Engine, zone: frozenset[int] | None) -> None:
    """Memory nodes outside every pool (no longer available) make a placement invalid."""
    gone = (zone or frozenset()) - engine.pools[0].nodes
    if gone:
        raise PolicyError(f"memory nodes {cpuset.format(gone)} are no longer available")


def _deepest_holding(engine: Engine, cpus: frozenset[int]) -> int | None:
    best: int | None = None
    for p in engine.pools:
        if cpus <= p.cpus and (best is None or p.depth > engine.pools[best].depth):
            best = p.index
    return best


def _from_runtime(engine: Engine, f: Found, users: Mapping[int, int]) -> _Plan:
    """A plan from the runtime's view alone; `users` counts the containers pinned to each CPU."""
    req = f.request
    zone = f.mems if f.mems else None
    _check_nodes(engine, zone)
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
        # Its exclusive CPUs are the ones no other container runs on; when their number is not
        # the request's (it is the only shared user of its pool), they cannot be told apart.
        own = frozenset(c for c in f.cpus if users.get(c, 0) == 1)
        if len(own) != req.exclusive:
            raise PolicyError("exclusive and shared CPUs cannot be told apart without saved state")
        return _Plan(f, pool, own, own <= engine.isolated, zone)
    held = f.cpus
    if req.hide_hyperthreads and len(held) != req.exclusive:
        # pinned to one thread of each core it holds whole
        held = frozenset().union(*(engine.machine.cpus[c].threads for c in f.cpus))
    return _Plan(f, pool, held, held <= engine.isolated, zone)


def _pinned_users(found: Sequence[Found]) -> dict[int, int]:
    """How many containers the runtime pins to each CPU (preserved cpusets are not ours)."""
    users: dict[int, int] = {}
    for f in found:
        if f.cpus and f.request.kind is not CpuKind.PRESERVE:
            for c in f.cpus:
                users[c] = users.get(c, 0) + 1
    return users


def _warm(engine: Engine, f: Found, entry: _Believed | None) -> bool:
    """Whether a container's cold start is known to be over (saved state, else DRAM in use)."""
    if entry is not None:
        return not entry.cold_start
    nodes = engine.machine.nodes
    return bool(f.mems) and any(
        n in nodes and nodes[n].tier is MemoryTier.DRAM for n in f.mems or ()
    )


def new_engine(
    machine: Machine, options: Options, found: Sequence[Found], saved: Mapping[str, Any] | None
) -> Engine:
    """The empty engine to restore `found` into: a quantity reservation keeps the CPUs the
    snapshot says it held and stays off those the exclusive containers run on, so that only
    containers whose CPUs left the usable set move."""
    held: set[int] = set()
    for f in found:
        if f.request.exclusive and f.cpus:
            held.update(f.cpus)
            if f.request.hide_hyperthreads:  # pinned to one thread of each core it holds
                held.update(*(machine.cpus[c].threads for c in f.cpus if c in machine.cpus))
    keep = saved_reserved(saved, max(machine.cpus) + 1)
    return Engine(machine, options, keep=keep, avoid=frozenset(held))


def restore(
    engine: Engine, found: Sequence[Found], saved: Mapping[str, Any] | None
) -> RestoreReport:
    """Adopt or re-place every found container into an empty engine."""
    entries, no_saved = saved_entries(saved)
    trusted, dropped = believed(engine, found, entries)
    users = _pinned_users(found)
    plans: list[_Plan] = []
    again: list[Found] = []
    reasons: dict[str, str] = {}
    for f in sorted(found, key=lambda f: order_key(f.request)):
        cid = f.request.container_id
        entry = trusted.get(cid)
        try:
            plans.append(
                _from_saved(engine, f, entry) if entry else _from_runtime(engine, f, users)
            )
        except PolicyError as e:
            again.append(f)
            if cid in dropped:
                reasons[cid] = f"saved entry dropped ({dropped[cid]}); {e}"
            else:
                reasons[cid] = str(e) if entries or not no_saved else f"{no_saved}; {e}"
    adopted: list[str] = []
    plans.sort(key=lambda p: not p.exclusive)  # stable: exclusive holders first, order kept
    for plan in plans:
        f = plan.found
        entry = trusted.get(f.request.container_id)
        try:
            engine.adopt(
                f.request,
                plan.pool,
                plan.exclusive,
                plan.isolated,
                plan.zone,
                f.cpus,
                f.mems,
                cold_start_over=entry is not None and not entry.cold_start,
                charged=plan.charged,
            )
        except PolicyError as e:
            again.append(f)
            reasons[f.request.container_id] = f"inconsistent: {e}"
            continue
        adopted.append(f.request.container_id)
    failed: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for f in sorted(again, key=lambda f: order_key(f.request)):
        cid = f.request.container_id
        req = f.request
        if req.cold_start_ns and _warm(engine, f, trusted.get(cid)):
            # the memory it had once warm: the cold-start tiers with DRAM (as `Zones.tiers`)
            tiers = req.memory_tiers | {MemoryTier.DRAM}
            req = dataclasses.replace(req, cold_start_ns=0, memory_tiers=tiers)
        try:
            engine.place(req)
        except PolicyError as e:
            failed[cid] = f"{reasons[cid]}; re-placing failed: {e}"
            continue
        replaced[cid] = reasons[cid]
    # Diff against what the containers run on now, not against intermediate decisions.
    for f in found:
        engine.running(f.request.container_id, f.cpus, f.mems)
    updates = engine.refresh()
    cold: dict[str, ColdStart] = {
        cid: g.cold_start for cid, g in sorted(engine.grants.items()) if g.cold_start is not None
    }
    return RestoreReport(
        adopted=tuple(adopted),
        replaced=replaced,
        failed=failed,
        updates=updates,
        decisions={cid: engine.decision_of(cid) for cid in sorted(replaced)},
        cold_starts=cold,
        dropped=dropped,
    )
