"""The engine's side of the degradation ladder (`admission.ladder`): each step's grant for a
request that does not fit as asked, and the degradations a grant is noted with.

The ladder orders the steps and says what each loses; here is what each takes from the
accounts. Every step commits the grant it returns (but `on_reserved`, which the ladder commits)
or returns None with the state unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from nri_topology.policy.accounts import hugepages
from nri_topology.policy.accounts.grant import Grant, Op, charged_size, memory_size
from nri_topology.policy.admission import ladder, moves, parity
from nri_topology.policy.allocator import cpuallocator
from nri_topology.policy.engine.choosing import choose_grant, chosen
from nri_topology.policy.engine.commit import commit, make_grant, revert
from nri_topology.policy.engine.state import State
from nri_topology.policy.shaping import shape
from nri_topology.policy.shaping.shape import GrantShape
from nri_topology.policy.types import EXCLUSIVE_KINDS, CpuKind, Degradation, PolicyError, Request
from nri_topology.topology import cpuset


def rungs(s: State) -> ladder.Rungs:
    """The steps of the ladder over one engine's state."""
    options = s.options
    return ladder.Rungs(
        as_asked=partial(as_asked, s),
        after_moves=partial(after_moves, s),
        on_isolated=partial(on_isolated, s),
        on_isolated_mixed=partial(on_isolated_mixed, s),
        on_reserved=partial(on_reserved, s),
        on_overcommit=partial(on_overcommit, s),
        commit=partial(commit, s),
        note=partial(note_degradation, s),
        chosen=partial(chosen, s),
        kubelet_admits=s.kubelet_admits,
        may_degrade=lambda req: parity.may_degrade(req, options),
    )


def admit(
    s: State, steps: ladder.Rungs, req: Request, hint: int | None, keep: frozenset[int], op: Op
) -> ladder.Placed:
    """Choose and commit a grant, degrading it when it does not fit as asked (`ladder`):
    the grant, its trace and the shared containers moved for it (their old grants)."""
    hugepages_admitted(s, req)
    return ladder.climb(ladder.Climb(steps, req, hint, keep, op, True))


def as_asked(
    s: State, req: Request, hint: int | None, keep: frozenset[int], op: Op
) -> ladder.Placed:
    """The grant as asked, committed; whole cores on fewer NUMA nodes when moving a few shared
    containers gives them (`moves.better_shape`), for a new container (no `hint`)."""
    g, trace = choose_grant(s, req, hint, keep)
    if hint is None:
        better = moves.better_shape(
            s.machine,
            s.pools,
            s.ledger,
            s.options.max_moves,
            partial(try_moves, s),
            req,
            g,
            trace,
            op,
        )
        if better is not None:
            return ladder.Placed(*better)
    commit(s, g, op)
    return ladder.Placed(g, trace, {})


def after_moves(
    s: State, req: Request, hint: int | None, keep: frozenset[int], op: Op
) -> ladder.Placed | None:
    """The grant as asked after moving a few shared containers out of the way (`moves`)."""
    found = moves.candidates(s.pools, s.ledger, s.options.max_moves, req)
    room = moves.make_room(found, partial(try_moves, s), req, hint, keep, op)
    return None if room is None else ladder.Placed(*room)


def try_moves(
    s: State,
    req: Request,
    hint: int | None,
    keep: frozenset[int],
    movers: tuple[str, ...],
    op: Op,
    better: Callable[[Grant], bool] | None = None,
) -> moves.Moved | None:
    """Take the movers out, place `req`, place the movers again; all or nothing; with
    `better`, only when `req`'s grant is better.

    Returns the committed grant, its trace and the movers' old grants, or None with the
    state exactly as before.
    """
    grants = s.record.grants
    olds = {cid: grants[cid] for cid in movers}
    pinned = {cid: (g.cpus, g.mems) for cid, g in olds.items()}  # what the runtime holds
    trial = Op()
    for old in olds.values():
        revert(s, old, trial)
    placed: list[Grant] = []
    try:
        g, trace = choose_grant(s, req, hint, keep)
        if better is not None and not better(g):
            raise PolicyError("no better than without the moves")
        commit(s, g, trial)
        placed.append(g)
        for cid in sorted(olds, key=lambda c: (-olds[c].shared, c)):
            placed.append(move(s, olds[cid], req, trial))
    except PolicyError:
        for done in reversed(placed):
            revert(s, done, Op())
        for cid, old in olds.items():
            commit(s, old, Op())
            old.cpus, old.mems = pinned[cid]  # the next diff compares with these
        return None
    op.touched |= trial.touched
    return g, trace, olds


