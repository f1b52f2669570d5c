"""The placement engine: accounting of CPUs and memory over the pool tree, grants and releases.

Pure and deterministic: state changes only through `place`, `release`, `resize`, `adopt` and
`finish_cold_start`, each of which either completes or raises `PolicyError` with the state exactly
as before (`running` only notes what the runtime reports, for `refresh` to diff). The checkpoint
format is `checkpoint.state`'s, the CPU accounts are the `accounts.ledger`'s, the memory zones
`accounts.zones`', the pool choice is `choice`'s, the CPUs and memory a grant takes in its pool
are `shaping`'s, the steps for a container that does not fit `admission.ladder`'s, and the
pinning and update diff `engine.updates`'. Outside the engine its state is read through
read-only views (`pools`, `grants`, `accounts`, ...).

Accounting, per pool, in the `ledger` (the pool choice reads it, `choose.room`):
* `shared_cpus` - the pool's sharable CPUs that no container holds exclusively. The shared cpuset
  of a container placed in the pool is this set. Exclusive CPUs leave it in every pool holding them
  (ancestors and descendants of the grant's pool alike) and return on release.
* `sub_shared` - milli-CPU granted from shared CPUs to containers in the pool's subtree; must stay
  within `1000 * |shared_cpus| - partial_reserved_in` of the pool, since all run on those CPUs.
* `sub_users` - shared containers in the subtree; while there is one, the pool keeps a free CPU.

Reserved CPUs: a quantity reservation is exact to the milli-CPU. `ceil(q / 1000)` CPUs are set
aside; the wholly reserved ones leave every shared set, the last one, when only partly reserved,
stays shared for its unreserved remainder (750m reserves 750m, and 250m of that CPU is shared
capacity). Reserved CPUs are never sliced off as exclusive CPUs.

Rules deliberately changed from the reference (topology-aware of nri-plugins):
* reservations are exact to the milli-CPU (reference issue 632 rounds up to whole CPUs);
* slicing exclusive CPUs protects, per pool, only as many CPUs as its shared containers need,
  and considers CPUs of a pool that belong to none of its children (reference 14.10);
* only containers whose cpuset or memset really changed get an update (reference 14.11);
* memory that does not fit widens the new container's zone to an ancestor's nodes, then into
  the next memory tier (`zones.TIER_ORDER`), then, when the kubelet admits its memory
  request, to all of those nodes charged what fits (`admission.parity`); other containers are never
  moved for it (the reference moves lower-priority containers instead);
* memory of reserved and preserved-memory containers: reserved ones are charged to the root
  zone; containers that keep their memory pinning are not charged (their nodes are unknown);
* a CPU node without memory stays a pool and borrows the memory of its closest nodes;
* `cpu.preserve` containers keep their CPU shares (reference 14.19);
* a resized container tries its old pool (and CPUs) first only when that pool still fits, else
  it moves (the reference always reuses the old pool and fails, 14.6);
* a container that does not fit as asked is not refused when the kubelet would admit it: a few
  shared containers are moved out of the way, else it is degraded (`admission`);
* a request needing CPUs of several NUMA nodes of its pool takes them from the best node set
  (fewest nodes, then lowest average distance) when prefer_closest_numa is on;
* topology hints are NUMA nodes, scored by how many the pool misses (reference: a product of
  per-hint scores); strict hints filter out pools with CPUs outside the hinted nodes, and memory
  widened beyond the pool, before any grant (reference: checked after the CPU pick, 5.11); in a
  pool wider than the hinted nodes, exclusive CPUs come from the hinted nodes when they have
  enough (the reference picks by hints only when annotated, and then splits over the hints).
* on hybrid machines exclusive CPUs come from the core kind of the request's CPU priority first
  (performance cores for high and normal, efficiency cores for low), packed within that kind;
* a single-numa-node request (annotation or option) is only placed in pools of one NUMA node
  with memory fitting there, and is refused, saying so, when none can hold it.
* hugepages are booked per NUMA node and page size (`hugepages`), on the chosen pool's nodes
  (its CPUs' nodes first), a pool without room for them failing its grant; beyond the pools only
  when memory may widen (`Degradation.HUGEPAGES_REMOTE`), and pages beyond the machine's free
  ones are refused (the reference does not account hugepages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from nri_topology.policy.accounts import hugepages, reservation
from nri_topology.policy.accounts.grant import Grant, Op, memory_size
from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.accounts.memory import MemoryBook
from nri_topology.policy.accounts.zones import Zones
from nri_topology.policy.admission import ladder, moves, parity
from nri_topology.policy.allocator import cpuallocator
from nri_topology.policy.choice import choose, scoring
from nri_topology.policy.engine.updates import Pins
from nri_topology.policy.intake import affinity
from nri_topology.policy.options import Options
from nri_topology.policy.pools import Pool, ancestors, build_pools, subtree
from nri_topology.policy.shaping import shape
from nri_topology.policy.shaping.shape import GrantFailed, GrantShape, Shaper
from nri_topology.policy.types import (
    CHOSEN,
    EXCLUSIVE_KINDS,
    ColdStart,
    CpuKind,
    Decision,
    Degradation,
    Outcome,
    Placement,
    PolicyError,
    PoolScore,
    Request,
    Update,
)
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier

# Containers named changed (`take_changed`) before the engine stops naming them and reports all:
# more than change between two checkpoint writes, and a bound when nobody asks.
_CHANGES_NAMED = 4096

_WHY_SHOWN = 3  # pools named when a decision says why its devices' nodes were missed


@dataclass(frozen=True, slots=True)
class Accounts:
    """The engine's accounting at one moment (`Engine.accounts`); per pool index where a tuple."""

    shared_cpus: tuple[frozenset[int], ...]
    free_isolated: tuple[frozenset[int], ...]
    sub_shared: tuple[int, ...]  # milli-CPU granted from shared CPUs in the subtree
    sub_users: tuple[int, ...]  # shared containers in the subtree
    exclusive: frozenset[int]  # CPUs granted exclusively
    reserved_capacity: int  # milli-CPU
    reserved_granted: int
    memory_requested: int  # the grants' known memory requests
    memory: Mapping[frozenset[int], int]  # bytes charged per zone
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (node, kB) -> pages


