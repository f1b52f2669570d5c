"""Hugepages accounted per NUMA node and page size, as the kubelet's Memory Manager does.

A container's hugepage limit (the cgroup's hugetlb limit, which the kubelet sets equal to the
request) is a number of pages of one size. The kernel allocates them from the nodes of the
container's cpuset.mems, so the policy books them on nodes that still have pages of that size
unclaimed, and adds those nodes to the container's memory nodes. Nodes are filled one after the
other in order of preference (the nodes of the container's CPUs, then its memory zone, then the
others by distance), as the Memory Manager fills the nodes of its hint one by one.

The capacity of a node is the pages of each size the kernel holds there (`nr_hugepages` in sysfs,
`NumaNode.hugepages`), less those another owner holds (the kubelet's Memory Manager beside this
plugin); what is booked never exceeds it, per node and size (`HugepageBook`).
Pages taken by processes outside containers are not seen, as the kubelet does not see them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from nri_topology.topology.model import Machine

Layout = tuple[tuple[int, int, int], ...]
"""Pages booked: (node, page size in kB, pages), sorted; the one form a grant holds."""

Want = tuple[tuple[int, int], ...]
"""Hugepages asked for: (page size in kB, bytes), sorted by size; sizes asking 0 bytes left out."""

_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgGtT])(?:i?[bB]?|i)?\s*$")
_SHIFT = {"k": 0, "m": 10, "g": 20, "t": 30}


def page_size_kb(text: str) -> int | None:
    """The page size a runtime or Kubernetes names, in kB: `2MB` (OCI, CRI), `2Mi`,
    `hugepages-1Gi` (a Kubernetes resource name), `2048kB` (sysfs); None when not one."""
    if text.startswith("hugepages-"):
        text = text[len("hugepages-") :]
    m = _SIZE.match(text)
    if m is None:
        return None
    size = int(m.group(1)) << _SHIFT[m.group(2).lower()]
    return size if size > 0 else None


def resource_name(size_kb: int) -> str:
    """The Kubernetes resource name of a page size: hugepages-2Mi, hugepages-1Gi."""
    for unit, kb in (("Gi", 1 << 20), ("Mi", 1 << 10)):
        if size_kb % kb == 0:
            return f"hugepages-{size_kb // kb}{unit}"
    return f"hugepages-{size_kb}Ki"


def want(limits: Iterable[tuple[int, int]]) -> Want:
    """The sorted, merged form of (page size kB, bytes) pairs; zero limits dropped (the kubelet
    writes a limit of 0 for every size a container does not ask for)."""
    merged: dict[int, int] = {}
    for size, amount in limits:
        if amount > 0:
            merged[size] = max(merged.get(size, 0), amount)
    return tuple(sorted(merged.items()))


def pages(size_kb: int, amount: int) -> int:
    """Pages of `size_kb` an amount of bytes needs (a partial page counts whole)."""
    page = size_kb * 1024
    return -(-amount // page)


def node_order(machine: Machine, first: Sequence[frozenset[int]]) -> tuple[int, ...]:
    """Every node once: those of `first`'s sets in turn (ids ascending in each), then the
    others by their distance to the first set's nodes, then id."""
    out: list[int] = []
    seen: set[int] = set()
    for nodes in first:
        for n in sorted(nodes - seen):
            out.append(n)
            seen.add(n)
    near = first[0] if first and first[0] else frozenset(out)
    rest = [n for n in machine.nodes if n not in seen]

    def closeness(n: int) -> tuple[int, int]:
        d = min((machine.distance(m, n) for m in near), default=0)
        return d, n

    out.extend(sorted(rest, key=closeness))
    return tuple(out)


