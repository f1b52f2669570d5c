"""Policy invariants that must hold after every operation, for soak tests and benchmarks.

`check(policy)` reads only the public views (`assignments()`, `pools()`), so it judges the policy
the way the daemon and the runtime see it. `RuntimeView` replays decisions and updates the way a
runtime applies them (`policy.pinning`, the simulator's model too) and must always agree with the
policy's own view: an update that is missing or wrong shows up as a container the runtime pins
differently from what the policy believes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nri_topology.policy.pinning import apply_updates
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import CpuKind, Decision, Placement, Update
from nri_topology.policy.views import Assignment, PoolView
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine


class InvariantError(AssertionError):
    """The policy state broke a rule; the message names the container or pool and the rule."""


def _fail(rule: str) -> None:
    raise InvariantError(rule)


def check(policy: PolicyPort, machine: Machine) -> None:
    """Raise `InvariantError` naming the first broken rule."""
    assignments = policy.assignments()
    pools = {p.name: p for p in policy.pools()}
    reserved = frozenset().union(*(p.reserved for p in pools.values()))
    owner: dict[int, str] = {}
    for cid, a in assignments.items():
        for cpu in a.exclusive:
            if cpu in owner:
                _fail(f"CPU {cpu} is exclusive to both {owner[cpu]} and {cid}")
            owner[cpu] = cid
        if a.exclusive & reserved:
            _fail(f"{cid} holds reserved CPUs {cpuset.format(a.exclusive & reserved)} exclusively")
    taken = frozenset(owner)
    for p in pools.values():
        if p.shared & taken:
            _fail(f"pool {p.name} shares CPUs {cpuset.format(p.shared & taken)} held exclusively")
        if p.free_milli < 0 or p.assigned_milli > p.capacity_milli:
            _fail(
                f"pool {p.name} over-committed: {p.assigned_milli}m assigned, "
                f"{p.capacity_milli}m capacity, {p.free_milli}m free"
            )
    _check_shared_sums(assignments, pools)
    _check_hugepages(assignments, pools, machine)
    for cid, a in assignments.items():
        _check_pinning(cid, a, pools, reserved, machine)


def _check_hugepages(
    assignments: Mapping[str, Assignment], pools: Mapping[str, PoolView], machine: Machine
) -> None:
    """Never more hugepages booked on a node than it holds of that size; every pool's free pages
    are its nodes' pages less those its containers' nodes hold; a container's pages lie on its
    memory nodes."""
    booked: dict[tuple[int, int], int] = {}
    for cid, a in assignments.items():
        for node, size, count in a.hugepages:
            if count <= 0:
                _fail(f"{cid} books {count} pages of {size} kB on node {node}")
            booked[node, size] = booked.get((node, size), 0) + count
            if a.mems is not None and node not in a.mems:
                _fail(f"{cid} has hugepages on node {node} outside its memory nodes")
    for (node, size), count in booked.items():
        held = machine.nodes[node].hugepages.get(size, 0)
        if count > held:
            _fail(f"node {node} has {count} pages of {size} kB booked, it holds {held}")
    for p in pools.values():
        for size, (held, free) in p.hugepages.items():
            used = sum(booked.get((n, size), 0) for n in p.nodes)
            if free != held - used:
                _fail(
                    f"pool {p.name} shows {free} of {held} pages of {size} kB free, {used} booked"
                )


def _check_pinning(
    cid: str,
    a: Assignment,
    pools: Mapping[str, PoolView],
    reserved: frozenset[int],
    machine: Machine,
) -> None:
    if a.cpus is not None:
        if not a.cpus:
            _fail(f"{cid} is pinned to no CPU")
        if not a.cpus <= machine.all_cpus:
            _fail(f"{cid} is pinned to unknown CPUs {cpuset.format(a.cpus - machine.all_cpus)}")
        pool = pools[a.pool]
        want: frozenset[int] | None = None
        if a.kind is CpuKind.SHARED:
            want = pool.shared
        elif a.kind is CpuKind.MIXED or (a.kind is CpuKind.ISOLATED and a.shared > 0):
            want = a.exclusive | pool.shared
        elif a.kind in (CpuKind.EXCLUSIVE, CpuKind.ISOLATED):
            want = a.exclusive
        elif a.kind is CpuKind.RESERVED:
            want = reserved
        if want is not None and a.cpus != want:
            _fail(
                f"{cid} ({a.kind}) in {a.pool} is pinned to {cpuset.format(a.cpus)}, "
                f"expected {cpuset.format(want)}"
            )
    if a.mems is not None and (not a.mems or not a.mems <= frozenset(machine.nodes)):
        _fail(f"{cid} has memory nodes {cpuset.format(a.mems)}, machine has {set(machine.nodes)}")


def _check_shared_sums(
    assignments: Mapping[str, Assignment], pools: Mapping[str, PoolView]
) -> None:
    """Every pool's assigned milli-CPU is the sum of the shared parts placed in its subtree."""
    sums = dict.fromkeys(pools, 0)
    for a in assignments.values():
        if a.kind in (CpuKind.RESERVED, CpuKind.PRESERVE):
            continue
        name: str | None = a.pool
        while name is not None:
            sums[name] += a.shared
            name = pools[name].parent
    for name, total in sums.items():
        if pools[name].assigned_milli != total:
            _fail(f"pool {name} accounts {pools[name].assigned_milli}m shared, containers {total}m")


@dataclass
class RuntimeView:
    """The pinning a runtime would hold after applying every decision and update it was sent."""

    cpus: dict[str, frozenset[int] | None] = field(default_factory=dict)
    mems: dict[str, frozenset[int] | None] = field(default_factory=dict)

    def created(self, decision: Decision) -> None:
        self.cpus[decision.container_id] = decision.placement.cpus
        self.mems[decision.container_id] = decision.placement.mems
        self.apply(decision.updates)

    def resized(self, decision: Decision) -> None:
        """Other containers' updates, then the resized container's new placement."""
        self.apply((*decision.updates, Update(decision.container_id, decision.placement)))

    def removed(self, container_id: str, updates: Iterable[Update]) -> None:
        self.cpus.pop(container_id, None)
        self.mems.pop(container_id, None)
        self.apply(updates)

    def apply(self, updates: Iterable[Update]) -> None:
        updates = tuple(updates)
        current = {
            u.container_id: Placement(self.cpus[u.container_id], self.mems[u.container_id])
            for u in updates
            if u.container_id in self.cpus
        }
        applied = apply_updates(current, updates)
        if applied.unknown:
            _fail(f"update for unknown container {applied.unknown[0]}")
        for cid, p in applied.placements.items():
            self.cpus[cid], self.mems[cid] = p.cpus, p.mems

    def agrees(self, policy: PolicyPort) -> None:
        """Raise `InvariantError` when the runtime would pin a container otherwise."""
        assignments = policy.assignments()
        if set(assignments) != set(self.cpus):
            extra = sorted(set(assignments) ^ set(self.cpus))
            _fail(f"runtime and policy disagree on which containers exist: {extra[:5]}")
        for cid, a in assignments.items():
            if a.cpus is not None and self.cpus[cid] != a.cpus:
                _fail(
                    f"{cid}: runtime pins CPUs {cpuset.format(self.cpus[cid] or ())}, policy "
                    f"says {cpuset.format(a.cpus)} (an update was lost)"
                )
            if a.mems is not None and self.mems[cid] != a.mems:
                _fail(
                    f"{cid}: runtime pins memory {cpuset.format(self.mems[cid] or ())}, policy "
                    f"says {cpuset.format(a.mems)} (an update was lost)"
                )
