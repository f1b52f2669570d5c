"""Choosing sets of NUMA nodes by distance (KEP-3545 prefer-closest-numa-nodes).

When a container does not fit in one NUMA node, the set of nodes it spans should be as small
as possible and, among sets of that size, as close together as possible: a far node costs
latency on every remote access.

* `average_distance(machine, nodes)` — the mean of the distance matrix over all ordered pairs of
  the set, self pairs included (sum / n²), as the kubelet computes it.
* `closest_node_sets(machine, candidates)` — the candidate sets sorted best first: fewer nodes,
  then lower average distance, then lower node ids (compared as sorted tuples, lowest first).
* `best_node_set(machine, nodes_free, need, fits=None)` — the best set (same order) among all
  subsets of `nodes_free` whose summed free amount covers `need` and which `fits` accepts.
* `grant_nodes(machine, cpus, count, nodes, full_cores)` — the node set an exclusive grant of
  `count` CPUs taken from `cpus` would span: the best set over the free CPUs per node. The
  engine scores a pool by this set (not by all the pool's nodes) and then takes the CPUs from
  exactly this set, so a pool whose free CPUs sit on two far nodes can beat a deeper pool whose
  free CPUs are spread over three near ones (KEP-3545: fewer nodes first).

Search bound of `best_node_set`: sizes are tried from the smallest that could cover `need`
(by the largest free amounts) upwards and the search stops at the first size with an answer.
Within a size, subsets are walked depth-first in id order and a branch is cut when its free
amount plus the largest amounts it could still add cannot cover `need`, or when its distance sum
plus the least the missing nodes could add (their cheapest contributions to the chosen nodes,
plus the smallest pair distance for each pair among themselves) already reaches the best
complete set found. So at most C(N, j) subsets are looked at for each size j up to the answer
size k (smaller sizes only when their largest amounts cover `need` but `fits` refuses them):
12870 for the worst size on 16 nodes, and usually far fewer (see benchmarks/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from nri_topology.policy.allocator.cpuallocator import AllocationError
from nri_topology.topology.model import Machine


def _distance_sum(machine: Machine, nodes: tuple[int, ...]) -> int:
    """Sum of distances over all ordered pairs of `nodes`, self pairs included."""
    try:
        return sum(machine.distance(a, b) for a in nodes for b in nodes)
    except KeyError as err:
        raise AllocationError(
            f"no distance known between NUMA nodes of {list(nodes)} (missing {err})"
        ) from None


def average_distance(machine: Machine, nodes: Iterable[int]) -> float:
    """Mean distance over all ordered pairs of the node set, self pairs included."""
    ids = tuple(sorted(set(nodes)))
    if not ids:
        raise AllocationError("the average distance of an empty NUMA node set is undefined")
    return _distance_sum(machine, ids) / len(ids) ** 2


def closest_node_sets(
    machine: Machine, candidates: Iterable[Iterable[int]]
) -> list[frozenset[int]]:
    """The candidate node sets, best first: fewest nodes, closest together, lowest ids."""
    keyed = []
    for cand in candidates:
        ids = tuple(sorted(set(cand)))
        if not ids:
            raise AllocationError("an empty NUMA node set cannot be compared by distance")
        # Within one size, comparing distance sums is comparing averages, without rounding.
        keyed.append(((len(ids), _distance_sum(machine, ids), ids), frozenset(ids)))
    keyed.sort(key=lambda t: t[0])
    return [s for _, s in keyed]


def best_node_set(
    machine: Machine,
    nodes_free: Mapping[int, int],
    need: int,
    *,
    fits: Callable[[tuple[int, ...]], bool] | None = None,
) -> tuple[int, ...]:
    """The best set of nodes of `nodes_free` whose free amounts sum to at least `need`.

    `nodes_free` maps node id -> free amount of whatever is being placed (CPUs, bytes...);
    `fits`, if given, must also accept the set (e.g. a second resource). Raises
    AllocationError when no subset qualifies.
    """
    ids = tuple(sorted(nodes_free))
    unknown = [n for n in ids if n not in machine.nodes]
    if unknown:
        raise AllocationError(f"NUMA nodes {unknown} are not nodes of this machine")
    if any(nodes_free[n] < 0 for n in ids):
        raise AllocationError(f"free amounts must not be negative: {dict(nodes_free)}")
    _distance_sum(machine, ids)  # every pair must have a distance before the search
    free = [nodes_free[n] for n in ids]
    # best_add[i][r]: the most that r nodes taken from ids[i:] can add.
    best_add: list[list[int]] = []
    for i in range(len(ids) + 1):
        tail = sorted(free[i:], reverse=True)
        sums = [0]
        for f in tail:
            sums.append(sums[-1] + f)
        best_add.append(sums)
    for k in range(1, len(ids) + 1):
        if best_add[0][k] < need:
            continue
        found = _best_of_size(machine, ids, free, best_add, need, k, fits)
        if found is not None:
            return found
    total = sum(free)
    raise AllocationError(
        f"no set of NUMA nodes covers {need}: free per node {dict(nodes_free)} "
        f"(total {total})" + ("" if total < need else ", and no covering set was accepted")
    )


def grant_nodes(
    machine: Machine,
    cpus: frozenset[int],
    count: int,
    nodes: Iterable[int],
    full_cores: bool = False,
) -> tuple[int, ...]:
    """The best node set among `nodes` whose CPUs of `cpus` hold `count` CPUs.

    With `full_cores` only CPUs whose every thread is in `cpus` count (full_pcpus_only).
    Raises AllocationError when the nodes together hold too few.
    """
    usable = cpus
    if full_cores:
        usable = frozenset(c for c in cpus if machine.cpus[c].threads <= cpus)
    node_cpus = {n: machine.nodes[n].cpus for n in nodes}
    per_node: dict[int, int] = {}
    for n in sorted(node_cpus):  # the lowest node that holds them all is the answer: stop there
        per_node[n] = len(usable & node_cpus[n])
        if per_node[n] >= count:
            return (n,)  # best_node_set's answer (self distances are equal), without pair checks
    return best_node_set(machine, {n: per_node[n] for n in node_cpus}, count)


def _best_of_size(
    machine: Machine,
    ids: tuple[int, ...],
    free: list[int],
    best_add: list[list[int]],
    need: int,
    k: int,
    fits: Callable[[tuple[int, ...]], bool] | None,
) -> tuple[int, ...] | None:
    """Depth-first branch and bound over k-subsets in id order; ties keep the earlier set."""
    n = len(ids)
    # pair[i][j]: what node j adds to a set holding node i (both directions of the pair).
    pair = [[machine.distance(a, b) + machine.distance(b, a) for b in ids] for a in ids]
    own = [machine.distance(a, a) for a in ids]
    min_pair = min((pair[i][j] for i in range(n) for j in range(n) if i != j), default=0)
    best: tuple[int, tuple[int, ...]] | None = None
    chosen: list[int] = []
    # contrib[j]: what node j would add to the distance sum of the nodes chosen so far.
    contrib = own[:]

    def walk(start: int, have: int, dist: int) -> None:
        nonlocal best
        left = k - len(chosen)
        if best is not None and left:
            # The least the missing nodes can add: the cheapest contributions to the chosen
            # nodes plus the cheapest pairs among themselves.
            cheapest = sum(sorted(contrib[start:])[:left])
            if dist + cheapest + min_pair * (left * (left - 1) // 2) >= best[0]:
                return
        if left == 0:
            if (best is None or dist < best[0]) and have >= need:
                found = tuple(ids[i] for i in chosen)
                if fits is None or fits(found):
                    best = (dist, found)
            return
        for i in range(start, n - left + 1):
            if have + best_add[i][left] < need:
                return
            added = contrib[i]
            chosen.append(i)
            for j in range(n):
                contrib[j] += pair[i][j]
            walk(i + 1, have + free[i], dist + added)
            for j in range(n):
                contrib[j] -= pair[i][j]
            chosen.pop()

    walk(0, 0, 0)
    return None if best is None else best[1]
