"""A grant made, applied to the accounts and the record (`commit`), and taken back out
(`revert`): the one place the engine's accounts change.

`commit` and `revert` undo each other exactly; the pools whose shared set changed are noted in
the operation (`Op.touched`) for its update diff.
"""

from __future__ import annotations

from nri_topology.policy.accounts import hugepages
from nri_topology.policy.accounts.grant import Grant, Op
from nri_topology.policy.engine.state import State
from nri_topology.policy.shaping.shape import GrantShape
from nri_topology.policy.types import ColdStart, CpuKind, Request
from nri_topology.topology.model import MemoryTier


def make_grant(
    s: State,
    req: Request,
    shape: GrantShape,
    within: frozenset[int] | None = None,
    prefer: frozenset[int] = frozenset(),
) -> Grant:
    """The grant of `shape` to `req`, with the cold start its memory zone allows and its
    hugepages laid out on the nodes of `within` (all when None), those of `prefer` first,
    then its CPUs' nodes, then its memory zone's; what fits nowhere is in `hugepages_short`."""
    kind, zone, shared = shape.kind, shape.zone, shape.shared
    machine = s.machine
    cold: ColdStart | None = None
    if req.cold_start_ns > 0 and zone:
        nodes = machine.nodes
        dram = frozenset(n for n in zone if nodes[n].tier is MemoryTier.DRAM)
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
        memory=charge(s, zone, shape.size),
        relaxed=shape.relaxed,
        cold_start=cold,
    )
    if req.hugepages:
        cpu_nodes = (
            frozenset(machine.cpus[c].node for c in shape.exclusive)
            if shape.exclusive
            else s.pools[shape.pool].cpu_nodes
        )
        order = hugepages.node_order(machine, [prefer, cpu_nodes, zone])
        layout, short = s.huge.layout(req.hugepages, order, within)
        g.hugepages, g.hugepages_short = layout, tuple(sorted(short.items()))
    return g


def charge(s: State, zone: frozenset[int], size: int) -> int:
    """Bytes a grant charges to its zone: its size, or what fits when it does not
    (`Degradation.MEMORY_CHARGE`; only a degradable request gets such a zone)."""
    if not zone:
        return 0
    if size > 0 and not s.book.fits(zone, size):
        return min(size, s.book.room(zone))
    return size


def commit(s: State, g: Grant, op: Op) -> None:
    """Apply a grant to the accounts and the record and pin it; it must have been checked."""
    cid = g.request.container_id
    s.changes.note(cid)
    ledger = s.ledger
    if g.exclusive:
        s.taken |= g.exclusive
        iso = g.exclusive & s.isolated  # all of them, or part (ISOLATED_MIXED)
        for x in s.pools_touching(g.exclusive):
            if iso:
                ledger.free_iso[x] -= iso
            if iso != g.exclusive:
                ledger.shared_cpus[x] = s.pins.interned(ledger.shared_cpus[x] - g.exclusive)
                op.touched.add(x)
    if g.kind is CpuKind.RESERVED:
        s.reserved_granted += g.shared
    elif g.uses_shared:
        for a in s.chain[g.pool]:
            ledger.sub_shared[a] += g.shared
            ledger.sub_users[a] += 1
        ledger.add_user(g.pool, cid, g, s.pins.plain(g))
    s.book.charge(g.zone, g.memory)
    if g.hugepages:
        s.huge.book(g.hugepages)
    s.memory_requested += g.request.memory_request
    s.record.add(g)
    g.cpus = s.pins.pin(g)
    g.mems = s.pins.mems(g)


def revert(s: State, g: Grant, op: Op) -> None:
    """Take a committed grant back out of the accounts and the record (`commit` undone)."""
    cid = g.request.container_id
    s.changes.note(cid)
    s.record.remove(cid)
    ledger = s.ledger
    if g.exclusive:
        s.taken -= g.exclusive
        iso = g.exclusive & s.isolated
        for x in s.pools_touching(g.exclusive):
            pool = s.pools[x]
            if iso:
                ledger.free_iso[x] |= iso & pool.isolated
            if iso != g.exclusive:
                ledger.shared_cpus[x] = s.pins.interned(
                    ledger.shared_cpus[x] | g.exclusive & pool.sharable
                )
                op.touched.add(x)
    if g.kind is CpuKind.RESERVED:
        s.reserved_granted -= g.shared
    elif g.uses_shared:
        for a in s.chain[g.pool]:
            ledger.sub_shared[a] -= g.shared
            ledger.sub_users[a] -= 1
        ledger.remove_user(g.pool, cid)
    s.book.refund(g.zone, g.memory)
    if g.hugepages:
        s.huge.unbook(g.hugepages)
    s.memory_requested -= g.request.memory_request
