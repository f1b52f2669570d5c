"""The CPU allocator: pure functions that pick which CPUs a container gets.

Engine-facing contract
----------------------
Every function takes the immutable `Machine` and the CPUs the caller may hand out (`available`),
and returns a new frozenset; nothing is read from or written to the system, no state is kept, and
the same input always gives the same output. Failures raise `AllocationError` (a `ValueError`)
whose message says what was asked and what was available; the caller's sets are never touched.

* `take_cpus(machine, available, count, full_pcpus_only=False, prefer=frozenset())`
  The packed picker, used for exclusive CPUs, reserved CPUs and slicing. `prefer` CPUs (for
  example isolated or hinted ones) are used first, the rest comes from the other available CPUs.
* `take_distributed(machine, available, count, group_size=1, full_pcpus_only=False, min_nodes=0)`
  KEP-2902 "distribute-cpus-across-numa": `count` spread evenly over the fewest NUMA nodes, in
  multiples of `group_size` per node; `min_nodes` raises the node count (a multi-node hint).
* NUMA node sets by distance (KEP-3545: `average_distance`, `closest_node_sets`,
  `best_node_set`) live in `nri_topology.policy.numasets` and raise the same `AllocationError`.

Packed algorithm (`take_cpus`)
------------------------------
The machine is seen as a tree: first level, second level, L3 group, cluster, L2 group, core.
The first two levels are NUMA node then package when there are at least as many packages as
NUMA nodes, else package then NUMA node (sub-NUMA clustering, AMD NPS>1) — as the kubelet does.
A cache level that would cut a physical core in two is left out. Siblings are always visited in
"packing" order: fewest free CPUs first, then lowest id, so the most used part of the machine is
filled first and idle parts stay whole.

Going down the levels, at each level we
1. take every completely free unit that is not larger than what is still needed, and then
2. narrow the search to the smallest unit that can hold the whole rest (enough free CPUs, and
   enough of them in whole free cores), the first such unit in packing order at the deepest
   level that has one. This keeps an allocation inside one L3 group (AMD CCX) or one cluster
   (ARM) when it fits there, instead of spilling from a nearly full group into the next one.
At the core level whole free cores that fit are taken, then single threads, half-used cores
first (completing cores other containers already broke). Without cache groups below the package
(most Intel servers) this gives the kubelet's `takeByTopologyNUMAPacked` sets; with cache groups
it gives the kubelet's `prefer-align-cpus-by-uncorecache` sets for its test topologies, except
where the kubelet ignores packing inside a cache (its test case 18). Intended difference: a
request that fits in one unit is never split over two, even when the kubelet's plain order would
start in a fuller unit that cannot hold it.

`full_pcpus_only`: only CPUs of physical cores whose online threads are all available are used,
`count` must be a multiple of the threads per core, and a core is never split. Cores missing a
thread (offline sibling) are used after full-size ones; if the request cannot be made of whole
cores exactly (possible only then), AllocationError says so.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import combinations

from nri_topology.topology import cpuset
from nri_topology.topology.model import Cpu, Machine

__all__ = ["AllocationError", "take_cpus", "take_distributed"]


class AllocationError(ValueError):
    """CPUs cannot be picked as asked; the message says what was asked and what was available."""


@dataclass(frozen=True, slots=True)
class _Unit:
    """One node of the machine tree: a package, NUMA node, cache group or core."""

    depth: int  # -1 for the root, len(levels)-1 for cores
    order: int  # tie-break id when sorting siblings
    cpus: frozenset[int]  # all online CPUs of the unit (not only the available ones)
    children: tuple[_Unit, ...]
    mask: int  # `cpus` as a bit mask: the walks count free CPUs with one AND and a bit count
    size: int  # len(cpus)


@dataclass(frozen=True, slots=True)
class _Tree:
    """The machine tree of one machine, with what every walk of it needs at hand."""

    root: _Unit
    depths: dict[str, int]  # the depth of each level by name
    cores: tuple[_Unit, ...]  # the core units, in id order


def _mask(cpus: Iterable[int]) -> int:
    mask = 0
    for c in cpus:
        mask |= 1 << c
    return mask


def _ids(mask: int) -> list[int]:
    """The CPU ids of a bit mask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