class Engine:
    """Grants and accounting for one machine and one set of options."""

    def __init__(
        self,
        machine: Machine,
        options: Options,
        *,
        keep: frozenset[int] = frozenset(),
        avoid: frozenset[int] = frozenset(),
    ) -> None:
        """`keep` and `avoid` steer a quantity reservation (`reservation.reserve`): the CPUs it
        held before a restart or reload, and those running exclusive containers hold."""
        self.machine = machine
        self.options = options
        self._allowed = reservation.allowed_cpus(machine, options)
        isolated = machine.isolated & self._allowed
        r = reservation.reserve(machine, options, self._allowed, isolated, keep=keep, avoid=avoid)
        reserved, partial, partial_reserved = r.cpus, r.partial, r.partial_reserved
        self._reserved_all = reserved  # every reserved CPU, the partly reserved one included
        self._partial = partial  # the partly reserved CPU, if any (stays shared)
        self._partial_reserved = partial_reserved  # milli-CPU of `partial` that is reserved
        self._reserved_capacity = r.capacity  # milli-CPU
        self._isolated = isolated - reserved
        try:
            self._pools: tuple[Pool, ...] = build_pools(
                machine, self._allowed, self._isolated, reserved - partial
            )
        except ValueError as e:
            raise PolicyError(str(e)) from None
        self._by_name = {p.name: p.index for p in self._pools}
        n = len(self._pools)
        self._chain = tuple((i, *ancestors(self._pools, i)) for i in range(n))
        self._subtree = tuple(subtree(self._pools, i) for i in range(n))
        self._post = tuple(tuple(reversed(s)) for s in self._subtree)
        self._pools_of_cpu: dict[int, tuple[int, ...]] = {}
        for p in self._pools:
            for c in p.cpus:
                self._pools_of_cpu.setdefault(c, ())
                self._pools_of_cpu[c] += (p.index,)
        self._partial_reserved_in = tuple(
            partial_reserved if partial & p.cpus else 0 for p in self._pools
        )
        self._numa = tuple(self._numa_measure(p) for p in self._pools)
        self._pool_tiers = tuple(p.tiers for p in self._pools)
        self._ledger = Ledger(self._pools, self._chain, partial, self._partial_reserved_in)
        self._pins = Pins(machine, options, self._ledger, reserved)
        self._taken: frozenset[int] = frozenset()
        self._reserved_granted = 0
        self._memory_requested = 0  # the grants' known memory requests (`_squeeze`)
        self._grants: dict[str, Grant] = {}
        self._grants_view = MappingProxyType(self._grants)
        self._by_attribute = affinity.Index()  # the grants' requests, for affinity expressions
        self._book = MemoryBook(machine, options.outside_memory)
        self._huge = hugepages.HugepageBook(machine, options.outside_hugepages)
        self._memory_capacity = sum(n.memory for n in machine.nodes.values())  # the machine's
        self._zones = Zones(machine, self._pools, self._chain, self._book)
        self._shaper = Shaper(machine, options, self._pools, self._ledger, self._book, self._post)
        self._board = choose.Board(
            machine,
            self._pools,
            self._ledger,
            self._shaper,
            self._numa,
            self._pool_tiers,
            pack=options.shared_placement == "pack",
        )
        self._rungs = ladder.Rungs(
            as_asked=self._as_asked,
            after_moves=self._after_moves,
            on_isolated=self._on_isolated,
            on_isolated_mixed=self._on_isolated_mixed,
            on_reserved=self._on_reserved,
            on_overcommit=self._on_overcommit,
            commit=self._commit,
            note=self._note_degradation,
            chosen=self._chosen,
            kubelet_admits=self._kubelet_admits,
            may_degrade=lambda req: parity.may_degrade(req, options),
        )
        # Containers whose grant was committed, undone or ended its cold start since the last
        # `take_changed`: their checkpoint entries (`state.entry`) may differ. None: too many
        # to name (`_CHANGES_NAMED`), any may have changed.
        self._changed: set[str] | None = set()

    # ----------------------------------------------------------------------------------------
    # Read-only views: nothing outside the engine reads or changes its fields

    @property
    def pools(self) -> tuple[Pool, ...]:
        """The pool tree, root first; a grant's `pool` indexes it."""
        return self._pools

    @property
    def grants(self) -> Mapping[str, Grant]:
        """What each placed container holds (read-only: the grants change only through the
        engine's operations)."""
        return self._grants_view

    @property
    def allowed(self) -> frozenset[int]:
        """The online CPUs containers may be placed on (`available_resources`)."""
        return self._allowed

    @property
    def isolated(self) -> frozenset[int]:
        """The allowed kernel-isolated CPUs that are not reserved."""
        return self._isolated

    @property
    def reserved_cpus(self) -> frozenset[int]:
        """Every reserved CPU, the partly reserved one included."""
        return self._reserved_all

    @property
    def exclusive_cpus(self) -> frozenset[int]:
        """The CPUs granted exclusively."""
        return self._taken

    def accounts(self) -> Accounts:
        """The accounting as it stands, for checks of its invariants."""
        ledger = self._ledger
        return Accounts(
            shared_cpus=tuple(ledger.shared_cpus),
            free_isolated=tuple(ledger.free_iso),
            sub_shared=tuple(ledger.sub_shared),
            sub_users=tuple(ledger.sub_users),
            exclusive=self._taken,
            reserved_capacity=self._reserved_capacity,
            reserved_granted=self._reserved_granted,
            memory_requested=self._memory_requested,
            memory=dict(self._book.zones()),
            hugepages=self._huge.booked_pages(),
        )

    # ----------------------------------------------------------------------------------------
    # Set-up

    def _numa_measure(self, pool: Pool) -> tuple[int, float]:
        nodes = sorted(pool.cpu_nodes)
        if not nodes:
            return (0, 0.0)
        total = sum(self.machine.distance(a, b) for a in nodes for b in nodes)
        return scoring.numa_measure(len(nodes), total / (len(nodes) ** 2))

    # ----------------------------------------------------------------------------------------
    # Accounting helpers

    def capacity(self, p: int) -> int:
        """Shared milli-CPU the pool's shared CPUs hold."""
        return self._ledger.capacity(p)

    def allocatable(self, p: int) -> int:
        """Milli-CPU still grantable from the pool's shared CPUs (limited by its ancestors)."""
        return self._ledger.allocatable(p)

    def shared_cpus(self, p: int) -> frozenset[int]:
        """The pool's shared cpuset: its sharable CPUs no container holds exclusively."""
        return self._ledger.shared_cpus[p]

    def sliceable(self, p: int) -> frozenset[int]:
        """The pool's shared CPUs that may become exclusive: the partly reserved one never does."""
        return self._ledger.shared_cpus[p] - self._partial

    def sharable_capacity(self, p: int) -> int:
        """Shared milli-CPU of all the pool's sharable CPUs, as if none were exclusive."""
        return self._ledger.sharable_capacity(p)

    def shared_users(self, p: int) -> Mapping[str, Grant]:
        """The shared containers placed directly in the pool."""
        return self._ledger.users[p]

    def shared_assigned(self, p: int) -> int:
        """Milli-CPU granted from shared CPUs to containers in the pool's subtree."""
        return self._ledger.sub_shared[p]

    def reserved_milli(self, cpus: frozenset[int]) -> int:
        """Milli-CPU the reservation holds among `cpus`."""
        whole = len(cpus & (self._reserved_all - self._partial))
        return 1000 * whole + (self._partial_reserved if self._partial & cpus else 0)

    def memory_charged(self) -> Mapping[frozenset[int], int]:
        """Bytes charged per memory zone."""
        return self._book.zones()

    def memory_capacity(self, nodes: frozenset[int]) -> int:
        """Bytes of memory the nodes hold."""
        return self._book.capacity(nodes)

    def hugepages_free(self, node: int, size_kb: int) -> int:
        """Pages of `size_kb` on `node` no container has booked."""
        return self._huge.free(node, size_kb)

    def pin(self, g: Grant) -> frozenset[int] | None:
        """The cpuset a grant pins its container to (None when CPU pinning is left alone)."""
        return self._pins.pin(g)

    def placement(self, g: Grant) -> Placement:
        return self._pins.placement(g)

    # ----------------------------------------------------------------------------------------
    # Placing

    def place(
        self, req: Request, *, hint: int | None = None, keep: frozenset[int] = frozenset()
    ) -> Decision:
        """Place a new container; `hint`/`keep` try its old pool and CPUs first (resize)."""
        if req.container_id in self._grants:
            raise PolicyError(f"{req.who}: container {req.container_id} is already placed")
        req = parity.kubelet_request(req, self.options)
        self._validate(req)
        op = Op()
        grant, trace, moved = self._admit(req, hint, keep, op)
        updates = self._pins.updates(op, req.container_id, moved, self._grants)
        return self._decision(grant, trace, updates, tuple(sorted(moved)))

    def _admit(self, req: Request, hint: int | None, keep: frozenset[int], op: Op) -> ladder.Placed:
        """Choose and commit a grant, degrading it when it does not fit as asked (`ladder`):
        the grant, its trace and the shared containers moved for it (their old grants)."""
        self._hugepages_admitted(req)
        return ladder.climb(ladder.Climb(self._rungs, req, hint, keep, op, True))

    def _as_asked(
        self, req: Request, hint: int | None, keep: frozenset[int], op: Op
    ) -> ladder.Placed:
        g, trace = self._choose(req, hint, keep)
        better = None if hint is not None else self._better_shape(req, g, trace, op)
        if better is not None:
            return ladder.Placed(*better)
        self._commit(g, op)
        return ladder.Placed(g, trace, {})

    def _after_moves(
        self, req: Request, hint: int | None, keep: frozenset[int], op: Op
    ) -> ladder.Placed | None:
        found = moves.candidates(self._pools, self._ledger, self.options.max_moves, req)
        room = moves.make_room(found, self.try_moves, req, hint, keep, op)
        return None if room is None else ladder.Placed(*room)

    def _chosen(self, g: Grant) -> tuple[PoolScore, ...]:
        return (PoolScore(self._pools[g.pool].name, (), CHOSEN),)

    def _better_shape(
        self, req: Request, g: Grant, trace: tuple[PoolScore, ...], op: Op
    ) -> moves.Moved | None:
        """`req` placed with whole cores on fewer NUMA nodes than `g` (chosen, not committed)
        by moving shared containers (`moves.better_shape`); None, nothing changed, if not."""
        max_moves = self.options.max_moves
        pools, ledger = self._pools, self._ledger
        return moves.better_shape(
            self.machine, pools, ledger, max_moves, self.try_moves, req, g, trace, op
        )

    def try_moves(
        self,
        req: Request,
        hint: int | None,
        keep: frozenset[int],
        movers: tuple[str, ...],
        op: Op,
        better: Callable[[Grant], bool] | None = None,
    ) -> tuple[Grant, tuple[PoolScore, ...], dict[str, Grant]] | None:
        """Take the movers out, place `req`, place the movers again; all or nothing; with
        `better`, only when `req`'s grant is better.

        Returns the committed grant, its trace and the movers' old grants, or None with the
        state exactly as before.
        """
        olds = {cid: self._grants[cid] for cid in movers}
        pinned = {cid: (g.cpus, g.mems) for cid, g in olds.items()}  # what the runtime holds
        trial = Op()
        for old in olds.values():
            self._uncommit(old, trial)
        placed: list[Grant] = []
        try:
            g, trace = self._choose(req, hint, keep)
            if better is not None and not better(g):
                raise PolicyError("no better than without the moves")
            self._commit(g, trial)
            placed.append(g)
            for cid in sorted(olds, key=lambda c: (-olds[c].shared, c)):
                placed.append(self._move(olds[cid], req, trial))
        except PolicyError:
            for done in reversed(placed):
                self._uncommit(done, Op())
            for cid, old in olds.items():
                self._commit(old, Op())
                old.cpus, old.mems = pinned[cid]  # the next diff compares with these
            return None
        op.touched |= trial.touched
        return g, trace, olds

    def _move(self, old: Grant, cause: Request, op: Op) -> Grant:
        """Place a shared container taken out for `cause` again (committed); PolicyError if not."""
        try:
            g, _ = self._choose(old.request, None, frozenset())
        except PolicyError:
            last = self._on_reserved(old.request)
            if last is None or not parity.may_degrade(old.request, self.options):
                raise
            g = last
        if g.hugepages_short:
            raise PolicyError(f"{old.request.who}: its hugepages no longer fit")
        if old.cold_start is None:
            g.cold_start = None
        self._commit(g, op)
        self._note_degradation(g, old.request)
        g.degraded = tuple(dict.fromkeys(old.degraded + g.degraded))
        g.reason = f"moved to make room for {cause.who}: {g.reason}"
        return g

    def _on_isolated(self, req: Request, op: Op) -> Grant | None:
        """Exclusive CPUs from the isolated ones when no ordinary CPUs are left (committed).

        The kubelet hands isolated CPUs out like any other; this policy keeps them for the
        containers that prefer them, and gives them to others only instead of a degradation.
        """
        if req.kind not in (CpuKind.EXCLUSIVE, CpuKind.MIXED) or not self._isolated:
            return None
        try:
            g, _ = self._choose(replace(req, kind=CpuKind.ISOLATED), None, frozenset())
        except PolicyError:
            return None
        if not g.isolated:
            return None
        self._commit(g, op)
        g.reason += "; isolated CPUs because no ordinary ones are left"
        return g

    def _on_isolated_mixed(self, req: Request, op: Op) -> Grant | None:
        """Exclusive CPUs from the root's free ordinary CPUs plus isolated ones (committed).

        Neither kind alone holds the request but together they do, as the kubelet, which counts
        isolated CPUs as allocatable, would assign them. As many ordinary CPUs as can be sliced
        without starving a shared container, the rest isolated.
        """
        if req.kind not in EXCLUSIVE_KINDS or not self._isolated:
            return None
        kind = req.kind
        if kind is CpuKind.ISOLATED:
            kind = CpuKind.MIXED if req.shared else CpuKind.EXCLUSIVE
        mixed = replace(req, kind=kind)
        root = 0
        free_iso = self._ledger.free_iso[root]
        k = req.exclusive
        try:
            zone, relaxed, size = self._degraded_root_zone(mixed)
            sliceable = self._shaper.sliceable(
                root, k, mixed.shared if kind is CpuKind.MIXED else 0, kind
            )
        except (LookupError, PolicyError, shape.GrantFailed):
            return None
        whole = self.options.full_pcpus_only
        ordinary = min(k, len(sliceable))
        if whole:
            ordinary -= ordinary % self.machine.threads_per_core
        if k - ordinary > len(free_iso) or ordinary == k:
            return None
        try:
            exclusive = cpuallocator.take_cpus(
                self.machine, sliceable, ordinary, full_pcpus_only=whole
            ) | cpuallocator.take_cpus(self.machine, free_iso, k - ordinary, full_pcpus_only=whole)
        except cpuallocator.AllocationError:
            return None
        g = self._grant(
            mixed, GrantShape(root, kind, exclusive, False, mixed.shared, zone, relaxed, size)
        )
        g.reason = (
            f"{ordinary} ordinary and {k - ordinary} isolated exclusive CPUs: neither kind alone "
            "is left for all of them"
        )
        self._commit(g, op)
        return g

    def _degraded_root_zone(self, req: Request) -> tuple[frozenset[int], bool, int]:
        """The root's memory zone of a degradable request (widened across tiers), whether it was
        relaxed, and the bytes to charge; LookupError when even that cannot hold it."""
        size = _charged_size(req)
        zone, relaxed = self._zones.zone(0, self._zones.tiers(req), size, True, self._squeeze(req))
        return zone, relaxed, size

    def _hugepages_admitted(self, req: Request) -> None:
        """Refuse hugepages beyond the pages of their size still free on the whole machine: the
        kubelet, counting the same pages, does not admit them either."""
        if not req.hugepages:
            return
        order = tuple(self.machine.nodes)
        _, short = self._huge.layout(req.hugepages, order)
        if short:
            why = hugepages.describe_short(req.hugepages, short, self._huge, order)
            raise PolicyError(f"{req.who}: {why}")

    def _kubelet_admits(self, req: Request) -> bool:
        """Whether the kubelet would admit the container next to those placed: CPU requests
        within the allocatable CPU (capacity - reservation), exclusive CPUs within the CPUs."""
        allocatable = 1000 * len(self._allowed) - self._reserved_capacity
        requested = sum(g.request.cpu_request for g in self._grants.values())
        if requested + req.cpu_request > allocatable:
            return False
        return req.exclusive * 1000 <= allocatable

    def _squeeze(self, req: Request) -> bool:
        """Whether the kubelet would admit the container's memory next to those placed: the
        memory requests known (a Burstable container's may be unknown, 0 here, while its limit
        is charged) within the machine's memory."""
        total = self._memory_requested + req.memory_request
        return total <= self._memory_capacity

    def _on_reserved(self, req: Request) -> Grant | None:
        """A shared grant on the reserved CPUs, the kubelet's shared CPUs of last resort."""
        if self.options.strict_reserved_cpus or not self._reserved_all:
            return None
        if req.kind not in (CpuKind.SHARED, CpuKind.RESERVED):
            return None
        if req.cpu_request > self._reserved_capacity - self._reserved_granted:
            return None  # the reserved CPUs are never over-committed
        try:
            zone, relaxed, size = self._degraded_root_zone(req)
        except LookupError:
            return None
        shared = parity.as_kind(req, CpuKind.RESERVED)
        g = self._grant(
            shared,
            GrantShape(
                0, CpuKind.RESERVED, shared=shared.shared, zone=zone, relaxed=relaxed, size=size
            ),
        )
        g.reason = "no shared CPU left in any pool: on the reserved CPUs, the kubelet shares them"
        return g

    def _on_overcommit(self, req: Request, op: Op) -> Grant | None:
        """Shared CPUs of the root, charged only the shared milli-CPU left there (committed).

        No pool holds the request, yet the kubelet, with one shared pool, admits it: the root's
        shared set spans every shared CPU and its CPU shares divide their time as the kubelet's
        would. Later grants see only what was charged (`Degradation.SHARED_OVERCOMMIT`).
        """
        if req.kind not in (CpuKind.SHARED, CpuKind.RESERVED):
            return None
        root = 0
        if not self._ledger.shared_cpus[root]:
            return None
        req = parity.as_kind(req, CpuKind.SHARED)
        try:
            zone, relaxed, size = self._degraded_root_zone(req)
        except LookupError:
            return None
        charge = max(0, min(req.shared, self._ledger.allocatable(root)))
        g = self._grant(
            req,
            GrantShape(root, CpuKind.SHARED, shared=charge, zone=zone, relaxed=relaxed, size=size),
        )
        g.reason = (
            f"no pool holds {req.shared}m of shared CPU: shared CPUs of {self._pools[root].name} "
            f"over-committed, {charge}m charged, the kubelet's shared pool admits it"
        )
        self._commit(g, op)
        return g

    def _note_degradation(self, g: Grant, asked: Request) -> None:
        zone_tiers = self._zones.tiers_of(g.zone)
        widened = not zone_tiers <= self._zones.tiers(g.request)
        iso_mixed = not g.isolated and bool(g.exclusive & self._isolated)
        cut = bool(g.zone) and not g.request.memory_preserve and g.memory < memory_size(g.request)
        cpu_cut = g.kind is CpuKind.SHARED and g.shared < g.request.shared
        remote = self._hugepages_remote(g)
        if (
            not widened
            and not iso_mixed
            and not cut
            and not cpu_cut
            and not remote
            and g.kind is asked.kind
        ):
            return
        g.degraded = parity.degradations(asked.kind, g.kind, widened, iso_mixed, cut, cpu_cut)
        if remote:
            g.degraded += (Degradation.HUGEPAGES_REMOTE,)
            g.reason += (
                f"; hugepages on nodes {cpuset.format(remote)} beyond the pool's, "
                "its own have too few free"
            )
        if cut:
            g.reason += (
                f"; {g.memory} of {memory_size(g.request)} bytes of memory charged, "
                "the rest fits nowhere"
            )
        if widened and "memory widened into" not in g.reason:
            names = ",".join(sorted(str(t) for t in zone_tiers))
            g.reason += f"; memory widened into tiers {names} because its own ran out"

    def _hugepages_remote(self, g: Grant) -> frozenset[int]:
        """The nodes of a grant's hugepages outside its pool and memory zone."""
        if not g.hugepages:
            return frozenset()
        return hugepages.nodes_of(g.hugepages) - self._pools[g.pool].nodes - g.zone

    def _validate(self, req: Request) -> None:
        if req.kind in EXCLUSIVE_KINDS and req.exclusive < 1:
            raise PolicyError(f"{req.who}: kind {req.kind} without exclusive CPUs")
        if req.exclusive < 0 or req.shared < 0:
            raise PolicyError(f"{req.who}: negative CPU amounts")
        tpc = self.machine.threads_per_core
        if self.options.full_pcpus_only and req.kind in EXCLUSIVE_KINDS and req.exclusive % tpc:
            raise PolicyError(
                f"{req.who}: full_pcpus_only is on and {req.exclusive} exclusive CPUs is not a "
                f"multiple of the {tpc} threads per physical core; request a multiple of {tpc}"
            )

    def _choose(
        self, req: Request, hint: int | None, keep: frozenset[int]
    ) -> tuple[Grant, tuple[PoolScore, ...]]:
        size = _charged_size(req)
        tiers = self._zones.tiers(req)
        root = 0
        if req.kind is CpuKind.PRESERVE:
            zone, relaxed = self._root_zone(req, tiers, size)
            g = self._grant(
                req, GrantShape(root, CpuKind.PRESERVE, zone=zone, relaxed=relaxed, size=size)
            )
            g.reason = "CPU pinning preserved; accounted at the root"
            return g, (PoolScore(self._pools[root].name, (), CHOSEN),)
        if req.kind is CpuKind.RESERVED:
            free = self._reserved_capacity - self._reserved_granted
            if self._reserved_all and req.shared <= free:
                zone, relaxed = self._root_zone(req, tiers, size)
                g = self._grant(
                    req,
                    GrantShape(
                        root,
                        CpuKind.RESERVED,
                        shared=req.shared,
                        zone=zone,
                        relaxed=relaxed,
                        size=size,
                    ),
                )
                g.reason = f"reserved CPUs ({req.shared}m of {free}m free reserved capacity)"
                return g, (PoolScore(self._pools[root].name, (), CHOSEN),)
            why = (
                "no CPUs are reserved"
                if not self._reserved_all
                else f"reserved capacity exhausted ({free}m free, {req.shared}m requested)"
            )
            req = replace(req, kind=CpuKind.SHARED)
            fallback = f"{why}; placed on shared CPUs instead"
        else:
            fallback = ""

        widen = parity.may_degrade(req, self.options)
        options, unfit = choose.options(
            req,
            self._board,
            tiers,
            size,
            self._affinity(req),
            self._zones.zone,
            widen=widen,
            squeeze=widen and self._squeeze(req),
        )

        # Hugepages on the pool's own nodes first; beyond them, in a second round, only when
        # memory may widen too (the request is not strict and the operator lets it degrade).
        remote = False

        def attempt(o: choose.Option) -> Grant:
            shape = self._shaper.shape(
                req, o.pool.index, o.zone, o.relaxed, keep, tiers, size, o.span
            )
            within = None if remote else o.pool.nodes | o.zone
            g = self._grant(req, shape, within)
            if g.hugepages_short:
                raise GrantFailed(
                    hugepages.describe_short(
                        req.hugepages,
                        dict(g.hugepages_short),
                        self._huge,
                        within if within is not None else self.machine.nodes,
                    )
                )
            g.reason = _reason(g, o.pool.name, fallback, shape.note)
            return g

        chosen = choose.choose(options, unfit, hint, attempt, self._by_name)
        if chosen.grant is None and req.hugepages and widen:
            remote = True
            chosen = choose.choose(options, unfit, hint, attempt, self._by_name)
        g = chosen.grant
        if g is None:
            raise PolicyError(
                choose.refusal(
                    req, size, tiers, chosen.trace, self._pools, self._ledger, self._book
                )
            )
        if req.hint_nodes:
            g.hints_missed = self._hints_missed(g, chosen.trace)
            g.reason += "; " + _hinted(req, g.hints_missed)
        if chosen.runner_up is not None:
            g.reason += f"; beat {chosen.runner_up.pool} on {chosen.runner_up.result.criterion}"
        return g, chosen.trace

    def _hints_missed(self, g: Grant, trace: tuple[PoolScore, ...]) -> str:
        """Why a grant's CPUs are not all on its devices' NUMA nodes, "" when they are.

        The CPUs it runs on decide, not its pool: a pool covering the devices' nodes may still
        give CPUs of others (a full node in a socket pool). Why: what became of the pools whose
        CPUs are all on those nodes.
        """
        hinted = g.request.hint_nodes
        cpus = g.exclusive | (self.shared_cpus(g.pool) if g.uses_shared else frozenset())
        nodes = frozenset(self.machine.cpus[c].node for c in cpus)
        outside = nodes - hinted
        if not outside:
            return ""
        within = [
            f"{s.pool} {s.verdict}"
            for s in trace
            if s.result.outcome is not Outcome.CHOSEN
            and (i := self._by_name.get(s.pool)) is not None
            and self._pools[i].cpu_nodes <= hinted
        ]
        why = "; ".join(within[:_WHY_SHOWN]) if within else "no pool has CPUs of those nodes only"
        too = " too" if nodes & hinted else ""
        return f"CPUs on NUMA {cpuset.format(outside)}{too}: {why}"

    def _root_zone(
        self, req: Request, tiers: frozenset[MemoryTier], size: int
    ) -> tuple[frozenset[int], bool]:
        try:
            widen = parity.may_degrade(req, self.options)
            return self._zones.zone(0, tiers, size, widen, widen and self._squeeze(req))
        except LookupError as e:
            raise PolicyError(f"{req.who}: memory does not fit at the root: {e}") from None

    def _affinity(self, req: Request) -> list[float]:
        if not req.affinities:
            return [0.0] * len(self._pools)
        weights = self._by_attribute.weights(req)
        per_pool: dict[int, float] = {}
        for cid, w in weights.items():
            g = self._grants.get(cid)
            if g is not None:
                per_pool[g.pool] = per_pool.get(g.pool, 0.0) + w
        return scoring.affinity_scores(self._pools, per_pool)

    def _grant(
        self,
        req: Request,
        shape: GrantShape,
        within: frozenset[int] | None = None,
        prefer: frozenset[int] = frozenset(),
    ) -> Grant:
        """The grant of `shape` to `req`, with the cold start its memory zone allows and its
        hugepages laid out on the nodes of `within` (all when None), those of `prefer` first,
        then its CPUs' nodes, then its memory zone's; what fits nowhere is in
        `hugepages_short`."""
        kind, zone, shared = shape.kind, shape.zone, shape.shared
        cold: ColdStart | None = None
        if req.cold_start_ns > 0 and zone:
            dram = frozenset(n for n in zone if self.machine.nodes[n].tier is MemoryTier.DRAM)
            nodes = self.machine.nodes
            if dram and any(nodes[n].normal for n in zone - dram):  # no start on movable only
                cold = ColdStart(delay_ns=req.cold_start_ns, then_mems=zone)
        if kind is CpuKind.EXCLUSIVE or (kind is CpuKind.ISOLATED and not req.shared):
            shared = 0
        g = Grant(
            request=req,
            pool=shape.pool,
            kind=kind,
            exclusive=shape.exclusive,
            isolated=shape.isolated,
            shared=shared,
            zone=zone,
            memory=self._charge(zone, shape.size),
            relaxed=shape.relaxed,
            cold_start=cold,
        )
        if req.hugepages:
            cpu_nodes = (
                frozenset(self.machine.cpus[c].node for c in shape.exclusive)
                if shape.exclusive
                else self._pools[shape.pool].cpu_nodes
            )
            order = hugepages.node_order(self.machine, [prefer, cpu_nodes, zone])
            layout, short = self._huge.layout(req.hugepages, order, within)
            g.hugepages, g.hugepages_short = layout, tuple(sorted(short.items()))
        return g

    def _charge(self, zone: frozenset[int], size: int) -> int:
        """Bytes a grant charges to its zone: its size, or what fits when it does not
        (`Degradation.MEMORY_CHARGE`; only a degradable request gets such a zone)."""
        if not zone:
            return 0
        if size > 0 and not self._book.fits(zone, size):
            return min(size, self._book.room(zone))
        return size

    def _commit(self, g: Grant, op: Op) -> None:
        """Apply a grant to the accounting and pin it; the grant must have been checked."""
        cid = g.request.container_id
        self._note_changed(cid)
        if g.exclusive:
            self._taken |= g.exclusive
            iso = g.exclusive & self._isolated  # all of them, or part (ISOLATED_MIXED)
            for x in self._pools_touching(g.exclusive):
                if iso:
                    self._ledger.free_iso[x] -= iso
                if iso != g.exclusive:
                    self._ledger.shared_cpus[x] = self._pins.interned(
                        self._ledger.shared_cpus[x] - g.exclusive
                    )
                    op.touched.add(x)
        if g.kind is CpuKind.RESERVED:
            self._reserved_granted += g.shared
        elif g.uses_shared:
            for a in self._chain[g.pool]:
                self._ledger.sub_shared[a] += g.shared
                self._ledger.sub_users[a] += 1
            self._ledger.add_user(g.pool, cid, g, self._pins.plain(g))
        self._book.charge(g.zone, g.memory)
        if g.hugepages:
            self._huge.book(g.hugepages)
        self._memory_requested += g.request.memory_request
        self._grants[cid] = g
        self._by_attribute.add(g.request)
        g.cpus = self._pins.pin(g)
        g.mems = self._pins.mems(g)

    def _uncommit(self, g: Grant, op: Op) -> None:
        cid = g.request.container_id
        self._note_changed(cid)
        del self._grants[cid]
        self._by_attribute.remove(cid)
        if g.exclusive:
            self._taken -= g.exclusive
            iso = g.exclusive & self._isolated
            for x in self._pools_touching(g.exclusive):
                pool = self._pools[x]
                if iso:
                    self._ledger.free_iso[x] |= iso & pool.isolated
                if iso != g.exclusive:
                    self._ledger.shared_cpus[x] = self._pins.interned(
                        self._ledger.shared_cpus[x] | g.exclusive & pool.sharable
                    )
                    op.touched.add(x)
        if g.kind is CpuKind.RESERVED:
            self._reserved_granted -= g.shared
        elif g.uses_shared:
            for a in self._chain[g.pool]:
                self._ledger.sub_shared[a] -= g.shared
                self._ledger.sub_users[a] -= 1
            self._ledger.remove_user(g.pool, cid)
        self._book.refund(g.zone, g.memory)
        if g.hugepages:
            self._huge.unbook(g.hugepages)
        self._memory_requested -= g.request.memory_request

    def _pools_touching(self, cpus: Iterable[int]) -> list[int]:
        seen: set[int] = set()
        for c in cpus:
            seen.update(self._pools_of_cpu.get(c, ()))
        return sorted(seen)

    def _decision(
        self,
        g: Grant,
        trace: tuple[PoolScore, ...],
        updates: tuple[Update, ...],
        moved: tuple[str, ...] = (),
    ) -> Decision:
        return Decision(
            container_id=g.request.container_id,
            pool=self._pools[g.pool].name,
            kind=g.kind,
            placement=self._pins.placement(g),
            exclusive=g.exclusive,
            memory_tiers=self._zones.tiers_of(g.zone),
            updates=updates,
            reason=g.reason,
            trace=trace,
            memory_relaxed=g.relaxed,
            cold_start=g.cold_start,
            degraded=g.degraded,
            moved=moved,
            hints_missed=g.hints_missed,
            warnings=g.request.warnings,
            hugepages=g.hugepages,
        )

    # ----------------------------------------------------------------------------------------
    # Releasing, resizing, cold start, adopting

    def release(self, container_id: str) -> tuple[Update, ...]:
        g = self._grants.get(container_id)
        if g is None:
            return ()
        op = Op()
        self._uncommit(g, op)
        updates = self._pins.diff(op)
        self._pins.forget(container_id)
        return updates

    def resize(self, req: Request) -> Decision:
        """Re-place a running container with a new request: in its pool when it fits."""
        cid = req.container_id
        old = self._grants.get(cid)
        if old is None:
            return self.place(req)
        if _same_amounts(old.request, req):
            self._memory_requested += req.memory_request - old.request.memory_request
            plain = old.uses_shared and self._pins.plain(old)
            old.request = req  # pinning details (hyperthreads, memory) may still change
            if old.uses_shared and self._pins.plain(old) != plain:
                self._ledger.refile(old.pool, cid, old, not plain)
            self._by_attribute.add(req)
            old.cpus, old.mems = self._pins.pin(old), self._pins.mems(old)
            return self._decision(old, (), ())
        req = parity.kubelet_request(req, self.options)
        self._validate(req)
        op = Op()
        self._uncommit(old, op)
        try:
            g, trace, others = self._admit(req, old.pool, old.exclusive, op)
        except PolicyError:
            self._commit(old, Op())
            raise
        moved = g.pool != old.pool or not (
            old.exclusive <= g.exclusive or g.exclusive <= old.exclusive
        )
        g.reason = ("moved: " if moved else "resized in place: ") + g.reason
        return self._decision(
            g, trace, self._pins.updates(op, cid, others, self._grants), tuple(sorted(others))
        )

    def succeed(self, previous: str, req: Request) -> Decision:
        """Give a container's next attempt what its previous attempt holds, which it replaces.

        Asking for the same amounts, it gets the same pool, CPUs, charges and memory zone, so no
        other container's pinning changes; else it is placed as a resize would (its old pool and
        CPUs tried first). All or nothing: on PolicyError the previous attempt keeps its grant.
        """
        old = self._grants.get(previous)
        if old is None:
            raise PolicyError(f"{req.who}: previous attempt {previous} is not placed")
        if req.container_id in self._grants:
            raise PolicyError(f"{req.who}: container {req.container_id} is already placed")
        req = parity.kubelet_request(req, self.options)
        self._validate(req)
        op = Op()
        self._uncommit(old, op)
        others: dict[str, Grant] = {}
        trace: tuple[PoolScore, ...] = ()
        if _same_amounts(old.request, req):
            same = GrantShape(
                old.pool, old.kind, old.exclusive, old.isolated, old.shared, old.zone, old.relaxed
            )
            g = self._grant(req, same)
            g.memory = old.memory  # as charged, cut back or not
            g.reason = f"kept from its previous attempt: {old.reason}"
            g.degraded = old.degraded
            self._commit(g, op)
        else:
            try:
                g, trace, others = self._admit(req, old.pool, old.exclusive, op)
            except PolicyError:
                self._commit(old, Op())
                raise
        self._pins.forget(previous)
        updates = self._pins.updates(op, req.container_id, others, self._grants)
        return self._decision(g, trace, updates, tuple(sorted(others)))

    def finish_cold_start(self, container_id: str) -> tuple[Update, ...]:
        g = self._grants.get(container_id)
        if g is None or g.cold_start is None:
            return ()
        g.cold_start = None
        self._note_changed(container_id)
        mems = self._pins.mems(g)
        if mems is None or mems == g.mems:
            return ()
        g.mems = mems
        return (Update(container_id, Placement(cpus=None, mems=mems)),)

    def adopt(
        self,
        req: Request,
        pool: int,
        exclusive: frozenset[int],
        isolated: bool,
        zone: frozenset[int] | None,
        cpus: frozenset[int] | None,
        mems: frozenset[int] | None,
        cold_start_over: bool = False,
        charged: tuple[int | None, int | None] = (None, None),
    ) -> Grant:
        """Take over an existing placement verbatim; PolicyError when it is inconsistent.

        `cpus`/`mems` are what the runtime reports the container runs on now, so that a later
        diff tells whether it needs an update. A cold start ends at once when `cold_start_over`
        (saved state says so) or when the container already runs on the widened memory nodes.
        `charged` is the shared milli-CPU and memory bytes saved for it (None: unknown): less
        than asked when it was placed over-committed or squeezed, which is kept for a request
        that may be degraded (the order of adoption is not the order of placement, so the
        charge cannot be worked out again).
        """
        if req.container_id in self._grants:
            raise PolicyError(f"{req.who}: container {req.container_id} is already placed")
        req = parity.kubelet_request(req, self.options)
        self._validate(req)
        kind = req.kind
        if kind is CpuKind.ISOLATED and not isolated:
            kind = CpuKind.MIXED if req.shared else CpuKind.EXCLUSIVE
        pool_cpus = (
            self._ledger.free_iso[pool]
            if isolated  # else ordinary CPUs, or next to isolated ones (ISOLATED_MIXED)
            else self._ledger.shared_cpus[pool] - self._partial | self._ledger.free_iso[pool]
        )
        if kind in EXCLUSIVE_KINDS:
            if len(exclusive) != req.exclusive:
                raise PolicyError(
                    f"holds {len(exclusive)} exclusive CPUs, the request asks for {req.exclusive}"
                )
            if not exclusive <= pool_cpus:
                raise PolicyError(
                    f"CPUs {cpuset.format(exclusive - pool_cpus)} are not free in "
                    f"{self._pools[pool].name}"
                )
            if self.options.full_pcpus_only and any(
                not self.machine.cpus[c].threads <= exclusive for c in exclusive
            ):
                raise PolicyError("full_pcpus_only is on and the CPUs split a physical core")
        elif exclusive:
            raise PolicyError(f"kind {kind} holds no exclusive CPUs")
        size = _charged_size(req)
        degradable = parity.may_degrade(req, self.options)
        saved_shared, saved_memory = charged if degradable else (None, None)
        charge = size if saved_memory is None else min(size, saved_memory)
        tiers = self._zones.tiers(req)
        if zone is None or not zone:
            try:
                zone, relaxed = self._zones.zone(pool, tiers, size)
            except LookupError as e:
                raise PolicyError(f"memory: {e}") from None
        else:
            unknown = zone - frozenset(self.machine.nodes)
            if unknown:
                raise PolicyError(f"unknown memory nodes {cpuset.format(unknown)}")
            squeeze = degradable and self._squeeze(req)
            if not self._book.fits(zone, charge) and not squeeze:
                raise PolicyError(f"memory zone {cpuset.format(zone)} is full")
            relaxed = False
        shared = req.shared if kind not in (CpuKind.EXCLUSIVE, CpuKind.PRESERVE) else 0
        if kind is CpuKind.SHARED and degradable and self._kubelet_admits(req):
            if saved_shared is not None and saved_shared < shared:
                shared = saved_shared  # it was placed over-committed
            elif shared > self._ledger.allocatable(pool):
                shared = max(0, self._ledger.allocatable(pool))  # placed over-committed
        g = self._grant(
            req,
            GrantShape(pool, kind, exclusive, isolated, shared, zone, relaxed, charge),
            prefer=mems or frozenset(),
        )
        self._check_fits(g)
        g.reason = "adopted as found"
        g.degraded = parity.degradations(
            kind,
            kind,
            tier_widened=False,
            isolated_mixed=not isolated and bool(exclusive & self._isolated),
            memory_cut=g.memory < size,
            cpu_cut=g.kind is CpuKind.SHARED and g.shared < req.shared,
        )
        if g.hugepages_short:  # adopted as it runs: what fits is booked, the rest is not
            g.degraded += (Degradation.HUGEPAGES_CHARGE,)
        if self._hugepages_remote(g):
            g.degraded += (Degradation.HUGEPAGES_REMOTE,)
        self._commit(g, Op())
        g.cpus, g.mems = cpus, mems
        if g.cold_start is not None and (
            cold_start_over or (mems is not None and g.cold_start.then_mems <= mems)
        ):
            g.cold_start = None  # its cold start finished before the restart
        return g

    def _check_fits(self, g: Grant) -> None:
        """Whether a grant given from outside (adoption) keeps the accounting valid."""
        if g.kind is CpuKind.RESERVED:
            if g.shared > self._reserved_capacity - self._reserved_granted:
                raise PolicyError("reserved capacity exhausted")
            return
        k = len(g.exclusive - self._isolated)
        extra = g.shared if g.uses_shared else 0
        users = int(g.uses_shared)
        for x in self._pools_touching(g.exclusive) if k else ():
            if x in self._chain[g.pool]:
                continue
            if len(self._ledger.shared_cpus[x] - g.exclusive) < self._ledger.need_cpus(x):
                raise PolicyError(f"would starve the shared containers of {self._pools[x].name}")
        short = self._ledger.short(g.pool, k, extra, users)
        if short is not None:
            raise PolicyError(f"not enough shared capacity in {self._pools[short].name}")

    def take_changed(self) -> set[str] | None:
        """The containers whose grant changed since the last call (placed, moved, resized,
        released, cold start ended), None when there were too many to name: then any may have.
        Each is named once, to the one reader (`Policy.changes`)."""
        changed, self._changed = self._changed, set()
        return changed

    def _note_changed(self, container_id: str) -> None:
        changed = self._changed
        if changed is not None:
            changed.add(container_id)
            if len(changed) > _CHANGES_NAMED:
                self._changed = None

    def decision_of(self, container_id: str) -> Decision:
        """The current placement of a container as a decision without trace or updates."""
        return self._decision(self._grants[container_id], (), ())

    def pool_index(self, name: str) -> int | None:
        """The index of the pool named `name`, None when this tree has no such pool."""
        return self._by_name.get(name)

    def running(
        self, container_id: str, cpus: frozenset[int] | None, mems: frozenset[int] | None
    ) -> None:
        """Note what the runtime reports a placed container runs on, for `refresh` to diff."""
        g = self._grants.get(container_id)
        if g is not None:
            g.cpus = cpus if cpus is not None else frozenset()
            g.mems = mems if mems is not None else frozenset()

    def refresh(self) -> tuple[Update, ...]:
        """Updates for every container whose pinning differs from what the accounting says."""
        return self._pins.refresh(self._grants)


