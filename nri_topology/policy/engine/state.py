"""The engine's state: the reservation and pool tree of one machine under one set of options,
the accounts over them, and the record of placed containers.

The modules of the engine room change it through `commit`'s apply and revert; outside the room
it is read only through the engine's views (`views`). Its fields are plain attributes so that
the room's modules share them without reaching into one another's private names.
"""

from __future__ import annotations

from collections.abc import Iterable

from nri_topology.policy.accounts import hugepages, reservation
from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.accounts.memory import MemoryBook
from nri_topology.policy.accounts.zones import Zones
from nri_topology.policy.choice import choose, scoring
from nri_topology.policy.engine.changes import ChangeLog
from nri_topology.policy.engine.record import Record
from nri_topology.policy.engine.updates import Pins
from nri_topology.policy.options import Options
from nri_topology.policy.pools import Pool, ancestors, build_pools, subtree
from nri_topology.policy.shaping.shape import Shaper
from nri_topology.policy.types import PolicyError, Request
from nri_topology.topology.model import Machine


class State:
    """Everything one engine holds; built once per machine, options and reservation hints."""

    def __init__(
        self,
        machine: Machine,
        options: Options,
        keep: frozenset[int],
        avoid: frozenset[int],
        shared_sets_kept: int,
    ) -> None:
        self.machine = machine
        self.options = options
        self.allowed = reservation.allowed_cpus(machine, options)
        isolated = machine.isolated & self.allowed
        r = reservation.reserve(machine, options, self.allowed, isolated, keep=keep, avoid=avoid)
        self.reserved_all = r.cpus  # every reserved CPU, the partly reserved one included
        self.partial = r.partial  # the partly reserved CPU, if any (stays shared)
        self.partial_reserved = r.partial_reserved  # milli-CPU of `partial` that is reserved
        self.reserved_capacity = r.capacity  # milli-CPU
        self.isolated = isolated - r.cpus
        try:
            self.pools: tuple[Pool, ...] = build_pools(
                machine, self.allowed, self.isolated, r.cpus - r.partial
            )
        except ValueError as e:
            raise PolicyError(str(e)) from None
        pools = self.pools
        self.by_name = {p.name: p.index for p in pools}
        n = len(pools)
        self.chain = tuple((i, *ancestors(pools, i)) for i in range(n))
        post = tuple(tuple(reversed(subtree(pools, i))) for i in range(n))
        self.pools_of_cpu: dict[int, tuple[int, ...]] = {}
        for p in pools:
            for c in p.cpus:
                self.pools_of_cpu.setdefault(c, ())
                self.pools_of_cpu[c] += (p.index,)
        partial_reserved_in = tuple(r.partial_reserved if r.partial & p.cpus else 0 for p in pools)
        self.ledger = Ledger(pools, self.chain, r.partial, partial_reserved_in)
        self.pins = Pins(machine, options, self.ledger, r.cpus, shared_sets_kept)
        self.taken: frozenset[int] = frozenset()  # CPUs granted exclusively
        self.reserved_granted = 0  # milli-CPU of the reservation granted
        self.memory_requested = 0  # the grants' known memory requests (`squeeze`)
        self.record = Record()
        self.book = MemoryBook(machine, options.outside_memory)
        self.huge = hugepages.HugepageBook(machine, options.outside_hugepages)
        self.memory_capacity = sum(n.memory for n in machine.nodes.values())  # the machine's
        self.zones = Zones(machine, pools, self.chain, self.book)
        self.shaper = Shaper(machine, options, pools, self.ledger, self.book, post)
        self.board = choose.Board(
            machine,
            pools,
            self.ledger,
            self.shaper,
            tuple(numa_measure(machine, p) for p in pools),
            tuple(p.tiers for p in pools),
            pack=options.shared_placement == "pack",
        )
        self.changes = ChangeLog()

    def kubelet_admits(self, req: Request) -> bool:
        """Whether the kubelet would admit the container next to those placed: CPU requests
        within the allocatable CPU (capacity - reservation), exclusive CPUs within the CPUs."""
        allocatable = 1000 * len(self.allowed) - self.reserved_capacity
        requested = sum(g.request.cpu_request for g in self.record.grants.values())
        if requested + req.cpu_request > allocatable:
            return False
        return req.exclusive * 1000 <= allocatable

    def squeeze(self, req: Request) -> bool:
        """Whether the kubelet would admit the container's memory next to those placed: the
        memory requests known (a Burstable container's may be unknown, 0 here, while its limit
        is charged) within the machine's memory."""
        return self.memory_requested + req.memory_request <= self.memory_capacity

    def pools_touching(self, cpus: Iterable[int]) -> list[int]:
        """The pools holding any of `cpus`, in index order."""
        seen: set[int] = set()
        for c in cpus:
            seen.update(self.pools_of_cpu.get(c, ()))
        return sorted(seen)


def numa_measure(machine: Machine, pool: Pool) -> tuple[int, float]:
    """The pool's NUMA spread for the sort key: its CPU nodes and their average distance."""
    nodes = sorted(pool.cpu_nodes)
    if not nodes:
        return (0, 0.0)
    total = sum(machine.distance(a, b) for a in nodes for b in nodes)
    return scoring.numa_measure(len(nodes), total / (len(nodes) ** 2))
