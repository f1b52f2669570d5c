"""Choosing a pool: which pools the ledger lets hold a request, the filters the request's own
constraints put on pools, the order feasible pools are tried in, and the trace that says, as data,
why each pool won or lost.

Pure: each feasible pool gets its sort key (`scoring.sort_key`) from the engine's accounting, and
the engine passes a function that computes a grant in one pool; the first pool in order whose
grant can be computed wins, every later one lost to it on the first sort-key criterion that told
them apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Generic, NamedTuple, TypeVar

from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.accounts.memory import MemoryBook
from nri_topology.policy.allocator import numasets
from nri_topology.policy.choice import scoring
from nri_topology.policy.pools import Pool
from nri_topology.policy.shaping.shape import GrantFailed, Shaper
from nri_topology.policy.types import (
    CHOSEN,
    EXCLUSIVE_KINDS,
    CpuKind,
    Outcome,
    PoolScore,
    QoS,
    Request,
    Verdict,
)
from nri_topology.quantity import format_bytes
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier

T = TypeVar("T")


class Option(NamedTuple):
    """A pool that can hold the request, with its sort key and the memory zone it would get (a
    tuple: one is made per feasible pool per decision)."""

    key: scoring.SortKey
    pool: Pool
    hint_miss: int  # hinted NUMA nodes the pool does not cover
    zone: frozenset[int]
    relaxed: bool  # the zone widened beyond the pool's own nodes
    span: tuple[int, ...]  # the nodes exclusive CPUs would span (scored by them), or ()


class Chosen(NamedTuple, Generic[T]):
    """The result of a choice: the grant (None when no pool could make one), the trace in pool
    order and the runner-up, the first pool that lost to the winner."""

    grant: T | None
    trace: tuple[PoolScore, ...]
    runner_up: PoolScore | None


def hints_problem(req: Request, pool: Pool) -> str | None:
    """Why strict topology hints rule the pool out for its CPUs, or None."""
    if not (req.strict_hints and req.hint_nodes):
        return None
    outside = pool.cpu_nodes - req.hint_nodes
    if not outside:
        return None
    return (
        f"strict topology hints: CPUs of NUMA {cpuset.format(outside)} are "
        f"outside the devices' NUMA {cpuset.format(req.hint_nodes)}"
    )


class Demand(NamedTuple):
    """What a request asks of every pool's CPU accounts, worked out once per decision."""

    exclusive: int  # CPUs to slice off the shared ones (none for a shared request)
    shared: int  # milli-CPU charged to shared capacity
    new_user: int  # 1 when the container will run on shared CPUs
    isolated: bool  # its exclusive CPUs may come from isolated ones (kind ISOLATED)
    require_isolated: bool
    asked_exclusive: int  # as requested, for the reasons given
    asked_shared: int


def demand(req: Request, uses_exclusive: bool) -> Demand:
    """The request's `Demand`; `uses_exclusive`: its kind takes exclusive CPUs."""
    kind = req.kind
    return Demand(
        exclusive=req.exclusive if uses_exclusive else 0,
        shared=req.shared if kind is not CpuKind.EXCLUSIVE else 0,
        new_user=int(
            kind is not CpuKind.EXCLUSIVE and not (kind is CpuKind.ISOLATED and req.shared == 0)
        ),
        isolated=kind is CpuKind.ISOLATED,
        require_isolated=req.require_isolated,
        asked_exclusive=req.exclusive,
        asked_shared=req.shared,
    )


