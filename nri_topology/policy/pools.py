"""The pool tree: the nested CPU and memory domains a container can be placed in.

Built once from the `Machine` and the CPU sets the options set aside. Levels, top down:

* `root` - all allowed CPUs, only when there is more than one socket (one socket: the socket
  pool is the root);
* `socket #<package>`;
* `die #<package>/<die>` - only when the socket has more than one die;
* `NUMA node #<id>` - only when the parent has more than one NUMA node with allowed CPUs, and
  only when each such node lies wholly inside the parent.

A level with a single child collapses into its parent. Memory-only NUMA nodes never become pools:
each one joins the pools of the CPU nodes closest to it (lowest distance) as an extra memory
tier, and so joins their ancestors too. A CPU node without memory borrows the memory of its
closest nodes that have some. Nothing here enumerates node subsets, so machines with dozens of
CPU-less nodes stay cheap.

Pools are numbered in pre-order (root 0, then children in order of their lowest CPU); the number
is the last tie-breaker of the scoring key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_topology.topology.model import Machine, MemoryTier


@dataclass(frozen=True, slots=True)
class Pool:
    """One node of the pool tree with its fixed capacity (the free part lives in the engine)."""

    index: int
    name: str
    kind: str  # "root", "socket", "die", "numa"
    depth: int
    parent: int | None
    children: tuple[int, ...]
    cpus: frozenset[int]  # allowed CPUs of the domain, including isolated and reserved ones
    isolated: frozenset[int]
    reserved: frozenset[int]  # wholly reserved CPUs (never in shared sets, never sliced)
    sharable: frozenset[int]  # cpus - isolated - reserved (a partly reserved CPU stays here)
    cpu_nodes: frozenset[int]  # NUMA nodes whose CPUs lie in this pool
    mems: Mapping[MemoryTier, frozenset[int]]  # memory nodes per tier (only tiers present)

    @property
    def nodes(self) -> frozenset[int]:
        """All memory nodes of the pool, every tier."""
        return frozenset().union(*self.mems.values())

    @property
    def tiers(self) -> frozenset[MemoryTier]:
        return frozenset(self.mems)

    def nodes_of(self, tiers: Iterable[MemoryTier]) -> frozenset[int]:
        """The pool's memory nodes of the given tiers."""
        return frozenset().union(*(self.mems.get(t, frozenset()) for t in tiers))


@dataclass(frozen=True, slots=True)
class _Domain:
    name: str
    kind: str
    cpus: frozenset[int]
    children: tuple[_Domain, ...]


def _numa_children(
    machine: Machine, cpus: frozenset[int], scope: tuple[int, ...]
) -> tuple[_Domain, ...]:
    """NUMA pools under a domain; none when it holds a single node or a node reaches outside it.

    `scope` is the domain's (package,) or (package, die): a node with CPUs elsewhere would make
    two pools of one node, so such a domain keeps no NUMA level.
    """
    by_node: dict[int, set[int]] = {}
    for c in sorted(cpus):
        by_node.setdefault(machine.cpus[c].node, set()).add(c)
    if len(by_node) < 2 or -1 in by_node:
        return ()
    for node in by_node:
        for c in machine.nodes[node].cpus:
            cpu = machine.cpus.get(c)
            if cpu is not None and (cpu.package, cpu.die)[: len(scope)] != scope:
                return ()
    kids = [_Domain(f"NUMA node #{n}", "numa", frozenset(m), ()) for n, m in by_node.items()]
    return tuple(sorted(kids, key=lambda d: min(d.cpus)))


def _socket_domain(machine: Machine, package: int, cpus: frozenset[int]) -> _Domain:
    by_die: dict[int, set[int]] = {}
    for c in cpus:
        by_die.setdefault(machine.cpus[c].die, set()).add(c)
    if len(by_die) > 1:
        dies = [
            _Domain(
                f"die #{package}/{d}",
                "die",
                frozenset(m),
                _numa_children(machine, frozenset(m), (package, d)),
            )
            for d, m in by_die.items()
        ]
        dies.sort(key=lambda d: min(d.cpus))
        return _Domain(f"socket #{package}", "socket", cpus, tuple(dies))
    children = _numa_children(machine, cpus, (package,))
    return _Domain(f"socket #{package}", "socket", cpus, children)