# A level maps a CPU to (grouping key, explicit order id or None = lowest CPU id of the group).
_Level = Callable[[Cpu], tuple[object, int | None]]


def _levels(machine: Machine) -> list[tuple[str, _Level]]:
    """Tree levels from the largest unit to the core, ordered like the kubelet's packer."""

    def package(c: Cpu) -> tuple[object, int | None]:
        return ("package", c.package), c.package

    def node(c: Cpu) -> tuple[object, int | None]:
        return ("node", c.node), c.node

    def l3(c: Cpu) -> tuple[object, int | None]:
        return ("l3", min(c.l3)), None

    def cluster(c: Cpu) -> tuple[object, int | None]:
        return ("cluster", c.package, c.die, c.cluster), None

    def l2(c: Cpu) -> tuple[object, int | None]:
        return ("l2", min(c.l2)), None

    def core(c: Cpu) -> tuple[object, int | None]:
        return ("core", *c.core_key), None

    top = [("node", node), ("package", package)]
    first = top if _numa_first(machine) else top[::-1]
    caches: list[tuple[str, _Level]] = [("l3", l3), ("cluster", cluster), ("l2", l2)]
    # A level that would cut a physical core in two (e.g. an L2 reported per thread) is dropped:
    # cores must stay whole leaves of the tree.
    kept = [
        (name, level)
        for name, level in (*first, *caches)
        if all(len({level(machine.cpus[i])[0] for i in c}) == 1 for c in machine.cores)
    ]
    return [*kept, ("core", core)]


def _numa_first(machine: Machine) -> bool:
    """NUMA nodes are the top level unless there are more of them than packages."""
    return len(machine.packages) >= len({c.node for c in machine.cpus.values()})


# Trees by machine identity; an entry goes away with its machine (Machine is not hashable, and
# is immutable, so a tree never goes stale while its machine lives).
_trees: dict[int, tuple[weakref.ref[Machine], _Tree]] = {}


def _tree(machine: Machine) -> _Tree:
    """The machine tree, built once per machine."""
    key = id(machine)
    entry = _trees.get(key)
    if entry is not None and entry[0]() is machine:
        return entry[1]
    tree = _build_tree(machine)
    _trees[key] = (weakref.ref(machine, lambda _: _trees.pop(key, None)), tree)
    return tree


def _build_tree(machine: Machine) -> _Tree:
    named = _levels(machine)
    levels = [level for _, level in named]

    def group(cpus: list[Cpu], depth: int) -> tuple[_Unit, ...]:
        if depth == len(levels):
            return ()
        buckets: dict[object, list[Cpu]] = {}
        orders: dict[object, int | None] = {}
        for c in cpus:
            key, order = levels[depth](c)
            buckets.setdefault(key, []).append(c)
            orders[key] = order
        units = []
        for key, members in buckets.items():
            ids = frozenset(c.id for c in members)
            order = orders[key]
            units.append(
                _Unit(
                    depth,
                    min(ids) if order is None else order,
                    ids,
                    group(members, depth + 1),
                    _mask(ids),
                    len(ids),
                )
            )
        return tuple(units)

    all_cpus = machine.all_cpus
    root = _Unit(
        -1, 0, all_cpus, group(list(machine.cpus.values()), 0), _mask(all_cpus), len(all_cpus)
    )
    depths = {name: depth for depth, (name, _) in enumerate(named)}
    cores: list[_Unit] = []
    level = [root]
    while level:
        cores += [u for u in level if u.depth == depths["core"]]
        level = [k for u in level for k in u.children]
    return _Tree(root, depths, tuple(sorted(cores, key=lambda u: min(u.cpus))))


