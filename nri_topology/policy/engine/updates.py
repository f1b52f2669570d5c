"""What a grant pins its container to, and the update diff of an operation: the containers
whose cpuset or memset really changed.

Speed seam: a pool's shared set is one object per value (`interned`), held by every plain
shared container of the pool, so an unchanged container is seen by identity and the Updates
of a set are kept and handed out again (a pool moves among a few sets as containers come and
go). `refresh` is the plain path: every container's pinning worked out and compared by value;
tests/test_policy_diff.py checks that the diff names exactly the containers it would, and that
keeping shared sets (`kept`) gives the same updates as keeping none.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from operator import attrgetter

from nri_topology.policy.accounts import hugepages
from nri_topology.policy.accounts.grant import Grant, Op
from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.intake.request import milli_to_shares
from nri_topology.policy.options import Options
from nri_topology.policy.types import CpuKind, Placement, Update
from nri_topology.topology.model import Machine, MemoryTier

# Shared sets (with their Placement and Updates) kept before all are forgotten at once: a few per
# pool cover containers coming and going; the Updates kept are at most this many per container.
SHARED_SETS_KEPT = 32


class Pins:
    """Pinning and update diffs over one machine, options and ledger."""

    def __init__(
        self,
        machine: Machine,
        options: Options,
        ledger: Ledger,
        reserved: frozenset[int],
        kept: int = SHARED_SETS_KEPT,
    ) -> None:
        """`kept`: shared sets kept before all are forgotten; 0 forgets them at every new
        set, the plain path tests compare the kept ones against."""
        self.machine = machine
        self._kept = kept
        self.options = options
        self._ledger = ledger
        self._reserved_all = reserved  # every reserved CPU, the partly reserved one included
        # Shared sets seen lately, one object per value: a pool's shared set returns to an
        # earlier value when a container leaves, and its containers and updates are compared
        # and cached by identity. Per set: its Placement and the Update of each container.
        self._shared_sets: dict[frozenset[int], tuple[Placement, dict[str, Update]]] = {}

    def pin(self, g: Grant) -> frozenset[int] | None:
        """The cpuset a grant pins its container to (None when CPU pinning is left alone)."""
        if not self.options.pin_cpu:
            return None
        if g.kind is CpuKind.PRESERVE:  # the kubelet's cpuset, or the runtime's left as it is
            return g.request.kubelet_cpus
        if g.kind is CpuKind.RESERVED:
            cpus = self._reserved_all
        elif g.uses_shared:
            # No exclusive part: the pool's shared set itself, so that every such container of
            # the pool holds one object (hashed once; `diff` compares by identity).
            cpus = (
                g.exclusive | self._ledger.shared_cpus[g.pool]
                if g.exclusive
                else self._ledger.shared_cpus[g.pool]
            )
        else:
            cpus = g.exclusive
        if g.request.hide_hyperthreads:
            cpus = frozenset(c for c in cpus if self._lowest_sibling(c, cpus) == c)
        return cpus

    def _lowest_sibling(self, cpu: int, within: frozenset[int]) -> int:
        return min(t for t in self.machine.cpus[cpu].threads if t in within)

    def mems(self, g: Grant) -> frozenset[int] | None:
        """The memset a grant pins to: its zone and the nodes of its hugepages, without DRAM
        while a cold start runs."""
        if not self.options.pin_memory or g.request.memory_preserve:
            return None
        zone = g.zone | hugepages.nodes_of(g.hugepages) if g.hugepages else g.zone
        if g.cold_start is not None:
            return frozenset(n for n in zone if self.machine.nodes[n].tier is not MemoryTier.DRAM)
        return zone

    def shares(self, g: Grant) -> int | None:
        if not self.options.pin_cpu or g.kind is CpuKind.PRESERVE:
            return None
        return milli_to_shares(g.request.cpu_request)

    def updates(
        self, op: Op, cid: str, moved: dict[str, Grant], grants: Mapping[str, Grant]
    ) -> tuple[Update, ...]:
        """The diff of the operation, with every moved container's new cpuset and memset."""
        diff = self.diff(op, skip=cid)
        if not moved:
            return diff
        updates = {u.container_id: u for u in diff}
        for mid, old in moved.items():
            new = grants[mid]
            cpus = new.cpus if new.cpus != old.cpus else None
            mems = new.mems if new.mems != old.mems else None
            if cpus is not None or mems is not None:
                updates[mid] = Update(mid, Placement(cpus=cpus, mems=mems))
            else:
                updates.pop(mid, None)
        return tuple(updates[k] for k in sorted(updates))

    def interned(self, cpus: frozenset[int]) -> frozenset[int]:
        """The one object kept for a shared set of this value (bounded: forgotten in bulk)."""
        hit = self._shared_sets.get(cpus)
        if hit is not None:
            same = hit[0].cpus
            assert same is not None
            return same
        if len(self._shared_sets) >= self._kept:
            self._shared_sets.clear()
        self._shared_sets[cpus] = (Placement(cpus=cpus, mems=None), {})
        return cpus

    def plain(self, g: Grant) -> bool:
        """Whether a shared user is pinned to exactly its pool's shared set (`pin`)."""
        return self.options.pin_cpu and g.kind is CpuKind.SHARED and not g.request.hide_hyperthreads

    def diff(self, op: Op, skip: str = "") -> tuple[Update, ...]:
        """Updates, by container id, for shared containers in touched pools whose cpuset really
        changed; `skip` (the container the operation is for) is left alone.

        The plain ones, on nothing but their pool's shared set, are handled per pool in bulk
        (`_repin`); the others are pinned one by one.
        """
        ledger = self._ledger
        runs: list[list[Update]] = []  # each in container id order
        for x in op.touched:
            if ledger.plain_ids[x]:
                run = self._repin(x, skip)
                if run:
                    runs.append(run)
            for cid, g in ledger.pinned[x].items():
                if cid == skip:
                    continue
                cpus = self.pin(g)
                if cpus != g.cpus:
                    g.cpus = cpus
                    runs.append([Update(cid, Placement(cpus=cpus, mems=None))])
        if not runs:
            return ()
        if len(runs) == 1:
            return tuple(runs[0])
        return tuple(sorted(chain.from_iterable(runs), key=_BY_CONTAINER))

    def _repin(self, x: int, skip: str) -> list[Update]:
        """Pin the plain users of pool x (but `skip`) to its shared set; the Updates, in
        container id order, of those whose cpuset changed.

        They all get the pool's shared set object, so an unchanged one is seen by identity, and
        their Updates are kept per shared set and container (shared containers move among a few
        sets).
        """
        ledger = self._ledger
        shared = ledger.shared_cpus[x]
        grants = ledger.plain_grants[x]
        protect = ledger.plain_grant(x, skip) if skip else None
        if protect is None and shared not in list(map(_CPUS, grants)):
            # the usual case, the pool's shared set changed under all of them: no test each
            for g in grants:
                g.cpus = shared
            ids = ledger.plain_ids[x]
        else:
            moved: list[Grant] = []
            for g in grants:
                old = g.cpus
                if old is not shared and g is not protect:
                    g.cpus = shared
                    if old != shared:
                        moved.append(g)
            if not moved:
                return []
            ids = ledger.plain_ids[x] if len(moved) == len(grants) else [_ID(g) for g in moved]
        # a set not interned (a pool's initial one) gets its own
        placement, kept = self._shared_sets.get(shared) or (Placement(shared, None), {})
        updates = list(map(kept.get, ids))
        if not all(updates):  # (not `None in`: that calls Update.__eq__ on each)
            for i, u in enumerate(updates):
                if u is None:
                    cid = ids[i]
                    updates[i] = kept[cid] = Update(cid, placement)
        return updates  # type: ignore[return-value]  # no None left

    def placement(self, g: Grant) -> Placement:
        return Placement(cpus=g.cpus, mems=g.mems, cpu_shares=self.shares(g))

    def refresh(self, grants: Mapping[str, Grant]) -> tuple[Update, ...]:
        """Updates for every container whose pinning differs from what the accounting says."""
        updates: list[Update] = []
        for cid in sorted(grants):
            g = grants[cid]
            cpus = self.pin(g)
            mems = self.mems(g)
            changed_cpus = cpus is not None and cpus != g.cpus
            changed_mems = mems is not None and mems != g.mems
            g.cpus, g.mems = cpus, mems
            if changed_cpus or changed_mems:
                updates.append(
                    Update(
                        cid,
                        Placement(
                            cpus=cpus if changed_cpus else None,
                            mems=mems if changed_mems else None,
                        ),
                    )
                )
        return tuple(updates)

    def forget(self, container_id: str) -> None:
        """Drop a released container's kept Updates (a set may outlive many of its containers)."""
        for _, kept in self._shared_sets.values():
            kept.pop(container_id, None)


_BY_CONTAINER = attrgetter("container_id")  # Update.container_id
_ID = attrgetter("request.container_id")  # Grant's
_CPUS = attrgetter("cpus")  # Grant's