def _same_amounts(a: Request, b: Request) -> bool:
    return (
        a.kind == b.kind
        and a.exclusive == b.exclusive
        and a.shared == b.shared
        and a.cpu_limit == b.cpu_limit
        and memory_size(a) == memory_size(b)
        and a.memory_tiers == b.memory_tiers
        and a.memory_preserve == b.memory_preserve
        and a.require_isolated == b.require_isolated
        and a.single_numa == b.single_numa
        and a.hugepages == b.hugepages
    )


def _hinted(req: Request, missed: str) -> str:
    """What the decision says about the container's topology hints: covered when its CPUs are
    all on the devices' NUMA nodes, else missed and why."""
    providers = ", ".join(sorted({h.provider for h in req.hints}))
    covered = f"missed, {missed}" if missed else "covered"
    return f"devices on NUMA {cpuset.format(req.hint_nodes)} ({providers}): {covered}"


def _reason(g: Grant, pool: str, fallback: str, note: str) -> str:
    parts = [f"{g.kind} CPUs in {pool}"]
    if fallback:
        parts.append(fallback)
    if note:
        parts.append(note)
    if g.relaxed:
        parts.append("memory widened beyond the pool because it ran out")
    return "; ".join(parts)


def _charged_size(req: Request) -> int:
    """Bytes a request charges to its memory zone: none for preserved memory."""
    return 0 if req.memory_preserve else memory_size(req)
