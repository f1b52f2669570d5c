"""Decided versus applied: whether a container's cgroup holds its placement.

Pure functions; reading the files and repairing drift is `verify.Verifier`'s job. The runtime can
lose an update sent for a container that is created but not yet started (it stores the new
cpuset in the spec, but runc already created the container from the old one), so the only
trustworthy view of what a container runs on is its cgroup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nri_topology.policy.types import Placement
from nri_topology.topology import cpuset


@dataclass(frozen=True, slots=True)
class Applied:
    """A container's cpuset as its cgroup holds it (None: not readable or not set)."""

    cpus: frozenset[int] | None
    mems: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class Drift:
    """A container whose cgroup differs from its placement, field by field (None: agrees)."""

    container_id: str
    cpus: tuple[frozenset[int], frozenset[int]] | None  # (decided, applied)
    mems: tuple[frozenset[int], frozenset[int]] | None


def compare(
    container_id: str,
    cpus: frozenset[int] | None,
    mems: frozenset[int] | None,
    applied: Applied,
) -> Drift | None:
    """The drift of one container; fields the plugin leaves alone (None) never drift."""
    cpu = None
    if cpus is not None and applied.cpus is not None and applied.cpus != cpus:
        cpu = (cpus, applied.cpus)
    mem = None
    if mems is not None and applied.mems is not None and applied.mems != mems:
        mem = (mems, applied.mems)
    if cpu is None and mem is None:
        return None
    return Drift(container_id, cpu, mem)


def drifted(wanted: Mapping[str, Placement], applied: Mapping[str, Applied]) -> list[Drift]:
    """The containers whose cgroup (as read: `applied`) differs from their placement (those
    with none in `wanted` are not judged)."""
    found = (
        compare(c, wanted[c].cpus, wanted[c].mems, seen)
        for c, seen in applied.items()
        if c in wanted
    )
    return [d for d in found if d is not None]


def parse_list(text: str) -> frozenset[int] | None:
    """A cpuset file's content; None when empty (cgroup v2: not set, the parent's applies)."""
    text = text.strip()
    return cpuset.parse(text) if text else None
