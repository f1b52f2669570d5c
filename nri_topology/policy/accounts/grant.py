"""What one placed container holds (`Grant`), and the record of one operation's touched pools
(`Op`): the data the accounts, the moves and the engine share, below all of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from nri_topology.policy.types import ColdStart, CpuKind, Degradation, Request


def memory_size(req: Request) -> int:
    """Bytes charged for a container: its request, else its limit, else nothing."""
    if req.memory_request > 0:
        return req.memory_request
    return req.memory_limit or 0


@dataclass(slots=True)
class Grant:
    """What one container holds; `cpus`/`mems` are the pinning last given to the runtime."""

    request: Request
    pool: int
    kind: CpuKind
    exclusive: frozenset[int]
    isolated: bool  # the exclusive CPUs are kernel-isolated ones
    shared: int  # milli-CPU charged to the pool's shared capacity (or to the reservation)
    zone: frozenset[int]  # memory nodes charged
    memory: int  # bytes charged to `zone`
    relaxed: bool
    cold_start: ColdStart | None
    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None
    reason: str = ""
    degraded: tuple[Degradation, ...] = ()
    hints_missed: str = ""  # why its CPUs are not all on its devices' NUMA nodes ("": they are)
    # hugepages booked: (node, page size kB, pages), and (page size kB, pages) that fit nowhere
    hugepages: tuple[tuple[int, int, int], ...] = ()
    hugepages_short: tuple[tuple[int, int], ...] = ()

    @property
    def uses_shared(self) -> bool:
        """Whether the container runs on its pool's shared CPUs."""
        if self.kind is CpuKind.SHARED or self.kind is CpuKind.MIXED:
            return True
        return self.kind is CpuKind.ISOLATED and self.shared > 0


@dataclass(slots=True)
class Op:
    """Pools whose free CPUs changed during one operation, for the update diff."""

    touched: set[int] = field(default_factory=set)


def charged_size(req: Request) -> int:
    """Bytes a request charges to its memory zone: none for preserved memory."""
    return 0 if req.memory_preserve else memory_size(req)
