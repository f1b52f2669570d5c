"""Pool scoring: an explicit sort key per pool, smallest key wins.

Pools that cannot hold the request are filtered out first (not enough shared capacity, not enough
CPUs that can be sliced off without starving a shared container, required isolated CPUs missing,
memory that does not fit even after widening to the root). The feasible pools are then sorted by
this tuple, criterion by criterion:

1. `affinity` - minus the affinity score: the summed weights of the containers the request wants
   to be near (negative for anti-affinity) in the pool's subtree and ancestors, each scaled by
   0.75 per tree level between the two pools (reference section 4.4). Affinity beats everything
   else because the user asked for it.
1a. `hints` - topology hints: how many of the NUMA nodes of the container's devices (found by
   the daemon from its devices, device mounts and the kubelet's PodResources API) the pool does
   not cover; 0 for every pool of a container without hints. Pools covering every device come
   first, and among them `numa` and `depth` pick the tightest. With strict hints, pools with CPUs
   outside the hinted nodes are filtered out instead (see `engine`).
2. `tiers` - 0 when the pool has memory of every requested tier, else 1.
3. `memory` - 0 when the memory fits in the pool's own nodes, 1 when it only fits after widening
   to an ancestor's nodes (relaxation).
4. `burst` - Burstable containers with a CPU limit: 0 when the pool's free shared capacity
   covers the limit, else 1 (a pool that would throttle the burst range loses).
5. `isolated` - isolated requests: 0 when the pool has enough free isolated CPUs, else 1.
6. `numa` - (number of NUMA nodes the grant would span, their average distance over all ordered
   pairs, self-pairs included): the fewest and closest nodes win (KEP-3545 measure). For
   exclusive CPUs (with prefer_closest_numa and without distribute_across_numa) that is the best
   node set of the pool's free CPUs (`numasets.grant_nodes`), and the grant then takes its CPUs
   from that set only: so the root, whose free CPUs sit on two far nodes, beats a socket whose
   free CPUs need three near ones. Shared, mixed and isolated grants run on the pool's CPUs, so
   for them it is all the pool's nodes.
7. `cores` - hybrid machines, exclusive requests with a CPU priority: 0 when the pool's free
   CPUs include enough of the preferred core kind (performance cores for high and normal,
   efficiency cores for low), else 1. After `numa`: a container rather takes the other kind of
   core than spans one more NUMA node.
8. `depth` - minus the depth: the deeper, tighter pool wins.
9. `load` - exclusive requests: (0, minus free shared capacity): spread exclusive CPUs to the pool
   with most room; shared requests: (shared containers in the pool, minus free shared capacity):
   idle pools before busy ones (with `shared_placement: pack` the first element is 0 for pools
   whose subtree already hosts shared containers and 1 for the others: busy pools first).
10. `index` - the pool's pre-order number: same input, same decision.

Rules deliberately changed from the reference (topology-aware of nri-plugins):
* pools that cannot fit are filtered out, and a failed grant falls back to the next pool (the
  reference sorts them last, uses the first and fails);
* a total order on tuples replaces the reference comparator, which is not transitive for
  unlimited Burstable containers;
* memory capacity for unlimited Burstable containers does not pull them to the root;
* the NUMA span and distance criterion is new (the reference relies on depth alone), and it
  measures the nodes the grant would use, not the pool's: KEP-3545's "fewest nodes, then
  closest" holds whichever pools the free nodes are in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import ne
from typing import NamedTuple

from nri_topology.policy.pools import Pool


class SortKey(NamedTuple):
    """A feasible pool's sort key, compared field by field, the smallest first; each field is
    one criterion of the module docstring, in its order."""

    affinity: float  # minus the affinity score
    hints: int  # hinted NUMA nodes the pool does not cover
    tiers: int  # 1: the pool lacks a requested memory tier
    memory: int  # 1: memory fits only widened beyond the pool
    burst: int  # 1: the free shared capacity does not cover a Burstable limit
    isolated: int  # 1: too few free isolated CPUs for an isolated request
    numa: tuple[int, float]  # (nodes spanned, their average distance): `numa_measure`
    cores: int  # 1: too few free CPUs of the preferred core kind (hybrid machines)
    depth: int  # minus the pool's depth
    load: tuple[int, int]  # (colocation count or 0, minus free shared milli-CPU)
    index: int  # the pool's pre-order number


CRITERIA = SortKey._fields
_new_key = tuple.__new__

DISTANCE_DECAY = 0.75


def numa_measure(nodes: int, distance: float) -> tuple[int, float]:
    """The `numa` criterion of nodes spanned at an average distance: rounded, so that float
    noise in the distance never decides."""
    return (nodes, round(distance, 9))


def sort_key(
    pool: Pool,
    *,
    affinity: float,
    hint_miss: int,
    tier_miss: bool,
    relaxed: bool,
    burst_short: bool,
    isolated_short: bool,
    numa: tuple[int, float],
    cores_short: bool,
    colocated: int,
    free_shared: int,
) -> SortKey:
    """The sort key of a feasible pool (see the module docstring) from what was measured of it
    for one request.

    `hint_miss`: hinted NUMA nodes the pool does not cover; `numa`: the nodes the grant would
    span (`numa_measure`); `cores_short`: too few free CPUs of the preferred core kind (hybrid
    machines); `colocated`: 0 for a request taking whole CPUs (spreading), else the pool's
    colocation count; `free_shared`: milli-CPU.
    """
    return _new_key(  # in field order, without SortKey's Python-level __new__: one per pool
        SortKey,
        (
            -round(affinity, 9) if affinity else -affinity,  # most requests have none
            hint_miss,
            1 if tier_miss else 0,
            1 if relaxed else 0,
            1 if burst_short else 0,
            1 if isolated_short else 0,
            numa,
            1 if cores_short else 0,
            -pool.depth,
            (colocated, -free_shared),
            pool.index,
        ),
    )


def labelled(key: tuple[object, ...]) -> dict[str, object]:
    """A sort key as named values people can read (CPU in cores); {} for a pool that did not fit.

    The inverse of the negations `sort_key` applies, one name per value, in the key's order.
    """
    if not key:
        return {}
    affinity, hints, tiers, memory, burst, isolated, numa, cores, depth, load, index = key
    nodes, distance = numa  # type: ignore[misc]
    colocated, free = load  # type: ignore[misc]
    return {
        "affinity": -affinity + 0.0,  # type: ignore[operator]
        "hint_miss": hints,
        "tier_miss": bool(tiers),
        "memory_relaxed": bool(memory),
        "burst_short": bool(burst),
        "isolated_short": bool(isolated),
        "numa_nodes": nodes,
        "numa_distance": distance,
        "cores_short": bool(cores),
        "depth": -depth,  # type: ignore[operator]
        "colocated": colocated,
        "free_shared_cpus": -free / 1000,  # type: ignore[operator]
        "index": index,
    }


def losing_criterion(key: tuple[object, ...], winner: tuple[object, ...]) -> str:
    """Name of the first criterion on which `key` is worse than the winner's key."""
    if not len(key) == len(winner) == len(CRITERIA):
        raise ValueError(f"sort keys of {len(key)} and {len(winner)} values, not {len(CRITERIA)}")
    # compress/map run the comparison loop in C: this is done for every losing pool.
    return next(compress(CRITERIA, map(ne, key, winner)), "index")


def affinity_scores(pools: Sequence[Pool], weights: Mapping[int, float]) -> list[float]:
    """Affinity score of every pool from summed weights per pool of the other containers.

    A weight in pool x counts for pool p scaled by 0.75 to the power of their distance in the
    tree when one is an ancestor of the other; unrelated pools get nothing from it.
    """
    scores = [0.0] * len(pools)
    if not weights:
        return scores
    for x, w in weights.items():
        # x itself and its descendants-as-targets: p an ancestor of x (or x) scores w*0.75^(dx-dp)
        p: int | None = x
        while p is not None:
            scores[p] += w * DISTANCE_DECAY ** (pools[x].depth - pools[p].depth)
            p = pools[p].parent
        # p a descendant of x scores w*0.75^(dp-dx)
        stack = list(pools[x].children)
        while stack:
            d = stack.pop()
            scores[d] += w * DISTANCE_DECAY ** (pools[d].depth - pools[x].depth)
            stack.extend(pools[d].children)
    return scores
