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
  `best_node_set`) live in `numasets` beside it and raise the same `AllocationError`.

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
    widest: int  # the size of the largest child (0 for a core): no child holds more
    chain: int  # the depth down to which the unit goes on as a single child (its own if none)
    # Every child is one core of at most two threads and is ordered by its lowest CPU: the
    # first child holding a need is then found on the masks of the cores' lowest threads.
    core_kids: bool


@dataclass(frozen=True, slots=True)
class _Tree:
    """The machine tree of one machine, with what every walk of it needs at hand."""

    root: _Unit
    depths: dict[str, int]  # the depth of each level by name
    core_depth: int
    threads_per_core: int
    smallest: tuple[int, ...]  # by depth, the size of the smallest unit: a need below takes none
    at: tuple[dict[int, _Unit], ...]  # by depth: CPU id -> its unit at that depth
    node_cpus: dict[int, frozenset[int]]  # NUMA node id (-1: none) -> its online CPUs
    width: int  # the highest CPU id + 1
    # The cores grouped by shape: (offsets of the other threads from the lowest, mask of the
    # lowest threads). Whole free cores are then found with a few shifts per shape, not a
    # test per core; a machine has one or two shapes (more only with odd numbering).
    core_shapes: tuple[tuple[tuple[int, ...], int], ...]


def _mask(cpus: Iterable[int]) -> int:
    mask = 0
    for c in cpus:
        mask |= 1 << c
    return mask


_BINARY = bytes.maketrans(b"\x00\x01", b"01")


def _cpus_mask(tree: _Tree, cpus: frozenset[int]) -> int:
    """CPUs of the tree's machine as a bit mask. A large set is written a byte per CPU and read
    back as binary digits in one go: shifting CPU by CPU makes a new big int for each."""
    if len(cpus) < 64:
        return _mask(cpus)
    digits = bytearray(tree.width)
    for c in cpus:
        digits[c] = 1
    return int(digits.translate(_BINARY)[::-1], 2)