def _closest_memory(machine: Machine) -> dict[int, frozenset[int]]:
    """For every CPU node: the memory nodes it owns or borrows (before memory-only nodes join)."""
    with_memory = [n for n in sorted(machine.nodes) if machine.nodes[n].memory > 0]
    out: dict[int, frozenset[int]] = {}
    for n in machine.cpu_nodes:
        if machine.nodes[n].memory > 0 or not with_memory:
            out[n] = frozenset({n}) if machine.nodes[n].memory > 0 else frozenset()
            continue
        dist = machine.nodes[n].distances
        best = min(dist.get(m, 255) for m in with_memory)
        out[n] = frozenset(m for m in with_memory if dist.get(m, 255) == best)
    return out


def _memory_only_owners(machine: Machine) -> dict[int, frozenset[int]]:
    """For every memory-only node: the CPU nodes closest to it, which it joins."""
    out: dict[int, frozenset[int]] = {}
    cpu_nodes = machine.cpu_nodes
    if not cpu_nodes:
        return out
    for m in machine.memory_only_nodes:
        dist = machine.nodes[m].distances
        best = min(dist.get(n, 255) for n in cpu_nodes)
        out[m] = frozenset(n for n in cpu_nodes if dist.get(n, 255) == best)
    return out


def build_pools(
    machine: Machine,
    allowed: frozenset[int],
    isolated: frozenset[int],
    reserved: frozenset[int],
) -> tuple[Pool, ...]:
    """Build the pool tree over the allowed CPUs; `reserved` are the wholly reserved CPUs."""
    if not allowed:
        raise ValueError("no allowed CPUs to build pools from")
    packages: dict[int, set[int]] = {}
    for c in sorted(allowed):
        packages.setdefault(machine.cpus[c].package, set()).add(c)
    sockets = [_socket_domain(machine, p, frozenset(m)) for p, m in sorted(packages.items())]
    sockets.sort(key=lambda d: min(d.cpus))
    top = sockets[0] if len(sockets) == 1 else _Domain("root", "root", allowed, tuple(sockets))
    own_mem = _closest_memory(machine)
    joins = _memory_only_owners(machine)

    pools: list[Pool] = []

    def mems_for(cpu_nodes: frozenset[int]) -> dict[MemoryTier, frozenset[int]]:
        nodes: set[int] = set()
        for n in cpu_nodes:
            nodes |= own_mem.get(n, frozenset())
        for m, owners in joins.items():
            if owners & cpu_nodes:
                nodes.add(m)
        tiers: dict[MemoryTier, set[int]] = {}
        for n in sorted(nodes):
            tiers.setdefault(machine.nodes[n].tier, set()).add(n)
        return {t: frozenset(v) for t, v in sorted(tiers.items())}

    def add(dom: _Domain, depth: int, parent: int | None) -> int:
        index = len(pools)
        cpu_nodes = frozenset(machine.cpus[c].node for c in dom.cpus) - {-1}
        pools.append(
            Pool(
                index=index,
                name=dom.name,
                kind=dom.kind,
                depth=depth,
                parent=parent,
                children=(),
                cpus=dom.cpus,
                isolated=dom.cpus & isolated,
                reserved=dom.cpus & reserved,
                sharable=dom.cpus - isolated - reserved,
                cpu_nodes=cpu_nodes,
                mems=mems_for(cpu_nodes),
            )
        )
        kids = tuple(add(child, depth + 1, index) for child in dom.children)
        p = pools[index]
        pools[index] = Pool(
            p.index,
            p.name,
            p.kind,
            p.depth,
            p.parent,
            kids,
            p.cpus,
            p.isolated,
            p.reserved,
            p.sharable,
            p.cpu_nodes,
            p.mems,
        )
        return index

    add(top, 0, None)
    return tuple(pools)


def ancestors(pools: tuple[Pool, ...], index: int) -> tuple[int, ...]:
    """Indices of the pool's ancestors, nearest first."""
    out: list[int] = []
    p = pools[index].parent
    while p is not None:
        out.append(p)
        p = pools[p].parent
    return tuple(out)


def subtree(pools: tuple[Pool, ...], index: int) -> tuple[int, ...]:
    """Indices of the pool and all its descendants, pre-order."""
    out = [index]
    for c in pools[index].children:
        out.extend(subtree(pools, c))
    return tuple(out)


def could_exist(machine: Machine, name: str) -> bool:
    """Whether some configuration of `machine` has a pool of this name (see `build_pools`)."""
    if name == "root":
        return len(machine.packages) > 1
    cpus = machine.cpus.values()
    if name.startswith("socket #"):
        return name[8:] in {str(c.package) for c in cpus}
    if name.startswith("die #"):
        return name[5:] in {f"{c.package}/{c.die}" for c in cpus}
    if name.startswith("NUMA node #"):
        return name[11:] in {str(n) for n in machine.cpu_nodes}
    return False
