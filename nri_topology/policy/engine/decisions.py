"""A grant as the decision the policy hands out: data, with its trace and updates."""

from __future__ import annotations

from nri_topology.policy.accounts.grant import Grant
from nri_topology.policy.engine.state import State
from nri_topology.policy.types import Decision, PoolScore, Update


def decision(
    s: State,
    g: Grant,
    trace: tuple[PoolScore, ...] = (),
    updates: tuple[Update, ...] = (),
    moved: tuple[str, ...] = (),
) -> Decision:
    """The decision of a committed grant: `trace` the pools it was chosen among, `updates` the
    other containers' new pinning, `moved` the shared containers moved for it."""
    return Decision(
        container_id=g.request.container_id,
        pool=s.pools[g.pool].name,
        kind=g.kind,
        placement=s.pins.placement(g),
        exclusive=g.exclusive,
        memory_tiers=s.zones.tiers_of(g.zone),
        updates=updates,
        reason=g.reason,
        trace=trace,
        memory_relaxed=g.relaxed,
        cold_start=g.cold_start,
        degraded=g.degraded,
        moved=moved,
        hints_missed=g.hints_missed,
        warnings=g.request.warnings,
        hugepages=g.hugepages,
    )