def room(d: Demand, pool: Pool, ledger: Ledger) -> tuple[str | None, int]:
    """Why the pool's CPUs cannot hold the demand, with 0; or None when they can, with the
    milli-CPU still grantable from its shared CPUs (`Ledger.allocatable`, found on the same
    walk up its chain)."""
    p = pool.index
    k, shared_part, new_user = d.exclusive, d.shared, d.new_user
    shared_cpus = ledger.shared_cpus
    if d.isolated and len(ledger.free_iso[p]) >= k:
        k = 0  # the exclusive part comes from isolated CPUs
    elif d.require_isolated:
        why = f"{len(ledger.free_iso[p])} free isolated CPUs, {d.asked_exclusive} required"
        return why, 0
    if k:  # (without a set difference of the shared CPUs: the partial set is one CPU at most)
        to_slice = len(shared_cpus[p]) - len(ledger.partial & shared_cpus[p])
        if to_slice < k:
            return f"{to_slice} CPUs free to slice, {k} needed", 0
    sub_shared, sub_users, reserved_in = (
        ledger.sub_shared,
        ledger.sub_users,
        ledger.partial_reserved_in,
    )
    least: int | None = None
    for a in ledger.chain[p]:  # `Ledger.short` inlined: this runs for every pool of a decision
        n = len(shared_cpus[a])
        granted = sub_shared[a] + reserved_in[a]
        need = -(-(granted + shared_part) // 1000)
        if need < 1 and sub_users[a] + new_user > 0:
            need = 1
        if n - k < need:
            if a == p:
                why = (
                    f"{ledger.allocatable(p)}m shared capacity left, {d.asked_shared}m shared "
                    f"and {k} exclusive CPUs requested"
                )
                return why, 0
            return f"ancestor {ledger.pool_names[a]} keeps too few shared CPUs", 0
        left = 1000 * n - granted
        if least is None or left < least:
            least = left
    assert least is not None  # a chain holds at least the pool itself
    if new_user and not shared_cpus[p]:
        return "no shared CPU left", 0
    if not pool.cpus:
        return "no CPUs", 0
    return None, least


def not_single_numa(pool: Pool, relaxed: bool) -> str | None:
    """Why a pool cannot hold a single-numa-node container, or None."""
    if len(pool.cpu_nodes) > 1:
        return f"single-numa-node: the pool spans NUMA nodes {sorted(pool.cpu_nodes)}"
    if relaxed:
        return "single-numa-node: memory does not fit in the pool's NUMA node"
    return None


@dataclass(frozen=True, slots=True)
class Board:
    """What the pool choice reads for every request, fixed for one engine (the ledger and the
    shaper change inside, through the engine's operations only)."""

    machine: Machine
    pools: tuple[Pool, ...]
    ledger: Ledger
    shaper: Shaper
    numa: tuple[tuple[int, float], ...]  # per pool: its CPUs' `scoring.numa_measure`
    pool_tiers: tuple[frozenset[MemoryTier], ...]
    pack: bool  # shared_placement "pack": pools already hosting shared containers first


# The memory zone of a pool for (pool, tiers, bytes, widen, squeeze): (zone, relaxed), or
# LookupError when none holds it (`Zones.zone`).
ZoneOf = Callable[[int, frozenset[MemoryTier], int, bool, bool], tuple[frozenset[int], bool]]


def options(
    req: Request,
    board: Board,
    tiers: frozenset[MemoryTier],
    size: int,
    weights: Sequence[float],
    zone_of: ZoneOf,
    *,
    widen: bool,
    squeeze: bool,
) -> tuple[list[Option], list[PoolScore]]:
    """The pools that can hold the request, each with its sort key (`scoring.sort_key`) and the
    memory zone it would get, and the others with why they cannot (both in pool order)."""
    uses_exclusive = req.kind in EXCLUSIVE_KINDS
    shaper, ledger = board.shaper, board.ledger
    spans = shaper.spans(req)
    preferred = shaper.preferred(req) if uses_exclusive else frozenset()
    options: list[Option] = []
    unfit_pools: list[PoolScore] = []
    # what does not depend on the pool, asked once
    asked = demand(req, uses_exclusive)
    pack = board.pack
    strict_hints = req.strict_hints and bool(req.hint_nodes)
    k, isolated = asked.asked_exclusive, asked.isolated
    burst_limit = (
        req.cpu_limit
        if req.qos is QoS.BURSTABLE and req.cpu_limit is not None and not uses_exclusive
        else None
    )
    hint_nodes = req.hint_nodes
    single_numa = req.single_numa
    free_iso, shared_cpus, users, sub_users = (
        ledger.free_iso,
        ledger.shared_cpus,
        ledger.users,
        ledger.sub_users,
    )
    for p in board.pools:
        i = p.index
        reason, alloc = room(asked, p, ledger)
        if reason is None and strict_hints:
            reason = hints_problem(req, p)
        if reason is None:
            try:
                zone, relaxed = zone_of(i, tiers, size, widen, squeeze)
            except LookupError as e:
                reason = f"memory: {e}"
            else:
                if relaxed and strict_hints:
                    reason = "strict topology hints: memory would widen beyond the pool"
        if reason is None and single_numa:
            reason = not_single_numa(p, relaxed)
        if reason is not None:
            unfit_pools.append(PoolScore(p.name, (), Verdict(Outcome.UNFIT, reason)))
            continue
        span = shaper.span(req, p) if spans else ()
        numa = board.numa[i]
        if span:
            numa = scoring.numa_measure(len(span), numasets.average_distance(board.machine, span))
        hint_miss = len(hint_nodes - p.cpu_nodes - p.nodes) if hint_nodes else 0
        if uses_exclusive:  # spread exclusive CPUs to the pool with most room
            colocated = 0
        elif pack:  # pools already hosting shared containers first, whole pools stay free
            colocated = int(not sub_users[i])
        else:
            colocated = len(users[i])
        key = scoring.sort_key(
            p,
            affinity=weights[i],
            hint_miss=hint_miss,
            tier_miss=not tiers <= board.pool_tiers[i],
            relaxed=relaxed,
            burst_short=burst_limit is not None and alloc < burst_limit,
            isolated_short=isolated and len(free_iso[i]) < k,
            numa=numa,
            cores_short=bool(preferred) and len(shared_cpus[i] & preferred) < k,
            colocated=colocated,
            free_shared=alloc,
        )
        options.append(Option(key, p, hint_miss, zone, relaxed, span))
    return options, unfit_pools


_by_key = itemgetter(0)  # Option.key


def choose(
    options: Sequence[Option],
    unfit: Sequence[PoolScore],
    hint: int | None,
    attempt: Callable[[Option], T],
    order: Mapping[str, int],
) -> Chosen[T]:
    """Try the options best first (the hinted pool before all), `attempt` raising `GrantFailed`
    when a pool cannot make the grant; `unfit` are the pools filtered out before scoring and
    `order` gives each pool's place in the trace."""
    ranked = sorted(options, key=_by_key)
    if hint is not None:
        ranked.sort(key=lambda o: o.pool.index != hint)
    scores = list(unfit)
    grant: T | None = None
    winner: str | None = None
    winner_key: tuple[object, ...] = ()
    runner_up: PoolScore | None = None
    lost = Outcome.LOST
    for o in ranked:
        name = o.pool.name
        if winner is not None:
            criterion = scoring.losing_criterion(o.key, winner_key)
            score = PoolScore(name, o.key, Verdict(lost, "", winner, criterion))
            if runner_up is None:
                runner_up = score
            scores.append(score)
            continue
        try:
            grant = attempt(o)
        except GrantFailed as e:
            scores.append(PoolScore(name, o.key, Verdict(Outcome.FAILED, str(e))))
            continue
        winner, winner_key = name, o.key
        scores.append(PoolScore(name, o.key, CHOSEN))
    scores.sort(key=lambda s: order[s.pool])
    return Chosen(grant, tuple(scores), runner_up)


def refusal(
    req: Request,
    size: int,
    tiers: frozenset[MemoryTier],
    trace: Sequence[PoolScore],
    pools: Sequence[Pool],
    ledger: Ledger,
    book: MemoryBook,
) -> str:
    """Why no pool was chosen: what the request wanted, the room left, and every pool's verdict."""
    why = "; ".join(f"{s.pool}: {s.verdict}" for s in trace)
    explain = _no_single_numa if req.single_numa else _nothing_fits
    return explain(req, size, tiers, why, pools, ledger, book)


def _no_single_numa(
    req: Request,
    size: int,
    tiers: frozenset[MemoryTier],
    why: str,
    pools: Sequence[Pool],
    ledger: Ledger,
    book: MemoryBook,
) -> str:
    """The refusal of a single-numa-node container: what one node has, and why."""
    single = [p for p in pools if len(p.cpu_nodes) == 1]
    parts = []
    if req.exclusive:
        parts.append(f"{req.exclusive} exclusive CPUs")
    if req.shared:
        parts.append(f"{req.shared}m shared CPU")
    if size:
        parts.append(f"{format_bytes(size)} of {','.join(sorted(tiers))} memory")
    wanted = " + ".join(parts) or "a shared CPU"
    if single:
        largest = max(len(p.sharable) for p in single)
        free = max(len(ledger.shared_cpus[p.index] - ledger.partial) for p in single)
        mem = max(book.free(p.nodes_of(tiers)) for p in single)
        has = (
            f"the largest NUMA node has {largest} CPUs; now at most {free} free CPUs and "
            f"{format_bytes(max(mem, 0))} of free memory in one node"
        )
    else:
        has = "no pool holds a single NUMA node"
    return (
        f"{req.who}: single-numa-node asked and no NUMA node can hold {wanted}: {has}; "
        f"not spanning NUMA nodes as asked. ({why})"
    )


def _nothing_fits(
    req: Request,
    size: int,
    tiers: frozenset[MemoryTier],
    why: str,
    pools: Sequence[Pool],
    ledger: Ledger,
    book: MemoryBook,
) -> str:
    """The refusal of a container no pool can hold: the largest room left, and why."""
    best_shared = max(range(len(pools)), key=lambda p: (ledger.allocatable(p), -p))
    best_slice = max(
        range(len(pools)),
        key=lambda p: (len(ledger.shared_cpus[p] - ledger.partial), -p),
    )
    root_zone = pools[0].nodes_of(tiers)
    parts = []
    if req.exclusive:
        parts.append(f"{req.exclusive} exclusive CPUs")
    if req.shared or req.kind is CpuKind.SHARED:
        parts.append(f"{req.shared}m shared CPU")
    if size:
        parts.append(f"{format_bytes(size)} of {','.join(sorted(tiers))} memory")
    wanted = f"{' + '.join(parts)} ({req.kind})"
    return (
        f"{req.who}: no pool can hold {wanted}. Largest free: "
        f"{ledger.allocatable(best_shared)}m shared CPU in {pools[best_shared].name}, "
        f"{len(ledger.shared_cpus[best_slice] - ledger.partial)} CPUs to slice in "
        f"{pools[best_slice].name}, {format_bytes(max(book.free(root_zone), 0))} of "
        f"memory. ({why})"
    )
