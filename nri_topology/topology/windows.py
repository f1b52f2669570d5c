"""Windows processor groups (KEP-4885): flat CPU ids <-> (group, 64-bit mask), both ways.

Windows addresses at most 64 logical processors per group; the CRI's Windows CPU affinity is a
list of `{cpu_group, cpu_mask}`. The flat id of bit `b` in group `g` is `g * 64 + b`, so a
machine whose groups hold fewer than 64 CPUs (e.g. two groups of 36) has gaps in its flat ids;
every conversion here is exact for such groups too.

Text form: `group:0xMASK` items joined by commas, e.g. `0:0x000000000000000f,1:0x0000000000000001`
(flat 0-3 and 64).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

GROUP_SIZE = 64
_MASK_LIMIT = 1 << GROUP_SIZE
_ITEM = re.compile(r"^\s*(\d+)\s*:\s*(0[xX][0-9a-fA-F]+|\d+)\s*$")


class GroupError(ValueError):
    """A group/mask pair or text that does not describe Windows processors."""


@dataclass(frozen=True, slots=True, order=True)
class GroupAffinity:
    """The CPUs of one processor group as a 64-bit mask (bit b = processor b of the group)."""

    group: int
    mask: int

    def __post_init__(self) -> None:
        if self.group < 0:
            raise GroupError(f"negative processor group {self.group}")
        if not 0 <= self.mask < _MASK_LIMIT:
            raise GroupError(f"mask {self.mask:#x} of group {self.group} does not fit 64 bits")

    @property
    def cpus(self) -> frozenset[int]:
        """The flat CPU ids of this group's set bits."""
        base = self.group * GROUP_SIZE
        return frozenset(base + b for b in range(GROUP_SIZE) if self.mask >> b & 1)

    def __str__(self) -> str:
        return f"{self.group}:{self.mask:#018x}"


def split(cpu: int) -> tuple[int, int]:
    """Flat CPU id -> (group, bit)."""
    if cpu < 0:
        raise GroupError(f"negative CPU id {cpu}")
    return divmod(cpu, GROUP_SIZE)


def join(group: int, bit: int) -> int:
    """(group, bit) -> flat CPU id."""
    if group < 0 or not 0 <= bit < GROUP_SIZE:
        raise GroupError(f"no processor {bit} in group {group}")
    return group * GROUP_SIZE + bit


def to_groups(cpus: Iterable[int]) -> tuple[GroupAffinity, ...]:
    """Flat CPU ids -> one `GroupAffinity` per group with any CPU, ordered by group."""
    masks: dict[int, int] = {}
    for cpu in cpus:
        group, bit = split(cpu)
        masks[group] = masks.get(group, 0) | 1 << bit
    return tuple(GroupAffinity(g, masks[g]) for g in sorted(masks))


def from_groups(groups: Iterable[GroupAffinity]) -> frozenset[int]:
    """Group affinities -> flat CPU ids (a group given twice contributes both masks)."""
    out: set[int] = set()
    for g in groups:
        out |= g.cpus
    return frozenset(out)


def format_groups(groups: Iterable[GroupAffinity]) -> str:
    """`0:0x000000000000000f,1:0x0000000000000001`."""
    return ",".join(str(g) for g in groups)


def parse_groups(text: str) -> tuple[GroupAffinity, ...]:
    """Parse the text form; masks in hex (`0x..`) or decimal; empty text gives no groups."""
    if not text.strip():
        return ()
    out = []
    for item in text.split(","):
        m = _ITEM.match(item)
        if m is None:
            raise GroupError(f"bad group item {item!r} in {text!r} (want GROUP:0xMASK)")
        out.append(GroupAffinity(int(m.group(1)), int(m.group(2), 0)))
    return tuple(out)


def machine_groups(machine: Machine) -> tuple[GroupAffinity, ...]:
    """The machine's online CPUs per processor group."""
    return to_groups(machine.cpus)


def node_groups(machine: Machine) -> Mapping[int, tuple[GroupAffinity, ...]]:
    """Each NUMA node's online CPUs as group affinities, by node id."""
    return {n.id: to_groups(n.cpus) for n in machine.nodes.values()}


def render(cpus: Iterable[int], *, groups: bool) -> str:
    """A CPU set in the Linux list form ("0-3,64") or the group form ("0:0x...f,1:0x...1")."""
    ids = list(cpus)
    return format_groups(to_groups(ids)) if groups else cpuset.format(ids)
