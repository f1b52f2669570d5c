"""Shaping a grant: which CPUs and which memory a request takes in one given pool.

The choice decides the pool; the shaper slices exclusive CPUs out of it (the devices' nodes and the
preferred core kind first, shared containers keeping the CPUs they need) and narrows the memory
zone to the nodes those CPUs sit on. It reads the ledger and the memory book and changes neither.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.accounts.memory import MemoryBook
from nri_topology.policy.allocator import cpuallocator, numasets
from nri_topology.policy.options import Options
from nri_topology.policy.pools import Pool
from nri_topology.policy.types import EXCLUSIVE_KINDS, CpuKind, CpuPriority, Request
from nri_topology.topology.model import Machine, MemoryTier


class GrantFailed(Exception):
    """A feasible pool in which the grant could not be computed (its CPUs cannot be sliced)."""


class GrantShape(NamedTuple):
    """What a grant is made of before it exists: where, which CPUs, how much, which memory (a
    tuple: one is made per decision)."""

    pool: int
    kind: CpuKind
    exclusive: frozenset[int] = frozenset()
    isolated: bool = False  # the exclusive CPUs are kernel-isolated ones
    shared: int = 0  # milli-CPU asked of shared capacity (dropped for purely exclusive kinds)
    zone: frozenset[int] = frozenset()
    relaxed: bool = False
    size: int = 0  # bytes of memory, charged when there is a zone
    note: str = ""  # said in the decision's reason


class Shaper:
    """Grant shapes for one machine, options, pool tree, ledger and memory book."""

    def __init__(
        self,
        machine: Machine,
        options: Options,
        pools: tuple[Pool, ...],
        ledger: Ledger,
        book: MemoryBook,
        post: tuple[tuple[int, ...], ...],
    ) -> None:
        self.machine = machine
        self.options = options
        self.pools = pools
        self.ledger = ledger
        self.book = book
        self.post = post  # per pool: its subtree, children before parents
        self._leaves = tuple(p for p in pools if not p.children and p.cpu_nodes)

    def spans(self, req: Request) -> bool:
        """Whether pools are scored by the node set the exclusive CPUs would span."""
        opts = self.options
        return (
            req.kind is CpuKind.EXCLUSIVE
            and opts.prefer_closest_numa
            and not opts.distribute_across_numa
        )

    def span(self, req: Request, pool: Pool) -> tuple[int, ...]:
        """The NUMA nodes an exclusive grant from the pool's free CPUs would span; () when the
        pool has one node (its own measure holds) or its nodes cannot hold the request."""
        if len(pool.cpu_nodes) < 2:
            return ()
        free = self.ledger.shared_cpus[pool.index]
        if not self.ledger.partial.isdisjoint(free):  # (asked per pool: no copy without need)
            free = free - self.ledger.partial
        if req.hint_nodes:
            near = free & self.near_devices(req)
            if len(near) >= req.exclusive:  # the devices' CPUs come first (see `_pick`)
                free = near
        try:
            return numasets.grant_nodes(
                self.machine, free, req.exclusive, pool.cpu_nodes, self.options.full_pcpus_only
            )
        except cpuallocator.AllocationError:
            return ()

    def shape(
        self,
        req: Request,
        p: int,
        zone: frozenset[int],
        relaxed: bool,
        keep: frozenset[int],
        tiers: frozenset[MemoryTier],
        size: int,
        span: tuple[int, ...] = (),
    ) -> GrantShape:
        """Compute the grant in pool p without committing it; `GrantFailed` when impossible.

        `span`: the node set the pool was scored by; exclusive CPUs come from it when it holds
        enough sliceable CPUs."""
        kind = req.kind
        if kind not in EXCLUSIVE_KINDS:
            return GrantShape(p, kind, shared=req.shared, zone=zone, relaxed=relaxed, size=size)
        k = req.exclusive
        full_pcpus_only = self.options.full_pcpus_only
        note = ""
        if kind is CpuKind.ISOLATED and len(self.ledger.free_iso[p]) >= k:
            excl = self._take(self.ledger.free_iso[p], k, keep, full_pcpus_only)
            return GrantShape(p, kind, excl, True, req.shared, zone, relaxed, size)
        if kind is CpuKind.ISOLATED:
            kind = CpuKind.MIXED if req.shared else CpuKind.EXCLUSIVE
            note = f"too few free isolated CPUs in the pool, {k} ordinary CPUs taken instead"
        prefer = self.preferred(req)
        keep_first = self.machine.all_cpus - prefer if prefer else frozenset()
        sliceable = self.sliceable(
            p, k, req.shared if kind is CpuKind.MIXED else 0, kind, keep_first
        )
        excl = self._pick(
            p, sliceable, k, keep, full_pcpus_only, span, prefer, self.near_devices(req)
        )
        cpus = self.machine.cpus
        nodes = {cpus[c].node for c in excl} - {-1}
        if kind is CpuKind.EXCLUSIVE:
            zone, relaxed = self._narrow_zone(excl, nodes, zone, relaxed, tiers, size)
        if len(nodes) > 1 and not note:
            avg = numasets.average_distance(self.machine, nodes)
            listed = ",".join(map(str, sorted(nodes)))
            note = f"spans NUMA nodes {listed} (average distance {avg:g})"
        return GrantShape(p, kind, excl, False, req.shared, zone, relaxed, size, note)

    def sliceable(
        self,
        p: int,
        k: int,
        shared_part: int,
        kind: CpuKind,
        keep_first: frozenset[int] = frozenset(),
    ) -> frozenset[int]:
        """CPUs of pool p that can become exclusive without starving any shared container;
        the CPUs kept for shared containers come from `keep_first` first (on hybrid machines,
        the core kind the request does not prefer)."""
        new_user = int(kind is CpuKind.MIXED)
        protected: dict[int, frozenset[int]] = {}
        for x in self.post[p]:
            prot = frozenset().union(*(protected[c] for c in self.pools[x].children))
            prot |= self.ledger.shared_cpus[x] & self.ledger.partial
            need = self.ledger.need_cpus(x, shared_part if x == p else 0, new_user if x == p else 0)
            if len(self.ledger.shared_cpus[x]) - k < need and len(prot) < need:
                rest = self.ledger.shared_cpus[x] - prot
                try:
                    prot |= cpuallocator.take_cpus(
                        self.machine, rest, need - len(prot), prefer=keep_first
                    )
                except cpuallocator.AllocationError as e:
                    raise GrantFailed(
                        f"cannot keep shared CPUs in {self.pools[x].name}: {e}"
                    ) from None
            protected[x] = prot
        return self.ledger.shared_cpus[p] - protected[p]

    def near_devices(self, req: Request) -> frozenset[int]:
        """The CPUs of the NUMA nodes of the request's devices (none without hints)."""
        if not req.hint_nodes:
            return frozenset()
        nodes = self.machine.nodes
        return frozenset().union(*(nodes[n].cpus for n in req.hint_nodes if n in nodes))

    def _pick(
        self,
        p: int,
        sliceable: frozenset[int],
        k: int,
        keep: frozenset[int],
        full_pcpus_only: bool,
        span: tuple[int, ...] = (),
        prefer: frozenset[int] = frozenset(),
        near: frozenset[int] = frozenset(),
    ) -> frozenset[int]:
        opts = self.options
        pool = self.pools[p]
        if len(sliceable) < k:
            raise GrantFailed(f"{len(sliceable)} CPUs can be sliced, {k} needed")
        close = sliceable & near
        if len(close) >= k and close != sliceable and not keep & sliceable:
            # A pool wider than the devices' nodes: their CPUs first, when they suffice.
            with contextlib.suppress(GrantFailed):
                return self._pick(p, close, k, keep, full_pcpus_only, (), prefer)
        try:
            kept = keep & sliceable
            if kept:
                return self._take(sliceable, k, kept, full_pcpus_only)
            if opts.distribute_across_numa:
                group = max(
                    opts.distribute_min_group,
                    self.machine.threads_per_core if full_pcpus_only else 1,
                )
                return cpuallocator.take_distributed(
                    self.machine, sliceable, k, group_size=group, full_pcpus_only=full_pcpus_only
                )
            if opts.prefer_closest_numa and len(pool.cpu_nodes) > 1:
                nodes = self._within_span(sliceable, k, full_pcpus_only, span)
                if nodes is None:
                    nodes = numasets.grant_nodes(
                        self.machine, sliceable, k, pool.cpu_nodes, full_pcpus_only
                    )
                if len(nodes) > 1:
                    within = frozenset().union(*(self.machine.nodes[n].cpus for n in nodes))
                    return cpuallocator.take_cpus(
                        self.machine,
                        sliceable & within,
                        k,
                        full_pcpus_only=full_pcpus_only,
                        prefer=prefer,
                    )
            return cpuallocator.take_cpus(
                self.machine, sliceable, k, full_pcpus_only=full_pcpus_only, prefer=prefer
            )
        except cpuallocator.AllocationError as e:
            raise GrantFailed(str(e)) from None

    def preferred(self, req: Request) -> frozenset[int]:
        """The CPUs exclusive CPUs come from first: on hybrid machines, the core kind of the
        request's CPU priority."""
        if not self.machine.efficiency_cpus or req.cpu_priority is CpuPriority.NONE:
            return frozenset()
        if req.cpu_priority is CpuPriority.LOW:
            return self.machine.efficiency_cpus
        return self.machine.performance_cpus

    def _within_span(
        self, sliceable: frozenset[int], k: int, full_pcpus_only: bool, span: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """The scored span when its sliceable CPUs hold the request, else None (shared
        containers keep some of its CPUs: the span is recomputed from what can be sliced)."""
        if len(span) < 2:
            return None
        try:
            return numasets.grant_nodes(self.machine, sliceable, k, span, full_pcpus_only)
        except cpuallocator.AllocationError:
            return None

    def _take(
        self, available: frozenset[int], k: int, keep: frozenset[int], full_pcpus_only: bool
    ) -> frozenset[int]:
        """Take k CPUs, keeping as many of `keep` as possible (resize in place)."""
        try:
            kept = keep & available
            if len(kept) >= k:
                return cpuallocator.take_cpus(
                    self.machine, kept, k, full_pcpus_only=full_pcpus_only
                )
            more = cpuallocator.take_cpus(
                self.machine, available - kept, k - len(kept), full_pcpus_only=full_pcpus_only
            )
            return kept | more
        except cpuallocator.AllocationError as e:
            raise GrantFailed(str(e)) from None

    def _narrow_zone(
        self,
        excl: frozenset[int],
        nodes: set[int],
        zone: frozenset[int],
        relaxed: bool,
        tiers: frozenset[MemoryTier],
        size: int,
    ) -> tuple[frozenset[int], bool]:
        """Memory of only the nodes the exclusive CPUs (`excl`, on `nodes`) sit on (and their
        memory-only nodes)."""
        if relaxed:
            return zone, relaxed
        leaves = [p for p in self._leaves if p.cpu_nodes <= nodes and p.cpus & excl]
        narrow = frozenset().union(*(p.nodes_of(tiers) for p in leaves)) & zone
        if narrow and narrow != zone and self.book.fits(narrow, size):
            return narrow, False
        return zone, relaxed