def move(s: State, old: Grant, cause: Request, op: Op) -> Grant:
    """Place a shared container taken out for `cause` again (committed); PolicyError if not."""
    try:
        g, _ = choose_grant(s, old.request, None, frozenset())
    except PolicyError:
        last = on_reserved(s, old.request)
        if last is None or not parity.may_degrade(old.request, s.options):
            raise
        g = last
    if g.hugepages_short:
        raise PolicyError(f"{old.request.who}: its hugepages no longer fit")
    if old.cold_start is None:
        g.cold_start = None
    commit(s, g, op)
    note_degradation(s, g, old.request)
    g.degraded = tuple(dict.fromkeys(old.degraded + g.degraded))
    g.reason = f"moved to make room for {cause.who}: {g.reason}"
    return g


def on_isolated(s: State, req: Request, op: Op) -> Grant | None:
    """Exclusive CPUs from the isolated ones when no ordinary CPUs are left (committed).

    The kubelet hands isolated CPUs out like any other; this policy keeps them for the
    containers that prefer them, and gives them to others only instead of a degradation.
    """
    if req.kind not in (CpuKind.EXCLUSIVE, CpuKind.MIXED) or not s.isolated:
        return None
    try:
        g, _ = choose_grant(s, replace(req, kind=CpuKind.ISOLATED), None, frozenset())
    except PolicyError:
        return None
    if not g.isolated:
        return None
    commit(s, g, op)
    g.reason += "; isolated CPUs because no ordinary ones are left"
    return g


def on_isolated_mixed(s: State, req: Request, op: Op) -> Grant | None:
    """Exclusive CPUs from the root's free ordinary CPUs plus isolated ones (committed).

    Neither kind alone holds the request but together they do, as the kubelet, which counts
    isolated CPUs as allocatable, would assign them. As many ordinary CPUs as can be sliced
    without starving a shared container, the rest isolated.
    """
    if req.kind not in EXCLUSIVE_KINDS or not s.isolated:
        return None
    kind = req.kind
    if kind is CpuKind.ISOLATED:
        kind = CpuKind.MIXED if req.shared else CpuKind.EXCLUSIVE
    mixed = replace(req, kind=kind)
    root = 0
    free_iso = s.ledger.free_iso[root]
    k = req.exclusive
    try:
        zone, relaxed, size = degraded_root_zone(s, mixed)
        sliceable = s.shaper.sliceable(root, k, mixed.shared if kind is CpuKind.MIXED else 0, kind)
    except (LookupError, PolicyError, shape.GrantFailed):
        return None
    whole = s.options.full_pcpus_only
    ordinary = min(k, len(sliceable))
    if whole:
        ordinary -= ordinary % s.machine.threads_per_core
    if k - ordinary > len(free_iso) or ordinary == k:
        return None
    try:
        exclusive = cpuallocator.take_cpus(
            s.machine, sliceable, ordinary, full_pcpus_only=whole
        ) | cpuallocator.take_cpus(s.machine, free_iso, k - ordinary, full_pcpus_only=whole)
    except cpuallocator.AllocationError:
        return None
    g = make_grant(
        s, mixed, GrantShape(root, kind, exclusive, False, mixed.shared, zone, relaxed, size)
    )
    g.reason = (
        f"{ordinary} ordinary and {k - ordinary} isolated exclusive CPUs: neither kind alone "
        "is left for all of them"
    )
    commit(s, g, op)
    return g


def on_reserved(s: State, req: Request) -> Grant | None:
    """A shared grant on the reserved CPUs, the kubelet's shared CPUs of last resort."""
    if s.options.strict_reserved_cpus or not s.reserved_all:
        return None
    if req.kind not in (CpuKind.SHARED, CpuKind.RESERVED):
        return None
    if req.cpu_request > s.reserved_capacity - s.reserved_granted:
        return None  # the reserved CPUs are never over-committed
    try:
        zone, relaxed, size = degraded_root_zone(s, req)
    except LookupError:
        return None
    shared = parity.as_kind(req, CpuKind.RESERVED)
    g = make_grant(
        s,
        shared,
        GrantShape(
            0, CpuKind.RESERVED, shared=shared.shared, zone=zone, relaxed=relaxed, size=size
        ),
    )
    g.reason = "no shared CPU left in any pool: on the reserved CPUs, the kubelet shares them"
    return g


