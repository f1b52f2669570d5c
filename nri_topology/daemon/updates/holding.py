"""What a container holds as re-pins land, the comparisons the update schedule asks of every
pending re-pin at every event: spelled out, as a full node has hundreds pending."""

from __future__ import annotations

from collections.abc import Callable

from nri_topology.policy.types import Placement


def shrinks(before: Placement | None, after: Placement) -> bool:
    """Whether `after` takes a CPU or memory node away from `before` (unknown: assume so)."""
    if before is None:
        return True
    for old, new in ((before.cpus, after.cpus), (before.mems, after.mems)):
        if new is not None and (old is None or not old <= new):
            return True
    return False


def batch_shrinks() -> Callable[[Placement | None, Placement], bool]:
    """`shrinks` for the re-pins of one decision: they share their sets, and so mostly do
    what the containers hold, so each pair of sets is judged once, not once per container (a
    subset test walks the set)."""
    judged: dict[tuple[int, ...], bool] = {}

    def shrunk(held: Placement | None, new: Placement) -> bool:
        if held is None:
            return True
        if new.cpus is not None and (held.cpus is None or len(new.cpus) < len(held.cpus)):
            return True  # fewer CPUs: some taken away, whichever they are
        key = (id(held.cpus), id(held.mems), id(new.cpus), id(new.mems))  # alive meanwhile
        if (known := judged.get(key)) is None:
            known = judged[key] = shrinks(held, new)
        return known

    return shrunk


def covers(held: Placement | None, wanted: Placement) -> bool:
    """Whether a container holding `held` holds `wanted` already (fields `wanted` leaves unset
    are left as they are)."""
    if held is None:
        return False
    # The same set object is common (a written placement keeps the decision's), and set
    # equality is a walk over its members.
    cpus, mems, shares = wanted.cpus, wanted.mems, wanted.cpu_shares
    return (
        (cpus is None or cpus is held.cpus or cpus == held.cpus)
        and (mems is None or mems is held.mems or mems == held.mems)
        and (shares is None or shares == held.cpu_shares)
    )


def may_hold(placement: Placement | None, cpus: frozenset[int]) -> bool:
    """Whether a container holding `placement` may run on some of `cpus` (unknown: it may)."""
    return placement is None or placement.cpus is None or not placement.cpus.isdisjoint(cpus)