def _ids(mask: int) -> list[int]:
    """The CPU ids of a bit mask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _lowest(mask: int, n: int) -> int:
    """The `n` lowest CPUs of a bit mask (all of them when it has fewer)."""
    out = 0
    while mask and n:
        low = mask & -mask
        out |= low
        mask ^= low
        n -= 1
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
            children = group(members, depth + 1)
            units.append(new_unit(depth, min(ids) if order is None else order, ids, children))
        return tuple(units)

    core_depth = len(levels) - 1
    pairs = machine.threads_per_core <= 2

    def new_unit(depth: int, order: int, ids: frozenset[int], children: tuple[_Unit, ...]) -> _Unit:
        return _Unit(
            depth,
            order,
            ids,
            children,
            _mask(ids),
            len(ids),
            max((k.size for k in children), default=0),
            children[0].chain if len(children) == 1 else depth,
            pairs
            and bool(children)
            and all(k.chain == core_depth and k.order == min(k.cpus) for k in children),
        )

    root = new_unit(-1, 0, machine.all_cpus, group(list(machine.cpus.values()), 0))
    depths = {name: depth for depth, (name, _) in enumerate(named)}
    shapes: dict[tuple[int, ...], int] = {}
    for core in machine.cores:
        low, *rest = sorted(core)
        offsets = tuple(c - low for c in rest)
        shapes[offsets] = shapes.get(offsets, 0) | 1 << low
    smallest = [len(machine.all_cpus)] * len(levels)
    at: list[dict[int, _Unit]] = []
    level = list(root.children)
    while level:
        smallest[level[0].depth] = min(u.size for u in level)
        at.append({c: u for u in level for c in u.cpus})
        level = [k for u in level for k in u.children]
    return _Tree(
        root,
        depths,
        core_depth,
        machine.threads_per_core,
        tuple(smallest),
        tuple(at),
        _node_cpus(machine),
        max(machine.all_cpus, default=-1) + 1,
        tuple(shapes.items()),
    )


def _node_cpus(machine: Machine) -> dict[int, frozenset[int]]:
    """The online CPUs of each NUMA node, and of node -1 for CPUs no node lists."""
    cpus: dict[int, set[int]] = {}
    for c in machine.cpus.values():
        cpus.setdefault(c.node, set()).add(c.id)
    return {n: frozenset(ids) for n, ids in cpus.items()}


def _units_at(tree: _Tree, unit: _Unit, depth: int, free: int) -> list[_Unit]:
    """Units at `depth` below `unit` with free CPUs (a mask), in nested packing order: siblings
    by fewest free CPUs, then order id."""
    out: list[_Unit] = []
    stack = [unit]
    while stack:
        u = stack.pop()
        if u.depth < depth and u.mask & free:  # a single child has its parent's free CPUs
            u = _down_to(u, min(u.chain, depth))
        if u.depth == depth:
            out.append(u)
        elif u.core_kids:  # each child is one unit at `depth`, walked right after `u`
            at = tree.at[depth]
            for n in (1, 2):
                out += [at[c] for c in _ids(_cores_with(tree, free, n) & u.mask)]
        else:
            # Order ids differ between siblings, so sorting never compares the units themselves.
            ranked = [
                ((k.mask & free).bit_count(), k.order, k) for k in u.children if k.mask & free
            ]
            ranked.sort()
            stack += [t[2] for t in reversed(ranked)]  # popped from the end: best first
    return out


def _deepest_holder(tree: _Tree, scope: _Unit, free: int, need: int) -> _Unit:
    """The smallest unit below `scope` that can hold the whole rest: `need` free CPUs of which
    as many as whole cores can give in whole free cores. It is the first such unit, in nested
    packing order, at the deepest level above the cores that has one; `scope` when none has.

    One walk in packing order, keeping the first unit met at the deepest level so far. A unit
    that does not hold the rest has no descendant that does, so only holders are entered, and
    none whose children are all smaller than `need`. A single child holds what its parent
    does and comes right after it, so chains of them are gone down at once; the walk ends at
    the first holder whose chain reaches the level above the cores (nothing is deeper)."""
    last = tree.core_depth - 1
    if scope.depth >= last:
        return scope
    whole_need = need - need % tree.threads_per_core
    whole = _whole_free(tree, free) if whole_need else 0
    best = scope
    stack = [scope]
    while stack:
        u = stack.pop()
        if u is not scope:  # a holder (the scope need not be one), and so is its chain
            if u.chain >= last:
                return _down_to(u, last)
            u = _down_to(u, u.chain)
            if u.depth > best.depth:
                best = u  # the first one at a new depth: walks in pre-order meet it first
        if need > u.widest:
            continue
        if u.core_kids:
            found = _first_core(tree, u, free, need)
            if found is not None:
                return found
            continue
        ranked = []
        for k in u.children:
            n = (k.mask & free).bit_count()
            if n >= need and (not whole_need or (k.mask & whole).bit_count() >= whole_need):
                ranked.append((n, k.order, k))
        if not ranked:
            continue
        first = min(ranked)  # order ids differ between siblings: units are never compared
        if first[2].chain >= last:  # it is walked next
            return _down_to(first[2], last)
        ranked.sort()
        stack += [t[2] for t in reversed(ranked)]  # popped from the end: best first
    return best


def _first_core(tree: _Tree, unit: _Unit, free: int, need: int) -> _Unit | None:
    """The first child of `unit` (one with `core_kids`) holding `need`, at most two, free
    CPUs, as the walk would find it: fewest free first, then the lowest first CPU. Children of
    one core hold `need` exactly when that many of its threads are free (two: the core is
    whole); the answer is its unit at the level above the cores, or None."""
    for n in range(need, 3):
        lows = _cores_with(tree, free, n) & unit.mask
        if lows:
            return tree.at[tree.core_depth - 1][(lows & -lows).bit_length() - 1]
    return None


def _cores_with(tree: _Tree, free: int, n: int) -> int:
    """The lowest threads (a mask) of the cores with exactly `n` free threads, 1 or 2, on a
    machine of at most two threads per core."""
    lows = 0
    for offsets, base in tree.core_shapes:
        if not offsets:
            lows |= free & base if n == 1 else 0
        elif n == 1:
            lows |= (free ^ free >> offsets[0]) & base
        else:
            lows |= free & free >> offsets[0] & base
    return lows


def _down_to(unit: _Unit, depth: int) -> _Unit:
    """The unit at `depth` that `unit` goes on as through single children."""
    while unit.depth < depth:
        unit = unit.children[0]
    return unit


def _whole_free(tree: _Tree, free: int) -> int:
    """The free CPUs (a mask) that sit in cores whose online threads are all free."""
    whole = 0
    for offsets, lows in tree.core_shapes:
        w = free & lows
        for d in offsets:
            w &= free >> d
        for d in offsets:
            whole |= w << d
        whole |= w
    return whole


def _check(machine: Machine, available: frozenset[int], count: int) -> None:
    if count < 0:
        raise AllocationError(f"cannot take {count} CPUs: the count must not be negative")
    if not available <= machine.all_cpus:
        raise AllocationError(
            f"cannot take {count} CPUs: CPUs {cpuset.format(available - machine.all_cpus)} are "
            f"not online CPUs of this machine (online: {cpuset.format(machine.all_cpus)})"
        )


def _check_full(tree: _Tree, available: int, count: int) -> int:
    """The whole free cores of `available` (a mask), after checking `count` can be made of
    them."""
    tpc = tree.threads_per_core
    if count % tpc:
        raise AllocationError(
            f"full-pcpus-only: {count} CPUs are not a whole number of physical cores "
            f"({tpc} threads per core); ask for a multiple of {tpc}"
        )
    whole = _whole_free(tree, available)
    if count > whole.bit_count():
        raise AllocationError(
            f"full-pcpus-only: {count} CPUs requested but only {whole.bit_count()} of the "
            f"{available.bit_count()} available CPUs are in free physical cores "
            f"({cpuset.format(_ids(whole)) or 'none'})"
        )
    return whole


def _may_take(tree: _Tree, scope: _Unit, depth: int, free: int, need: int) -> bool:
    """Whether a unit at `depth` in `scope` may be taken whole, so that the level is worth
    walking. One that is is not larger than `need` and is all free, so made of whole free
    cores: with a need or whole free cores of the scope below the smallest unit of the level,
    none is. (At the scope's own depth the walk is the scope alone: no check needed.)"""
    smallest = tree.smallest[depth]
    if need < smallest:
        return False
    return depth == scope.depth or (_whole_free(tree, free) & scope.mask).bit_count() >= smallest


def _pack(tree: _Tree, free: int, count: int, full: bool) -> int:
    """The packed walk described in the module docstring, on bit masks: `count` CPUs of
    `free`, which must hold them."""
    root = tree.root
    core_depth = tree.core_depth
    tpc = tree.threads_per_core
    free_in = free
    taken = 0
    need = count

    def take(mask: int) -> None:
        nonlocal taken, free, need
        taken |= mask
        free ^= mask
        need -= mask.bit_count()

    scope = root
    for depth in range(core_depth + 1):
        if depth < scope.depth:
            continue
        if _may_take(tree, scope, depth, free, need):
            units = _units_at(tree, scope, depth, free)
        else:
            units = []
        for u in units:
            # With full_pcpus_only, units holding cores that miss a thread (offline sibling)
            # are not taken whole and such cores wait for the second pass below, so they
            # cannot leave a need that no whole core matches.
            odd = full and (u.size < tpc if depth == core_depth else u.size % tpc)
            if u.size <= need and u.mask & free == u.mask and not odd:
                take(u.mask)
                if need == 0:
                    return taken
        scope = _deepest_holder(tree, scope, free, need)
    for area in (scope, root):
        for core in _units_at(tree, area, core_depth, free):
            if not full:
                take(_lowest(core.mask & free, need))
            elif core.size <= need and core.mask & free == core.mask:
                take(core.mask)
            if need == 0:
                return taken
    if full:
        raise AllocationError(
            f"full-pcpus-only: {count} CPUs cannot be made of whole physical cores from "
            f"{cpuset.format(_ids(free_in))} (cores of unequal size); {need} CPUs short"
        )
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
    tree = _tree(machine)
    pool = _cpus_mask(tree, available)
    if full_pcpus_only:
        pool = _check_full(tree, pool, count)
    if count == 0:
        return frozenset()
    preferred = _cpus_mask(tree, available & prefer) & pool if prefer else 0
    if full_pcpus_only:
        preferred = _whole_free(tree, preferred)
    first = min(count, preferred.bit_count())
    if full_pcpus_only:
        first -= first % tree.threads_per_core
    if first == 0:
        return frozenset(_ids(_pack(tree, pool, count, full_pcpus_only)))
    head = _pack(tree, preferred, first, full_pcpus_only)
    if first < count:
        head |= _pack(tree, pool & ~head, count - first, full_pcpus_only)
    return frozenset(_ids(head))


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
    for u in _units_at(tree, tree.root, tree.depths["node"], _cpus_mask(tree, free)):
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
        tree = _tree(machine)
        free = frozenset(_ids(_check_full(tree, _cpus_mask(tree, available), count)))
        g = math.lcm(g, machine.threads_per_core)
    if count == 0:
        return frozenset()
    if count % g:
        return take_cpus(machine, free, count, full_pcpus_only=full_pcpus_only)

    node_cpus = _tree(machine).node_cpus
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
