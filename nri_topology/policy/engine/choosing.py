"""A request's grant as asked: the pool chosen (`choice`), the grant shaped in it (`shaping`),
with the reason a decision gives; not committed.

Reserved and preserved requests are accounted at the root without a choice; the others are
offered every pool the choice finds feasible, best first, until one can be shaped. Hugepages
are laid out on the pool's own nodes first and beyond them, in a second round, only when memory
may widen too.
"""

from __future__ import annotations

from dataclasses import replace

from nri_topology.policy.accounts import hugepages
from nri_topology.policy.accounts.grant import Grant, charged_size
from nri_topology.policy.admission import parity
from nri_topology.policy.choice import choose, scoring
from nri_topology.policy.engine.commit import make_grant
from nri_topology.policy.engine.state import State
from nri_topology.policy.shaping.shape import GrantFailed, GrantShape
from nri_topology.policy.types import CHOSEN, CpuKind, Outcome, PolicyError, PoolScore, Request
from nri_topology.topology import cpuset
from nri_topology.topology.model import MemoryTier

WHY_SHOWN = 3  # pools named when a decision says why its devices' nodes were missed


def chosen(s: State, g: Grant) -> tuple[PoolScore, ...]:
    """The trace of a grant made without a choice: its pool, chosen."""
    return (PoolScore(s.pools[g.pool].name, (), CHOSEN),)


def choose_grant(
    s: State, req: Request, hint: int | None, keep: frozenset[int]
) -> tuple[Grant, tuple[PoolScore, ...]]:
    """The grant for `req` as asked and its trace; `hint`/`keep`: the pool and CPUs to try
    first (a resize's); PolicyError saying why when no pool holds it."""
    size = charged_size(req)
    tiers = s.zones.tiers(req)
    root = 0
    if req.kind is CpuKind.PRESERVE:
        zone, relaxed = root_zone(s, req, tiers, size)
        g = make_grant(
            s, req, GrantShape(root, CpuKind.PRESERVE, zone=zone, relaxed=relaxed, size=size)
        )
        g.reason = "CPU pinning preserved; accounted at the root"
        return g, chosen(s, g)
    if req.kind is CpuKind.RESERVED:
        free = s.reserved_capacity - s.reserved_granted
        if s.reserved_all and req.shared <= free:
            zone, relaxed = root_zone(s, req, tiers, size)
            shape = GrantShape(
                root, CpuKind.RESERVED, shared=req.shared, zone=zone, relaxed=relaxed, size=size
            )
            g = make_grant(s, req, shape)
            g.reason = f"reserved CPUs ({req.shared}m of {free}m free reserved capacity)"
            return g, chosen(s, g)
        why = (
            "no CPUs are reserved"
            if not s.reserved_all
            else f"reserved capacity exhausted ({free}m free, {req.shared}m requested)"
        )
        req = replace(req, kind=CpuKind.SHARED)
        fallback = f"{why}; placed on shared CPUs instead"
    else:
        fallback = ""

    widen = parity.may_degrade(req, s.options)
    options, unfit = choose.options(
        req,
        s.board,
        tiers,
        size,
        affinity_scores(s, req),
        s.zones.zone,
        widen=widen,
        squeeze=widen and s.squeeze(req),
    )

    # Hugepages on the pool's own nodes first; beyond them, in a second round, only when
    # memory may widen too (the request is not strict and the operator lets it degrade).
    remote = False

    def attempt(o: choose.Option) -> Grant:
        shape = s.shaper.shape(req, o.pool.index, o.zone, o.relaxed, keep, tiers, size, o.span)
        within = None if remote else o.pool.nodes | o.zone
        g = make_grant(s, req, shape, within)
        if g.hugepages_short:
            raise GrantFailed(
                hugepages.describe_short(
                    req.hugepages,
                    dict(g.hugepages_short),
                    s.huge,
                    within if within is not None else s.machine.nodes,
                )
            )
        g.reason = reason(g, o.pool.name, fallback, shape.note)
        return g

    found = choose.choose(options, unfit, hint, attempt, s.by_name)
    if found.grant is None and req.hugepages and widen:
        remote = True
        found = choose.choose(options, unfit, hint, attempt, s.by_name)
    g = found.grant
    if g is None:
        raise PolicyError(choose.refusal(req, size, tiers, found.trace, s.pools, s.ledger, s.book))
    if req.hint_nodes:
        g.hints_missed = hints_missed(s, g, found.trace)
        g.reason += "; " + hinted(req, g.hints_missed)
    if found.runner_up is not None:
        g.reason += f"; beat {found.runner_up.pool} on {found.runner_up.result.criterion}"
    return g, found.trace


def hints_missed(s: State, g: Grant, trace: tuple[PoolScore, ...]) -> str:
    """Why a grant's CPUs are not all on its devices' NUMA nodes, "" when they are.

    The CPUs it runs on decide, not its pool: a pool covering the devices' nodes may still
    give CPUs of others (a full node in a socket pool). Why: what became of the pools whose
    CPUs are all on those nodes.
    """
    hinted_nodes = g.request.hint_nodes
    cpus = g.exclusive | (s.ledger.shared_cpus[g.pool] if g.uses_shared else frozenset())
    nodes = frozenset(s.machine.cpus[c].node for c in cpus)
    outside = nodes - hinted_nodes
    if not outside:
        return ""
    within = [
        f"{p.pool} {p.verdict}"
        for p in trace
        if p.result.outcome is not Outcome.CHOSEN
        and (i := s.by_name.get(p.pool)) is not None
        and s.pools[i].cpu_nodes <= hinted_nodes
    ]
    why = "; ".join(within[:WHY_SHOWN]) if within else "no pool has CPUs of those nodes only"
    too = " too" if nodes & hinted_nodes else ""
    return f"CPUs on NUMA {cpuset.format(outside)}{too}: {why}"


def hinted(req: Request, missed: str) -> str:
    """What the decision says about the container's topology hints: covered when its CPUs are
    all on the devices' NUMA nodes, else missed and why."""
    providers = ", ".join(sorted({h.provider for h in req.hints}))
    covered = f"missed, {missed}" if missed else "covered"
    return f"devices on NUMA {cpuset.format(req.hint_nodes)} ({providers}): {covered}"


def reason(g: Grant, pool: str, fallback: str, note: str) -> str:
    """The decision's reason for a grant chosen in `pool`."""
    parts = [f"{g.kind} CPUs in {pool}"]
    if fallback:
        parts.append(fallback)
    if note:
        parts.append(note)
    if g.relaxed:
        parts.append("memory widened beyond the pool because it ran out")
    return "; ".join(parts)


def root_zone(
    s: State, req: Request, tiers: frozenset[MemoryTier], size: int
) -> tuple[frozenset[int], bool]:
    """The root's memory zone for a request accounted there; PolicyError when none holds it."""
    try:
        widen = parity.may_degrade(req, s.options)
        return s.zones.zone(0, tiers, size, widen, widen and s.squeeze(req))
    except LookupError as e:
        raise PolicyError(f"{req.who}: memory does not fit at the root: {e}") from None


def affinity_scores(s: State, req: Request) -> list[float]:
    """Per pool, the weight of the request's affinities to the containers placed there."""
    if not req.affinities:
        return [0.0] * len(s.pools)
    weights = s.record.by_attribute.weights(req)
    grants = s.record.grants
    per_pool: dict[int, float] = {}
    for cid, w in weights.items():
        g = grants.get(cid)
        if g is not None:
            per_pool[g.pool] = per_pool.get(g.pool, 0.0) + w
    return scoring.affinity_scores(s.pools, per_pool)
