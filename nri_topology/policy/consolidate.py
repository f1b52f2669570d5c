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
otherwise be refused or degraded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nri_topology.policy.pools import subtree
from nri_topology.policy.types import EXCLUSIVE_KINDS, CpuKind, PoolScore, Request

if TYPE_CHECKING:
    from nri_topology.policy.engine import Engine, Grant, _Op

MAX_TRIALS = 32



def candidates(engine: Engine, req: Request) -> list[tuple[str, ...]]:
    """Sets of shared containers to move, least disruptive first (see the module docstring)."""
    bound = engine.options.max_moves
    if bound <= 0:
        return []
    k = req.exclusive if req.kind in EXCLUSIVE_KINDS else 0
    seen: set[frozenset[str]] = set()
    found: list[tuple[int, int, int, tuple[str, ...]]] = []
    for pool in engine.pools:
        p = pool.index
        shared_cpus = engine.shared_cpus(p)
        room = len(engine.sliceable(p))
        if room < k or (not k and 1000 * len(shared_cpus) < req.shared):
            continue
        groups = [
            sorted(
                (g for g in engine.shared_users(x).values() if _movable(g, req)),
                key=lambda g: (-g.shared, g.request.container_id),
            )
            for x in subtree(engine.pools, p)
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
    engine: Engine, req: Request, hint: int | None, keep: frozenset[int], op: _Op
) -> tuple[Grant, tuple[PoolScore, ...], dict[str, Grant]] | None:
    """Place `req` after moving the first candidate set that makes it fit; None when none does.

    Returns the committed grant, its trace and the old grants of the moved containers.
    """
    for movers in candidates(engine, req):
        done = engine.try_moves(req, hint, keep, movers, op)
        if done is not None:
            g, trace, olds = done
            g.reason += f"; made room by moving {len(olds)} shared container(s)"
            return g, trace, olds
    return None