def _units_at(unit: _Unit, depth: int, free: int) -> list[_Unit]:
    """Units at `depth` below `unit` with free CPUs (a mask), in nested packing order: siblings
    by fewest free CPUs, then order id."""
    out: list[_Unit] = []
    stack = [unit]
    while stack:
        u = stack.pop()
        if u.depth == depth:
            out.append(u)
            continue
        kids = u.children
        if len(kids) == 1:
            if kids[0].mask & free:
                stack.append(kids[0])
            continue
        ranked = [((k.mask & free).bit_count(), k.order, k) for k in kids if k.mask & free]
        ranked.sort(key=_count_order)
        stack += [t[2] for t in reversed(ranked)]  # popped from the end: best first
    return out


def _count_order(t: tuple[int, int, _Unit]) -> tuple[int, int]:
    return t[0], t[1]


def _first_holder(
    scope: _Unit, depth: int, free: int, need: int, whole: int, whole_need: int
) -> _Unit | None:
    """The first unit at `depth` below `scope`, in nested packing order, with `need` free CPUs
    of which `whole_need` in whole free cores (`whole`). A unit that does not hold this has
    no descendant that does, so the walk skips it and stops at the first hit."""
    stack = [scope]
    while stack:
        u = stack.pop()
        if u.depth == depth:
            return u
        ranked = []
        for k in u.children:
            n = (k.mask & free).bit_count()
            if n >= need and (k.mask & whole).bit_count() >= whole_need:
                ranked.append((n, k.order, k))
        if not ranked:
            continue
        if u.depth == depth - 1:  # every one is a hit: the first in order is the answer
            return min(ranked, key=_count_order)[2]
        ranked.sort(key=_count_order)
        stack += [t[2] for t in reversed(ranked)]  # popped from the end: best first
    return None


def _whole_free(tree: _Tree, free: int) -> int:
    """The free CPUs (a mask) that sit in cores whose online threads are all free."""
    whole = 0
    for c in tree.cores:
        if c.mask & free == c.mask:
            whole |= c.mask
    return whole


def _whole_cores(machine: Machine, cpus: frozenset[int]) -> frozenset[int]:
    """The CPUs of `cpus` whose physical core has all its online threads in `cpus`."""
    return frozenset().union(*(core for core in machine.cores if core <= cpus))


def _check(machine: Machine, available: frozenset[int], count: int) -> None:
    if count < 0:
        raise AllocationError(f"cannot take {count} CPUs: the count must not be negative")
    unknown = available - machine.all_cpus
    if unknown:
        raise AllocationError(
            f"cannot take {count} CPUs: CPUs {cpuset.format(unknown)} are not online CPUs "
            f"of this machine (online: {cpuset.format(machine.all_cpus)})"
        )


def _check_full(machine: Machine, available: frozenset[int], count: int) -> frozenset[int]:
    """The whole free cores of `available`, after checking `count` can be made of them."""
    tpc = machine.threads_per_core
    if count % tpc:
        raise AllocationError(
            f"full-pcpus-only: {count} CPUs are not a whole number of physical cores "
            f"({tpc} threads per core); ask for a multiple of {tpc}"
        )
    whole = _whole_cores(machine, available)
    if count > len(whole):
        raise AllocationError(
            f"full-pcpus-only: {count} CPUs requested but only {len(whole)} of the "
            f"{len(available)} available CPUs are in free physical cores "
            f"({cpuset.format(whole) or 'none'})"
        )
    return whole


