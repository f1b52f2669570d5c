"""Memory accounting by zone: a zone is the set of NUMA nodes a container may allocate from.

The kernel cannot cap memory per node, only per container, so a container's memory is charged to
its whole zone. A set of grants fits when, for every zone Z in use, the grants whose zones lie
inside Z need no more than Z's capacity: what is pinned to Z can only live in Z. Zones in use are
few (pools times tier combinations), so checking every zone that contains a new one is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_topology.topology.model import Machine


class MemoryBook:
    """Bytes charged per zone, with the capacity check above."""

    __slots__ = ("_capacity", "_charged", "_node_memory", "_used")

    def __init__(self, machine: Machine, outside: Iterable[tuple[int, int]] = ()) -> None:
        """`outside`: (node, bytes) another owner holds, left out of the node's capacity."""
        taken: dict[int, int] = {}
        for node, size in outside:
            taken[node] = taken.get(node, 0) + size
        self._node_memory: Mapping[int, int] = {
            n.id: max(0, n.memory - taken.get(n.id, 0)) for n in machine.nodes.values()
        }
        self._charged: dict[frozenset[int], int] = {}  # zone -> bytes charged to exactly it
        self._capacity: dict[frozenset[int], int] = {}
        # used() per zone asked for, kept up to date by charge and refund: every decision asks
        # it for the zones of every pool, and summing the charged zones each time grows with them.
        self._used: dict[frozenset[int], int] = {}

    def capacity(self, zone: frozenset[int]) -> int:
        """Bytes the zone's nodes hold, less what is held outside."""
        cap = self._capacity.get(zone)
        if cap is None:
            cap = sum(self._node_memory.get(n, 0) for n in zone)
            self._capacity[zone] = cap
        return cap

    def used(self, zone: frozenset[int]) -> int:
        """Bytes charged to zones inside `zone` (what must live in it)."""
        used = self._used.get(zone)
        if used is None:
            used = self._used[zone] = sum(b for z, b in self._charged.items() if z <= zone)
        return used

    def free(self, zone: frozenset[int]) -> int:
        return self.capacity(zone) - self.used(zone)

    def fits(self, zone: frozenset[int], size: int) -> bool:
        """Whether charging `size` more bytes to `zone` keeps every zone within its capacity."""
        if size <= 0:
            return True
        used, capacity = self._used.get(zone), self._capacity.get(zone)  # asked per pool
        if used is None:
            used = self.used(zone)
        if capacity is None:
            capacity = self.capacity(zone)
        if used + size > capacity:
            return False
        for other in self._charged:
            if zone < other and self.used(other) + size > self.capacity(other):
                return False
        return True

    def room(self, zone: frozenset[int]) -> int:
        """The most bytes `fits(zone, ...)` accepts (0 when the zone or one around it is full)."""
        room = self.free(zone)
        for other in self._charged:
            if other != zone and zone < other:
                room = min(room, self.free(other))
        return max(room, 0)

    def charge(self, zone: frozenset[int], size: int) -> None:
        if size > 0:
            self._charged[zone] = self._charged.get(zone, 0) + size
            self._count(zone, size)

    def refund(self, zone: frozenset[int], size: int) -> None:
        if size <= 0:
            return
        left = self._charged.get(zone, 0) - size
        if left < 0:
            raise ValueError(f"refund of {size} bytes exceeds the charge of zone {sorted(zone)}")
        if left:
            self._charged[zone] = left
        else:
            del self._charged[zone]
        self._count(zone, -size)

    def _count(self, zone: frozenset[int], size: int) -> None:
        used = self._used
        for outer in used:
            if zone <= outer:
                used[outer] += size

    def zones(self) -> Mapping[frozenset[int], int]:
        """Bytes charged per zone (a copy)."""
        return dict(self._charged)
