"""Memory zones: which memory nodes a grant in a pool is charged to, widened when they are full.

A zone is the pool's nodes of the request's tiers; when they are full, the nearest ancestor's
(up the tree), then, for a request that may be degraded, the next tiers (`TIER_ORDER`).
Only the `MemoryBook` changes between decisions; the caches here depend on the machine and the
pool tree alone, which are fixed for one engine, so they are never invalidated, and bounded by
(pools x tier sets), the tier sets asked for and the zones grants were given.
"""

from __future__ import annotations

from nri_topology.policy.accounts.memory import MemoryBook
from nri_topology.policy.pools import Pool
from nri_topology.policy.types import PolicyError, Request
from nri_topology.topology.model import Machine, MemoryTier, tier_set

# Memory tiers a container spills into, in this order, when its own tiers are full. HBM is small
# and fast: it is used only when asked for.
TIER_ORDER = (MemoryTier.DRAM, MemoryTier.CXL, MemoryTier.PMEM)


def widen_tiers(
    tiers: frozenset[MemoryTier], on_machine: frozenset[MemoryTier]
) -> frozenset[MemoryTier] | None:
    """The tiers with the next one of `TIER_ORDER` the machine has added, None when none is left."""
    for tier in TIER_ORDER:
        if tier not in tiers and tier in on_machine:
            return tiers | {tier}
    return None


class Zones:
    """The memory zone search over one machine's pool tree and memory book."""

    def __init__(
        self,
        machine: Machine,
        pools: tuple[Pool, ...],
        chain: tuple[tuple[int, ...], ...],
        book: MemoryBook,
    ) -> None:
        self._machine = machine
        self._pools = pools
        self._chain = chain  # per pool: itself, then its ancestors up to the root
        self._book = book
        self._tiers_on_machine = machine.memory_tiers
        # Per (pool, tier set): its nodes; per tier set: with normal memory ensured; per zone:
        # its tiers. Asked for by every decision, for every pool.
        self._nodes_cache: dict[tuple[int, frozenset[MemoryTier]], frozenset[int]] = {}
        # Per tier set: per pool, the zones `_zone_in` tries up its chain (`_chain_zones`).
        self._chains_cache: dict[frozenset[MemoryTier], tuple[tuple[frozenset[int], ...], ...]] = {}
        self._normal_cache: dict[frozenset[MemoryTier], frozenset[MemoryTier]] = {}
        self._zone_tiers: dict[frozenset[int], frozenset[MemoryTier]] = {}

    def tiers_of(self, zone: frozenset[int]) -> frozenset[MemoryTier]:
        """The tiers of a zone's nodes (`tier_set`: one object per value)."""
        tiers = self._zone_tiers.get(zone)
        if tiers is None:
            tiers = self._zone_tiers[zone] = tier_set(self._machine.nodes[n].tier for n in zone)
        return tiers

    def tiers(self, req: Request) -> frozenset[MemoryTier]:
        """The tiers a request's memory comes from on this machine: DRAM added for a cold start
        (it ends on DRAM), a tier of normal memory added when they hold none."""
        tiers = req.memory_tiers & self._tiers_on_machine
        if not tiers:
            wanted = ",".join(sorted(req.memory_tiers))
            have = ",".join(sorted(self._tiers_on_machine))
            raise PolicyError(
                f"{req.who}: memory tiers {wanted or 'none'} requested, the machine has {have}"
            )
        if req.cold_start_ns > 0:
            tiers |= {MemoryTier.DRAM} & self._tiers_on_machine
        return self._with_normal_memory(tiers)

    def _with_normal_memory(self, tiers: frozenset[MemoryTier]) -> frozenset[MemoryTier]:
        """The tiers, with the first tier holding normal memory added when they hold none.

        Movable-only memory (not in has_normal_memory) cannot serve the kernel's allocations for
        the container; the pool's nodes of the added tier are the closest normal memory.
        """
        hit = self._normal_cache.get(tiers)
        if hit is not None:
            return hit
        out = tiers
        nodes = self._machine.nodes.values()
        if not any(n.normal and n.memory > 0 and n.tier in tiers for n in nodes):
            for tier in (*TIER_ORDER, MemoryTier.HBM):
                if any(n.normal and n.memory > 0 and n.tier is tier for n in nodes):
                    out = tiers | {tier}
                    break
        self._normal_cache[tiers] = out
        return out

    def _nodes_of(self, p: int, tiers: frozenset[MemoryTier]) -> frozenset[int]:
        """The pool's memory nodes of the tiers, kept: every decision asks for every pool."""
        key = (p, tiers)
        nodes = self._nodes_cache.get(key)
        if nodes is None:
            nodes = self._nodes_cache[key] = self._pools[p].nodes_of(tiers)
        return nodes

    def zone(
        self,
        p: int,
        tiers: frozenset[MemoryTier],
        size: int,
        widen: bool = False,
        squeeze: bool = False,
    ) -> tuple[frozenset[int], bool]:
        """Memory zone for a pool: its nodes of the tiers, widened up the tree when full, then,
        when `widen`, into the next tiers (`TIER_ORDER`), again from the pool up.

        Returns (zone, relaxed); raises LookupError when even the root's nodes cannot hold it,
        unless `widen` and `squeeze`: then the root's nodes of every tier tried, which the grant is
        charged what fits (`Degradation.MEMORY_CHARGE`, see `admission.parity`).
        """
        found = self._zone_in(p, tiers, size)
        if found is not None:
            return found
        wider: frozenset[MemoryTier] | None = tiers
        widest = tiers
        while widen and wider is not None:
            wider = widen_tiers(wider, self._tiers_on_machine)
            if wider is not None:
                widest = wider
                found = self._zone_in(p, wider, size)
                if found is not None:
                    return found
        zone = self._nodes_of(0, widest) if widen and squeeze else frozenset()
        if not zone:
            raise LookupError(self._no_room(p, tiers, size))
        return zone, True

    def _chain_zones(self, tiers: frozenset[MemoryTier]) -> tuple[tuple[frozenset[int], ...], ...]:
        """Per pool, the zones tried for memory of the tiers: its nodes of them, then each
        ancestor's that differ from the last tried (none where a pool has no such nodes)."""
        chains = self._chains_cache.get(tiers)
        if chains is None:
            per_pool = []
            for p in range(len(self._pools)):
                zones: list[frozenset[int]] = []
                for a in self._chain[p]:
                    zone = self._nodes_of(a, tiers)
                    if zone and (not zones or zone != zones[-1]):
                        zones.append(zone)
                per_pool.append(tuple(zones))
            chains = self._chains_cache[tiers] = tuple(per_pool)
        return chains

    def _zone_in(
        self, p: int, tiers: frozenset[MemoryTier], size: int
    ) -> tuple[frozenset[int], bool] | None:
        """The first zone up the pool's chain that holds `size` more bytes, and whether it is
        not the pool's own; None when none does."""
        fits = self._book.fits
        for i, zone in enumerate(self._chain_zones(tiers)[p]):
            if fits(zone, size):
                return zone, i > 0
        return None

    def _no_room(self, p: int, tiers: frozenset[MemoryTier], size: int) -> str:
        """Why `_zone_in` found no zone."""
        zones = self._chain_zones(tiers)[p]
        if not zones:
            return "no memory of the requested tiers"
        return f"{size} bytes do not fit, {max(self._book.free(zones[-1]), 0)} bytes free"
