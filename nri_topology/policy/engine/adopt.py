"""Adoption: a running container's placement taken over verbatim after a restart, checked
against the accounts instead of chosen (`checkpoint.restore` calls it in its order)."""

from __future__ import annotations

from nri_topology.policy.accounts.grant import Grant, Op, charged_size
from nri_topology.policy.admission import parity
from nri_topology.policy.engine.commit import commit, make_grant
from nri_topology.policy.engine.rungs import hugepages_remote
from nri_topology.policy.engine.state import State
from nri_topology.policy.shaping.shape import GrantShape
from nri_topology.policy.types import EXCLUSIVE_KINDS, CpuKind, Degradation, PolicyError, Request
from nri_topology.topology import cpuset


def adopt(
    s: State,
    req: Request,
    pool: int,
    exclusive: frozenset[int],
    isolated: bool,
    zone: frozenset[int] | None,
    charged: tuple[int | None, int | None],
    prefer: frozenset[int],
) -> Grant:
    """Commit `req`'s grant as found (`Engine.adopt`); PolicyError when it is inconsistent.

    `charged` is the shared milli-CPU and memory bytes saved for it (None: unknown): less than
    asked when it was placed over-committed or squeezed, which is kept for a request that may
    be degraded (the order of adoption is not the order of placement, so the charge cannot be
    worked out again). `prefer`: the memory nodes it runs on, for its hugepages.
    """
    kind = req.kind
    if kind is CpuKind.ISOLATED and not isolated:
        kind = CpuKind.MIXED if req.shared else CpuKind.EXCLUSIVE
    ledger = s.ledger
    pool_cpus = (
        ledger.free_iso[pool]
        if isolated  # else ordinary CPUs, or next to isolated ones (ISOLATED_MIXED)
        else ledger.shared_cpus[pool] - s.partial | ledger.free_iso[pool]
    )
    if kind in EXCLUSIVE_KINDS:
        if len(exclusive) != req.exclusive:
            raise PolicyError(
                f"holds {len(exclusive)} exclusive CPUs, the request asks for {req.exclusive}"
            )
        if not exclusive <= pool_cpus:
            raise PolicyError(
                f"CPUs {cpuset.format(exclusive - pool_cpus)} are not free in {s.pools[pool].name}"
            )
        if s.options.full_pcpus_only and any(
            not s.machine.cpus[c].threads <= exclusive for c in exclusive
        ):
            raise PolicyError("full_pcpus_only is on and the CPUs split a physical core")
    elif exclusive:
        raise PolicyError(f"kind {kind} holds no exclusive CPUs")
    size = charged_size(req)
    degradable = parity.may_degrade(req, s.options)
    saved_shared, saved_memory = charged if degradable else (None, None)
    charge = size if saved_memory is None else min(size, saved_memory)
    tiers = s.zones.tiers(req)
    if zone is None or not zone:
        try:
            zone, relaxed = s.zones.zone(pool, tiers, size)
        except LookupError as e:
            raise PolicyError(f"memory: {e}") from None
    else:
        unknown = zone - frozenset(s.machine.nodes)
        if unknown:
            raise PolicyError(f"unknown memory nodes {cpuset.format(unknown)}")
        squeeze = degradable and s.squeeze(req)
        if not s.book.fits(zone, charge) and not squeeze:
            raise PolicyError(f"memory zone {cpuset.format(zone)} is full")
        relaxed = False
    shared = req.shared if kind not in (CpuKind.EXCLUSIVE, CpuKind.PRESERVE) else 0
    if kind is CpuKind.SHARED and degradable and s.kubelet_admits(req):
        if saved_shared is not None and saved_shared < shared:
            shared = saved_shared  # it was placed over-committed
        elif shared > ledger.allocatable(pool):
            shared = max(0, ledger.allocatable(pool))  # placed over-committed
    g = make_grant(
        s,
        req,
        GrantShape(pool, kind, exclusive, isolated, shared, zone, relaxed, charge),
        prefer=prefer,
    )
    check_fits(s, g)
    g.reason = "adopted as found"
    g.degraded = parity.degradations(
        kind,
        kind,
        tier_widened=False,
        isolated_mixed=not isolated and bool(exclusive & s.isolated),
        memory_cut=g.memory < size,
        cpu_cut=g.kind is CpuKind.SHARED and g.shared < req.shared,
    )
    if g.hugepages_short:  # adopted as it runs: what fits is booked, the rest is not
        g.degraded += (Degradation.HUGEPAGES_CHARGE,)
    if hugepages_remote(s, g):
        g.degraded += (Degradation.HUGEPAGES_REMOTE,)
    commit(s, g, Op())
    return g


def check_fits(s: State, g: Grant) -> None:
    """Whether a grant given from outside (adoption) keeps the accounting valid."""
    if g.kind is CpuKind.RESERVED:
        if g.shared > s.reserved_capacity - s.reserved_granted:
            raise PolicyError("reserved capacity exhausted")
        return
    k = len(g.exclusive - s.isolated)
    extra = g.shared if g.uses_shared else 0
    users = int(g.uses_shared)
    ledger = s.ledger
    for x in s.pools_touching(g.exclusive) if k else ():
        if x in s.chain[g.pool]:
            continue
        if len(ledger.shared_cpus[x] - g.exclusive) < ledger.need_cpus(x):
            raise PolicyError(f"would starve the shared containers of {s.pools[x].name}")
    short = ledger.short(g.pool, k, extra, users)
    if short is not None:
        raise PolicyError(f"not enough shared capacity in {s.pools[short].name}")