class HugepageBook:
    """Pages booked per (node, page size) against the pages each node holds."""

    __slots__ = ("_booked", "_capacity")

    def __init__(self, machine: Machine, outside: Layout = ()) -> None:
        """`outside`: pages another owner holds, left out of the nodes' capacity."""
        taken: dict[tuple[int, int], int] = {}
        for node, size, count in outside:
            taken[node, size] = taken.get((node, size), 0) + count
        self._capacity: Mapping[tuple[int, int], int] = {
            (n.id, size): left
            for n in machine.nodes.values()
            for size, count in n.hugepages.items()
            if (left := count - taken.get((n.id, size), 0)) > 0
        }
        self._booked: dict[tuple[int, int], int] = {}

    def capacity(self, node: int, size_kb: int) -> int:
        return self._capacity.get((node, size_kb), 0)

    def booked(self, node: int, size_kb: int) -> int:
        return self._booked.get((node, size_kb), 0)

    def free(self, node: int, size_kb: int) -> int:
        return self.capacity(node, size_kb) - self.booked(node, size_kb)

    def sizes(self) -> tuple[int, ...]:
        """Page sizes some node holds pages of."""
        return tuple(sorted({size for _, size in self._capacity}))

    def layout(
        self, asked: Want, order: Sequence[int], allowed: frozenset[int] | None = None
    ) -> tuple[Layout, dict[int, int]]:
        """Where `asked` goes: nodes of `order` (those of `allowed` only, when given) filled one
        after the other; and the pages per size that fit nowhere (empty when all fit).
        Nothing is booked."""
        out: list[tuple[int, int, int]] = []
        short: dict[int, int] = {}
        for size, amount in asked:
            need = pages(size, amount)
            for node in order:
                if need == 0:
                    break
                if allowed is not None and node not in allowed:
                    continue
                take = min(need, self.free(node, size))
                if take > 0:
                    out.append((node, size, take))
                    need -= take
            if need:
                short[size] = need
        return tuple(sorted(out)), short

    def free_total(self, size_kb: int, nodes: Iterable[int] | None = None) -> int:
        """Pages of `size_kb` unbooked on `nodes` (every node when None)."""
        keys = self._capacity if nodes is None else [(n, size_kb) for n in nodes]
        return sum(self.free(n, s) for n, s in keys if s == size_kb)

    def book(self, layout: Layout) -> None:
        """Book a layout `layout` computed against the current state; ValueError past a node's
        pages (the state is then unchanged)."""
        for node, size, count in layout:
            if self.booked(node, size) + count > self.capacity(node, size):
                raise ValueError(
                    f"{count} pages of {resource_name(size)} exceed node {node}'s "
                    f"{self.free(node, size)} free"
                )
        for node, size, count in layout:
            self._booked[node, size] = self.booked(node, size) + count

    def unbook(self, layout: Layout) -> None:
        for node, size, count in layout:
            left = self.booked(node, size) - count
            if left < 0:
                raise ValueError(f"unbooking {count} pages of {size} kB on node {node}: not booked")
            if left:
                self._booked[node, size] = left
            else:
                del self._booked[node, size]

    def booked_pages(self) -> Mapping[tuple[int, int], int]:
        """Pages booked per (node, page size kB) (a copy)."""
        return dict(self._booked)


def nodes_of(layout: Layout) -> frozenset[int]:
    return frozenset(node for node, _, _ in layout)


def describe(layout: Layout) -> str:
    """A layout in words: `hugepages-1Gi 2 on node 0, 1 on node 1`."""
    by_size: dict[int, list[str]] = {}
    for node, size, count in layout:
        by_size.setdefault(size, []).append(f"{count} on node {node}")
    return "; ".join(f"{resource_name(s)} {', '.join(p)}" for s, p in sorted(by_size.items()))


def describe_short(
    asked: Want, short: Mapping[int, int], book: HugepageBook, within: Iterable[int]
) -> str:
    """What did not fit, for a refusal: per page size, the pages asked and those free."""
    nodes = sorted(within)
    parts = []
    for size, amount in asked:
        if size in short:
            free = book.free_total(size, nodes)
            parts.append(
                f"{pages(size, amount)} pages of {resource_name(size)} asked, {free} free on "
                f"nodes {','.join(map(str, nodes))}"
            )
    return "hugepages: " + "; ".join(parts)
