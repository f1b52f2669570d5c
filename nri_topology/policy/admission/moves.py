"""Consolidation: room for a grant that does not fit, made by moving a few shared containers.

Every pool that hosts a shared container keeps whole CPUs for it, so shared containers spread
over several pools can leave no pool able to slice the exclusive CPUs of a new container (or hold
a large shared one) although the machine has the CPUs. Instead of refusing it, the engine moves
shared containers out of the way: only containers on nothing but shared CPUs (never exclusive,
mixed, isolated, reserved or preserved ones), at most `Options.max_moves` of them, and the least
disruptive set that works:

* candidate sets come per pool that has the CPUs once its subtree is emptied of shared
  containers: its shared containers, those of its emptiest pools first (a pool with one shared
  container frees a whole CPU by one move), larger requests first within a pool; every prefix of
  that list up to `max_moves` is a candidate;
* candidates are tried fewest moves first, then least milli-CPU moved, then pool order, at most
  `MAX_TRIALS` of them; the first that works is taken.

A trial takes the movers out, places the new container, then places the movers again wherever the
normal scoring puts them (the reserved CPUs as last resort, as for any shared container); it is
undone entirely when any of them does not fit. The decision lists the moved containers and carries
an update for each whose cpuset or memset changed. Nothing moves unless the container would
otherwise be refused or degraded, or (`better_shape`) an exclusive grant would otherwise split
cores or span more NUMA nodes than the moves leave it: a pool with shared containers keeps whole
CPUs for them, so a few of them in sibling pools can leave only half cores on two NUMA nodes
where the kubelet's static policy would give a whole core of one. Then the same candidates, of
pools spanning no more NUMA nodes than the grant, are tried, and a trial is kept only when its
grant is better by `shape`: fewer NUMA nodes outside the container's device hints, then fewer
NUMA nodes, then fewer split cores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nri_topology.policy.accounts.grant import Grant, Op
from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.pools import Pool, subtree
from nri_topology.policy.types import (
    EXCLUSIVE_KINDS,
    CpuKind,
    Outcome,
    PoolScore,
    Request,
    Verdict,
)
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

MAX_TRIALS = 32

# A trial (`rungs.try_moves`): take the movers out, place the request, place the movers again;
# the committed grant, its trace and the movers' old grants, or None with nothing changed.
Moved = tuple[Grant, tuple[PoolScore, ...], dict[str, Grant]]
Trial = Callable[[Request, int | None, frozenset[int], tuple[str, ...], Op], Moved | None]
# The same trial, kept only when the request's grant is better than the one it would get as is.
BetterTrial = Callable[
    [Request, int | None, frozenset[int], tuple[str, ...], Op, Callable[[Grant], bool]],
    Moved | None,
]


def candidates(
    pools: Sequence[Pool], ledger: Ledger, max_moves: int, req: Request, nodes: int = 0
) -> list[tuple[str, ...]]:
    """Sets of shared containers to move, least disruptive first (see the module docstring);
    with `nodes`, only of pools whose CPUs span at most that many NUMA nodes."""
    bound = max_moves
    if bound <= 0:
        return []
    k = req.exclusive if req.kind in EXCLUSIVE_KINDS else 0
    seen: set[frozenset[str]] = set()
    found: list[tuple[int, int, int, tuple[str, ...]]] = []
    for pool in pools:
        p = pool.index
        shared_cpus = ledger.shared_cpus[p]
        room = len(shared_cpus - ledger.partial)
        if room < k or (not k and 1000 * len(shared_cpus) < req.shared):
            continue
        if nodes and len(pool.cpu_nodes) > nodes:
            continue
        groups = [
            sorted(
                (g for g in ledger.users[x].values() if _movable(g, req)),
                key=lambda g: (-g.shared, g.request.container_id),
            )
            for x in subtree(pools, p)
        ]
        groups = [gs for gs in groups if gs]
        groups.sort(key=lambda gs: (len(gs), sum(g.shared for g in gs)))
        movers = [g for gs in groups for g in gs]
        for n in range(1, min(bound, len(movers)) + 1):
            ids = tuple(g.request.container_id for g in movers[:n])
            if frozenset(ids) in seen:
                continue
            seen.add(frozenset(ids))
            found.append((n, sum(g.shared for g in movers[:n]), p, ids))
    found.sort(key=lambda c: c[:3])
    return [ids for *_, ids in found[:MAX_TRIALS]]


def _movable(g: Grant, req: Request) -> bool:
    return g.kind is CpuKind.SHARED and g.request.container_id != req.container_id


def make_room(
    found: list[tuple[str, ...]],
    trial: Trial,
    req: Request,
    hint: int | None,
    keep: frozenset[int],
    op: Op,
) -> Moved | None:
    """Place `req` after moving the first set of `found` (`candidates`) that makes it fit; None
    when none does.

    Returns the committed grant, its trace and the old grants of the moved containers.
    """
    for movers in found:
        done = trial(req, hint, keep, movers, op)
        if done is not None:
            g, trace, olds = done
            g.reason += f"; made room by moving {len(olds)} shared container(s)"
            return g, trace, olds
    return None


def shape(machine: Machine, cpus: frozenset[int], hint: frozenset[int]) -> tuple[int, int, int]:
    """How well exclusive CPUs sit, lower is better: NUMA nodes outside the device hints (none
    without hints), NUMA nodes, cores of which they hold only some threads."""
    nodes = {machine.cpus[c].node for c in cpus}
    split = {machine.cpus[c].threads for c in cpus if not machine.cpus[c].threads <= cpus}
    return (len(nodes - hint) if hint else 0, len(nodes), len(split))


def _best(machine: Machine, k: int) -> tuple[int, int]:
    """The fewest NUMA nodes and split cores `k` CPUs could have on this machine (its counts
    kept with it: a walk over every CPU for each exclusive grant cost 14 µs on 144 CPUs)."""
    return -(-k // machine.most_node_cpus), (1 if k % machine.most_threads else 0)


def better_shape(
    machine: Machine,
    pools: Sequence[Pool],
    ledger: Ledger,
    max_moves: int,
    trial: BetterTrial,
    req: Request,
    g: Grant,
    trace: tuple[PoolScore, ...],
    op: Op,
) -> Moved | None:
    """Place a new exclusive `req` better than `g` (chosen, not committed) by moving shared
    containers; None, nothing changed, when `g` is as good as it can be or no move helps.

    Returns the committed grant, its trace (where the pool `g` was in gets the verdict that it
    lost to the moves) and the old grants of the moved containers.
    """
    if req.kind is not CpuKind.EXCLUSIVE or g.kind is not CpuKind.EXCLUSIVE or g.isolated:
        return None
    now = shape(machine, g.exclusive, req.hint_nodes)
    if now[0] == 0 and now[1:] <= _best(machine, len(g.exclusive)):
        return None

    def better(h: Grant) -> bool:
        return shape(machine, h.exclusive, req.hint_nodes) < now

    for movers in candidates(pools, ledger, max_moves, req, now[1]):
        done = trial(req, None, frozenset(), movers, op, better)
        if done is None:
            continue
        placed, chosen, olds = done
        nodes = cpuset.format(frozenset(machine.cpus[c].node for c in g.exclusive))
        was = f"CPUs {cpuset.format(g.exclusive)} on NUMA nodes {nodes}"
        placed.reason += (
            f"; moved {len(olds)} shared container(s) for whole cores on fewer NUMA nodes "
            f"(else {was})"
        )
        pool, winner = pools[g.pool].name, pools[placed.pool].name
        lost = Verdict(Outcome.LOST, was, winner, f"moving {', '.join(sorted(olds))}")
        chosen = tuple(
            PoolScore(s.pool, s.key, lost) if s.pool == pool and s.pool != winner else s
            for s in chosen
        )
        return placed, chosen, olds
    return None