def on_overcommit(s: State, req: Request, op: Op) -> Grant | None:
    """Shared CPUs of the root, charged only the shared milli-CPU left there (committed).

    No pool holds the request, yet the kubelet, with one shared pool, admits it: the root's
    shared set spans every shared CPU and its CPU shares divide their time as the kubelet's
    would. Later grants see only what was charged (`Degradation.SHARED_OVERCOMMIT`).
    """
    if req.kind not in (CpuKind.SHARED, CpuKind.RESERVED):
        return None
    root = 0
    if not s.ledger.shared_cpus[root]:
        return None
    req = parity.as_kind(req, CpuKind.SHARED)
    try:
        zone, relaxed, size = degraded_root_zone(s, req)
    except LookupError:
        return None
    charge = max(0, min(req.shared, s.ledger.allocatable(root)))
    g = make_grant(
        s,
        req,
        GrantShape(root, CpuKind.SHARED, shared=charge, zone=zone, relaxed=relaxed, size=size),
    )
    g.reason = (
        f"no pool holds {req.shared}m of shared CPU: shared CPUs of {s.pools[root].name} "
        f"over-committed, {charge}m charged, the kubelet's shared pool admits it"
    )
    commit(s, g, op)
    return g


def degraded_root_zone(s: State, req: Request) -> tuple[frozenset[int], bool, int]:
    """The root's memory zone of a degradable request (widened across tiers), whether it was
    relaxed, and the bytes to charge; LookupError when even that cannot hold it."""
    size = charged_size(req)
    zone, relaxed = s.zones.zone(0, s.zones.tiers(req), size, True, s.squeeze(req))
    return zone, relaxed, size


def hugepages_admitted(s: State, req: Request) -> None:
    """Refuse hugepages beyond the pages of their size still free on the whole machine: the
    kubelet, counting the same pages, does not admit them either."""
    if not req.hugepages:
        return
    order = tuple(s.machine.nodes)
    _, short = s.huge.layout(req.hugepages, order)
    if short:
        why = hugepages.describe_short(req.hugepages, short, s.huge, order)
        raise PolicyError(f"{req.who}: {why}")


def note_degradation(s: State, g: Grant, asked: Request) -> None:
    """Set a grant's degradations against what was asked, and say them in its reason."""
    zone_tiers = s.zones.tiers_of(g.zone)
    widened = not zone_tiers <= s.zones.tiers(g.request)
    iso_mixed = not g.isolated and bool(g.exclusive & s.isolated)
    cut = bool(g.zone) and not g.request.memory_preserve and g.memory < memory_size(g.request)
    cpu_cut = g.kind is CpuKind.SHARED and g.shared < g.request.shared
    remote = hugepages_remote(s, g)
    if (
        not widened
        and not iso_mixed
        and not cut
        and not cpu_cut
        and not remote
        and g.kind is asked.kind
    ):
        return
    g.degraded = parity.degradations(asked.kind, g.kind, widened, iso_mixed, cut, cpu_cut)
    if remote:
        g.degraded += (Degradation.HUGEPAGES_REMOTE,)
        g.reason += (
            f"; hugepages on nodes {cpuset.format(remote)} beyond the pool's, "
            "its own have too few free"
        )
    if cut:
        g.reason += (
            f"; {g.memory} of {memory_size(g.request)} bytes of memory charged, "
            "the rest fits nowhere"
        )
    if widened and "memory widened into" not in g.reason:
        names = ",".join(sorted(str(t) for t in zone_tiers))
        g.reason += f"; memory widened into tiers {names} because its own ran out"


def hugepages_remote(s: State, g: Grant) -> frozenset[int]:
    """The nodes of a grant's hugepages outside its pool and memory zone."""
    if not g.hugepages:
        return frozenset()
    return hugepages.nodes_of(g.hugepages) - s.pools[g.pool].nodes - g.zone
