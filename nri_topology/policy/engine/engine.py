"""The placement engine: accounting of CPUs and memory over the pool tree, grants and releases.

Pure and deterministic: state changes only through `place`, `release`, `resize`, `succeed`,
`adopt` and `finish_cold_start`, each of which either completes or raises `PolicyError` with the
state exactly as before (`running` only notes what the runtime reports, for `refresh` to diff).
This module holds those transactions; the rest of the engine room holds their parts: the state
(`state`), the record of placed containers (`record`), a grant applied to and taken out of the
accounts (`commit`), the grant as asked (`choosing`), the degradation steps (`rungs`),
adoption (`adopt`), the decisions (`decisions`), the pinning and update diff (`updates`), the
change tracking for the checkpoint (`changes`) and the read-only views (`views`). The
checkpoint format is `checkpoint.state`'s, the CPU accounts are the `accounts.ledger`'s, the
memory zones `accounts.zones`', the pool choice is `choice`'s, the CPUs and memory a grant takes
in its pool are `shaping`'s, the order of the steps for a container that does not fit
`admission.ladder`'s.

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

from nri_topology.policy.accounts.grant import Grant, Op, memory_size
from nri_topology.policy.engine import adopt as adoption
from nri_topology.policy.engine import rungs
from nri_topology.policy.engine.commit import commit, make_grant, revert
from nri_topology.policy.engine.decisions import decision
from nri_topology.policy.engine.state import State
from nri_topology.policy.engine.updates import SHARED_SETS_KEPT
from nri_topology.policy.engine.views import Views
from nri_topology.policy.options import Options
from nri_topology.policy.shaping.shape import GrantShape
from nri_topology.policy.types import (
    EXCLUSIVE_KINDS,
    Decision,
    Placement,
    PolicyError,
    PoolScore,
    Request,
    Update,
)
from nri_topology.topology.model import Machine


class Engine(Views):
    """Grants and accounting for one machine and one set of options."""

    def __init__(
        self,
        machine: Machine,
        options: Options,
        *,
        keep: frozenset[int] = frozenset(),
        avoid: frozenset[int] = frozenset(),
        shared_sets_kept: int = SHARED_SETS_KEPT,
    ) -> None:
        """`keep` and `avoid` steer a quantity reservation (`reservation.reserve`): the CPUs it
        held before a restart or reload, and those running exclusive containers hold.
        `shared_sets_kept` bounds the update diff's speed seam (`updates.Pins`)."""
        s = State(machine, options, keep, avoid, shared_sets_kept)
        super().__init__(s)
        self._s = s
        self._rungs = rungs.rungs(s)

    def place(
        self, req: Request, *, hint: int | None = None, keep: frozenset[int] = frozenset()
    ) -> Decision:
        """Place a new container; `hint`/`keep` try its old pool and CPUs first (resize)."""
        s = self._s
        if req.container_id in s.record.grants:
            raise PolicyError(f"{req.who}: container {req.container_id} is already placed")
        self._validate(req)
        op = Op()
        grant, trace, moved = rungs.admit(s, self._rungs, req, hint, keep, op)
        updates = s.pins.updates(op, req.container_id, moved, s.record.grants)
        return decision(s, grant, trace, updates, tuple(sorted(moved)))

    def release(self, container_id: str) -> tuple[Update, ...]:
        """Free what a container holds; the updates of the others it gives CPUs back to."""
        s = self._s
        g = s.record.grants.get(container_id)
        if g is None:
            return ()
        op = Op()
        revert(s, g, op)
        updates = s.pins.diff(op)
        s.pins.forget(container_id)
        return updates

    def resize(self, req: Request) -> Decision:
        """Re-place a running container with a new request: in its pool when it fits."""
        s = self._s
        cid = req.container_id
        old = s.record.grants.get(cid)
        if old is None:
            return self.place(req)
        if _same_amounts(old.request, req):
            s.memory_requested += req.memory_request - old.request.memory_request
            plain = old.uses_shared and s.pins.plain(old)
            old.request = req  # pinning details (hyperthreads, memory) may still change
            if old.uses_shared and s.pins.plain(old) != plain:
                s.ledger.refile(old.pool, cid, old, not plain)
            s.record.renew(old)
            old.cpus, old.mems = s.pins.pin(old), s.pins.mems(old)
            return decision(s, old)
        self._validate(req)
        op = Op()
        revert(s, old, op)
        try:
            g, trace, others = rungs.admit(s, self._rungs, req, old.pool, old.exclusive, op)
        except PolicyError:
            commit(s, old, Op())
            raise
        moved = g.pool != old.pool or not (
            old.exclusive <= g.exclusive or g.exclusive <= old.exclusive
        )
        g.reason = ("moved: " if moved else "resized in place: ") + g.reason
        updates = s.pins.updates(op, cid, others, s.record.grants)
        return decision(s, g, trace, updates, tuple(sorted(others)))

    def succeed(self, previous: str, req: Request) -> Decision:
        """Give a container's next attempt what its previous attempt holds, which it replaces.

        Asking for the same amounts, it gets the same pool, CPUs, charges and memory zone, so no
        other container's pinning changes; else it is placed as a resize would (its old pool and
        CPUs tried first). All or nothing: on PolicyError the previous attempt keeps its grant.
        """
        s = self._s
        old = s.record.grants.get(previous)
        if old is None:
            raise PolicyError(f"{req.who}: previous attempt {previous} is not placed")
        if req.container_id in s.record.grants:
            raise PolicyError(f"{req.who}: container {req.container_id} is already placed")
        self._validate(req)
        op = Op()
        revert(s, old, op)
        others: dict[str, Grant] = {}
        trace: tuple[PoolScore, ...] = ()
        if _same_amounts(old.request, req):
            same = GrantShape(
                old.pool, old.kind, old.exclusive, old.isolated, old.shared, old.zone, old.relaxed
            )
            g = make_grant(s, req, same)
            g.memory = old.memory  # as charged, cut back or not
            g.reason = f"kept from its previous attempt: {old.reason}"
            g.degraded = old.degraded
            commit(s, g, op)
        else:
            try:
                g, trace, others = rungs.admit(s, self._rungs, req, old.pool, old.exclusive, op)
            except PolicyError:
                commit(s, old, Op())
                raise
        s.pins.forget(previous)
        updates = s.pins.updates(op, req.container_id, others, s.record.grants)
        return decision(s, g, trace, updates, tuple(sorted(others)))

    def finish_cold_start(self, container_id: str) -> tuple[Update, ...]:
        """End a container's cold start: its memory widens to DRAM (the update is its own)."""
        s = self._s
        g = s.record.grants.get(container_id)
        if g is None or g.cold_start is None:
            return ()
        g.cold_start = None
        s.changes.note(container_id)
        mems = s.pins.mems(g)
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
        `charged`: the shared milli-CPU and memory bytes saved for it (`adopt.adopt`).
        """
        s = self._s
        if req.container_id in s.record.grants:
            raise PolicyError(f"{req.who}: container {req.container_id} is already placed")
        self._validate(req)
        g = adoption.adopt(s, req, pool, exclusive, isolated, zone, charged, mems or frozenset())
        g.cpus, g.mems = cpus, mems
        if g.cold_start is not None and (
            cold_start_over or (mems is not None and g.cold_start.then_mems <= mems)
        ):
            g.cold_start = None  # its cold start finished before the restart
        return g

    def take_changed(self) -> set[str] | None:
        """The containers whose grant changed since the last call (placed, moved, resized,
        released, cold start ended), None when there were too many to name: then any may have.
        Each is named once, to the one reader (`Policy.changes`)."""
        return self._s.changes.take()

    def running(
        self, container_id: str, cpus: frozenset[int] | None, mems: frozenset[int] | None
    ) -> None:
        """Note what the runtime reports a placed container runs on, for `refresh` to diff."""
        g = self._s.record.grants.get(container_id)
        if g is not None:
            g.cpus = cpus if cpus is not None else frozenset()
            g.mems = mems if mems is not None else frozenset()

    def refresh(self) -> tuple[Update, ...]:
        """Updates for every container whose pinning differs from what the accounting says."""
        return self._s.pins.refresh(self._s.record.grants)

    def _validate(self, req: Request) -> None:
        if req.kind in EXCLUSIVE_KINDS and req.exclusive < 1:
            raise PolicyError(f"{req.who}: kind {req.kind} without exclusive CPUs")
        if req.exclusive < 0 or req.shared < 0:
            raise PolicyError(f"{req.who}: negative CPU amounts")
        machine, options = self._s.machine, self._s.options
        tpc = machine.threads_per_core
        if options.full_pcpus_only and req.kind in EXCLUSIVE_KINDS and req.exclusive % tpc:
            raise PolicyError(
                f"{req.who}: full_pcpus_only is on and {req.exclusive} exclusive CPUs is not a "
                f"multiple of the {tpc} threads per physical core; request a multiple of {tpc}"
            )


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