def _pack(machine: Machine, free_in: frozenset[int], count: int, full: bool) -> frozenset[int]:
    """The packed walk described in the module docstring; `free_in` must hold `count` CPUs.

    CPU sets are bit masks here: a walk counts the free CPUs of dozens of units."""
    tree = _tree(machine)
    root = tree.root
    core_depth = tree.depths["core"]
    tpc = machine.threads_per_core
    free = _mask(free_in)
    taken = 0
    need = count

    def smallest_holder(scope: _Unit) -> _Unit:
        whole = _whole_free(tree, free)
        for depth in range(core_depth - 1, scope.depth, -1):
            u = _first_holder(scope, depth, free, need, whole, need - need % tpc)
            if u is not None:
                return u
        return scope

    scope = root
    for depth in range(core_depth + 1):
        if depth < scope.depth:
            continue
        for u in _units_at(scope, depth, free):
            # With full_pcpus_only, units holding cores that miss a thread (offline sibling)
            # are not taken whole and such cores wait for the second pass below, so they
            # cannot leave a need that no whole core matches.
            odd = full and (u.size < tpc if depth == core_depth else u.size % tpc)
            if u.size <= need and u.mask & free == u.mask and not odd:
                taken |= u.mask
                free ^= u.mask
                need -= u.size
        if need == 0:
            return frozenset(_ids(taken))
        scope = smallest_holder(scope)
    if full:
        for area in (scope, root):
            for u in _units_at(area, core_depth, free):
                if u.size <= need and u.mask & free == u.mask:
                    taken |= u.mask
                    free ^= u.mask
                    need -= u.size
            if need == 0:
                return frozenset(_ids(taken))
        raise AllocationError(
            f"full-pcpus-only: {count} CPUs cannot be made of whole physical cores from "
            f"{cpuset.format(free_in)} (cores of unequal size); {need} CPUs short"
        )
    for area in (scope, root):
        for core in _units_at(area, core_depth, free):
            for cpu in _ids(core.mask & free):
                taken |= 1 << cpu
                free ^= 1 << cpu
                need -= 1
                if need == 0:
                    return frozenset(_ids(taken))
    raise AssertionError("the packer ran out of CPUs it had counted")  # pragma: no cover


def take_cpus(
    machine: Machine,
    available: frozenset[int],
    count: int,
    *,
    full_pcpus_only: bool = False,
    prefer: frozenset[int] = frozenset(),
) -> frozenset[int]:
    """Pick `count` CPUs of `available` with the packed algorithm (see the module docstring).

    CPUs in `prefer` are used first (as many as `count` allows), the rest from the others.
    """
    available = frozenset(available)
    _check(machine, available, count)
    if count > len(available):
        raise AllocationError(
            f"not enough CPUs: requested {count}, available {len(available)} "
            f"({cpuset.format(available) or 'none'})"
        )
    pool = _check_full(machine, available, count) if full_pcpus_only else available
    if count == 0:
        return frozenset()
    preferred = pool & prefer
    if full_pcpus_only:
        preferred = _whole_cores(machine, preferred)
    first = min(count, len(preferred))
    if full_pcpus_only:
        first -= first % machine.threads_per_core
    if first == 0:
        return _pack(machine, pool, count, full_pcpus_only)
    head = _pack(machine, preferred, first, full_pcpus_only)
    if first == count:
        return head
    return head | _pack(machine, pool - head, count - first, full_pcpus_only)


def _round3(x: float) -> float:
    """Round half away from zero to 3 decimals, as the kubelet's balance score does."""
    return math.floor(x * 1000 + 0.5) / 1000


def _stddev(values: list[int]) -> float:
    """Population standard deviation with the mean and the result rounded to 3 decimals."""
    mean = _round3(sum(values) / len(values))
    return _round3(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))


def _node_order(machine: Machine, free: frozenset[int]) -> list[int]:
    """NUMA nodes with free CPUs, in the packer's nested order (most used first)."""
    tree = _tree(machine)
    seen: dict[int, None] = {}
    for u in _units_at(tree.root, tree.depths["node"], _mask(free)):
        seen.setdefault(machine.cpus[min(u.cpus)].node)
    return list(seen)


