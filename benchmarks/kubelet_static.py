"""A baseline that places containers like the kubelet's static CPU manager.

Used only by the placement-quality benchmark, to compare our policy with what a node gets without
it: Guaranteed containers with an integer CPU request get exclusive CPUs picked by the kubelet's
packed algorithm (`takeByTopologyNUMAPacked`); everything else runs on the shared default cpuset.
The kubelet does not pin memory by itself; to be generous to the baseline we assume a memory
manager that binds each exclusive container to the NUMA nodes of its CPUs, and shared containers
to all nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nri_topology.topology.model import Machine


def _sorted_units(units: Iterable[int], free_of: Callable[[int], int]) -> list[int]:
    """The kubelet's sort: fewest free CPUs first (pack the busiest unit), then lowest id."""
    return sorted(units, key=lambda u: (free_of(u), u))


@dataclass
class KubeletStatic:
    """Static CPU manager state: the default (shared) cpuset and exclusive assignments."""

    machine: Machine
    reserved: frozenset[int]
    assignments: dict[str, frozenset[int]] = field(default_factory=dict)

    @classmethod
    def with_reservation(cls, machine: Machine, cpus: int) -> KubeletStatic:
        """Reserve `cpus` whole CPUs with the same packed algorithm, as the kubelet does."""
        empty = cls(machine, frozenset())
        return cls(machine, empty.take(machine.all_cpus, cpus))

    @property
    def default_cpuset(self) -> frozenset[int]:
        used: set[int] = set()
        for cpus in self.assignments.values():
            used |= cpus
        return self.machine.all_cpus - used

    def allocate(self, container_id: str, exclusive: int) -> frozenset[int]:
        """Exclusive CPUs for an integer Guaranteed request, else the default cpuset."""
        if exclusive <= 0:
            return self.default_cpuset
        available = self.default_cpuset - self.reserved
        cpus = self.take(available, exclusive)
        self.assignments[container_id] = cpus
        return cpus

    def release(self, container_id: str) -> None:
        self.assignments.pop(container_id, None)

    def take(self, available: frozenset[int], n: int) -> frozenset[int]:
        """`takeByTopologyNUMAPacked` without the uncore-cache option (kubelet-reference §1.5)."""
        if n > len(available):
            raise ValueError(
                "not enough cpus available to satisfy request: "
                f"requested={n}, available={len(available)}"
            )
        m = self.machine
        free = set(available)
        result: set[int] = set()

        def cpus_of_node(node: int) -> set[int]:
            return {c for c in free if m.cpus[c].node == node}

        def cpus_of_socket(pkg: int) -> set[int]:
            return {c for c in free if m.cpus[c].package == pkg}

        def total_node(node: int) -> int:
            return sum(1 for c in m.cpus.values() if c.node == node)

        def total_socket(pkg: int) -> int:
            return sum(1 for c in m.cpus.values() if c.package == pkg)

        def take_all(cpus: set[int]) -> None:
            nonlocal n
            result.update(cpus)
            free.difference_update(cpus)
            n -= len(cpus)

        nodes = sorted({c.node for c in m.cpus.values()})
        sockets = sorted({c.package for c in m.cpus.values()})
        numa_first = len(sockets) >= len(nodes)
        levels = (
            [(nodes, cpus_of_node, total_node), (sockets, cpus_of_socket, total_socket)]
            if numa_first
            else [(sockets, cpus_of_socket, total_socket), (nodes, cpus_of_node, total_node)]
        )
        # 1-2: whole free units that fit, fullest-first.
        for units, cpus_of, total in levels:
            for u in _sorted_units(units, lambda u, f=cpus_of: len(f(u))):
                if n == 0:
                    break
                cpus = cpus_of(u)
                if len(cpus) == total(u) and len(cpus) <= n:
                    take_all(cpus)
        outer_units, outer_cpus, _ = levels[0]

        def core_order() -> list[frozenset[int]]:
            """Outer units fullest-first, within each its cores fullest-first (then lowest id)."""
            order: list[frozenset[int]] = []
            for u in _sorted_units(outer_units, lambda u: len(outer_cpus(u))):
                cores = {m.cpus[c].core_key: m.cpus[c].threads for c in outer_cpus(u)}
                order.extend(sorted(cores.values(), key=lambda t: (len(t & free), min(t))))
            return order

        # 4: whole free cores that fit.
        for threads in core_order():
            if n == 0:
                break
            if threads <= free and len(threads) <= n:
                take_all(set(threads))
        # 5: single CPUs in packed order, finishing half-used cores first.
        for threads in core_order():
            for c in sorted(threads & free):
                if n == 0:
                    break
                take_all({c})
        return frozenset(result)
