"""A node's pinning as the runtime holds it, and what a list of updates makes of it.

One model for every driver that plays the runtime with the policy's own types: the simulator
(its picture of the node) and the invariant checks (the runtime view that must agree with the
policy). Pure: current placements and updates in, new placements out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_topology.policy.types import Placement, Update


def merged(current: Placement, change: Placement) -> Placement:
    """`change` over `current`: fields the change leaves at None keep their value."""
    return Placement(
        cpus=change.cpus if change.cpus is not None else current.cpus,
        mems=change.mems if change.mems is not None else current.mems,
        cpu_shares=change.cpu_shares if change.cpu_shares is not None else current.cpu_shares,
    )


@dataclass(frozen=True, slots=True)
class Applied:
    """The outcome of a list of updates, in the order they were given."""

    placements: dict[str, Placement]  # new placement of every known container an update touched
    changes: dict[str, Placement]  # per container, what its updates set (None: not set)
    unknown: tuple[str, ...]  # ids of updates for containers the node does not hold (skipped)


_NOTHING = Placement(cpus=None, mems=None)


def apply_updates(current: Mapping[str, Placement], updates: Iterable[Update]) -> Applied:
    """Apply `updates` in order to the containers in `current`, as the runtime does.

    Several updates for one container merge, the later one winning field by field; updates for
    containers not in `current` are skipped and named in `unknown`, as containerd skips them.
    """
    placements: dict[str, Placement] = {}
    changes: dict[str, Placement] = {}
    unknown: list[str] = []
    for update in updates:
        cid = update.container_id
        old = placements.get(cid) or current.get(cid)
        if old is None:
            unknown.append(cid)
            continue
        placements[cid] = merged(old, update.placement)
        changes[cid] = merged(changes.get(cid, _NOTHING), update.placement)
    return Applied(placements, changes, tuple(unknown))