def _hand_out(after: dict[int, int], nodes: tuple[int, ...], remainder: int, g: int) -> bool:
    """Give `remainder` CPUs, `g` at a time round-robin over `nodes`; False if they cannot."""
    if sum(after[n] // g for n in nodes) * g < remainder:
        return False
    while remainder > 0:
        for n in nodes:
            if remainder == 0:
                break
            if after[n] >= g:
                after[n] -= g
                remainder -= g
    return True


def _best_combo(
    order: list[int], free_of: dict[int, int], count: int, g: int, k: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The most balanced k-node combination and its remainder nodes, or None if none fits."""
    best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
    for combo in combinations(order, k):
        if best is not None and best[0] == 0:
            break
        if sum(free_of[n] for n in combo) < count:
            continue
        if sum(free_of[n] // g for n in combo) * g < count:
            continue
        share = count // k // g * g
        if any(free_of[n] < share for n in combo):
            continue
        after = {n: free_of[n] for n in order}
        for n in combo:
            after[n] -= share
        remainder = count - share * k
        local: tuple[float, tuple[int, ...]] | None = None
        if remainder == 0:
            local = (_stddev(list(after.values())), ())
        else:
            spare = tuple(n for n in combo if after[n] >= g)
            for size in range(len(spare), 0, -1):
                for subset in combinations(spare, size):
                    trial = dict(after)
                    if not _hand_out(trial, subset, remainder, g):
                        continue
                    score = _stddev(list(trial.values()))
                    if local is None or score < local[0]:
                        local = (score, subset)
        if local is not None and (best is None or local[0] < best[0]):
            best = (local[0], combo, local[1])
    return None if best is None else (best[1], best[2])


def take_distributed(
    machine: Machine,
    available: frozenset[int],
    count: int,
    *,
    group_size: int = 1,
    full_pcpus_only: bool = False,
    min_nodes: int = 0,
) -> frozenset[int]:
    """KEP-2902 distribute-cpus-across-numa, the kubelet's `takeByTopologyNUMADistributed`.

    Tries node counts from the least that can hold `count` (given how many `group_size` groups
    a node holds) upwards, never below `min_nodes` when that many nodes can be used. For each
    count, every combination in packing order gets an even share of whole groups; the remainder
    goes round-robin, a group at a time, over the subset of the combination that leaves the free
    CPUs of all nodes most balanced (lowest population standard deviation). Within a node the
    CPUs are picked by `take_cpus`. Falls back to `take_cpus` when `count` is not a multiple of
    the group size or no combination fits. With `full_pcpus_only` the group is widened to a
    whole number of cores (least common multiple with the threads per core).
    """
    available = frozenset(available)
    _check(machine, available, count)
    if group_size < 1:
        raise AllocationError(f"group size must be at least 1, not {group_size}")
    if count > len(available):
        raise AllocationError(
            f"not enough CPUs: requested {count}, available {len(available)} "
            f"({cpuset.format(available) or 'none'})"
        )
    g = group_size
    free = available
    if full_pcpus_only:
        free = _check_full(machine, available, count)
        g = math.lcm(g, machine.threads_per_core)
    if count == 0:
        return frozenset()
    if count % g:
        return take_cpus(machine, free, count, full_pcpus_only=full_pcpus_only)

    node_cpus: dict[int, frozenset[int]] = {}
    for c in machine.cpus.values():
        node_cpus[c.node] = node_cpus.get(c.node, frozenset()) | {c.id}
    order = _node_order(machine, free)
    free_of = {n: len(node_cpus[n] & free) for n in order}
    groups = -(-len(machine.cpus) // g)
    per_node = -(-groups // len(node_cpus))
    needed = -(-count // g)
    lo = -(-needed // per_node)
    hi = min(needed, len(order))
    if lo < min_nodes <= hi:
        lo = min_nodes
    for k in range(lo, hi + 1):
        found = _best_combo(order, free_of, count, g, k)
        if found is None:
            continue
        combo, spare = found
        share = count // k // g * g
        result: set[int] = set()
        for n in combo:
            result |= take_cpus(
                machine, (node_cpus[n] & free) - result, share, full_pcpus_only=full_pcpus_only
            )
        remainder = count - share * k
        while remainder > 0:
            for n in spare:
                if remainder == 0:
                    break
                left = (node_cpus[n] & free) - result
                if len(left) >= g:
                    result |= take_cpus(machine, left, g, full_pcpus_only=full_pcpus_only)
                    remainder -= g
        return frozenset(result)
    return take_cpus(machine, free, count, full_pcpus_only=full_pcpus_only)
