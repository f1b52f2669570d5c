"""The CPUs an engine may use and those it reserves: `available_resources` and
`reserved_resources`, checked against the machine.

A quantity reservation is exact to the milli-CPU: `ceil(q / 1000)` CPUs are set aside, and the
last one, when only partly reserved, stays shared for its unreserved remainder. Which CPUs it
takes is the allocator's choice, which depends on the configuration; after a restart or a reload
it keeps the CPUs it held before while they remain usable (`keep`) and stays off the CPUs that
running exclusive containers hold (`avoid`), so a new configuration moves only the containers
whose CPUs it takes away.
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_topology.policy.allocator import cpuallocator
from nri_topology.policy.options import Options
from nri_topology.policy.types import PolicyError
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine


@dataclass(frozen=True, slots=True)
class Reservation:
    """What `reserved_resources` sets aside."""

    cpus: frozenset[int]  # every reserved CPU, the partly reserved one included
    partial: frozenset[int]  # the partly reserved CPU, if any (stays shared)
    partial_reserved: int  # milli-CPU of `partial` that is reserved
    capacity: int  # milli-CPU reserved


def allowed_cpus(machine: Machine, options: Options) -> frozenset[int]:
    """The online CPUs containers may be placed on (`available_resources`)."""
    online = machine.all_cpus
    amount = options.available_resources
    if amount is None:
        return online
    if amount.milli is not None:
        raise PolicyError(
            "available_resources: a CPU quantity cannot say which CPUs to use; give a CPU "
            "list (cpuset:) or the CPUs to leave out (exclude-cpuset:)"
        )
    if amount.cpus is not None:
        allowed = amount.cpus & online
    else:
        allowed = online - (amount.exclude or frozenset())
    if not allowed:
        raise PolicyError("available_resources leaves no online CPU to place containers on")
    return allowed


def reserve(
    machine: Machine,
    options: Options,
    allowed: frozenset[int],
    isolated: frozenset[int],
    *,
    keep: frozenset[int] = frozenset(),
    avoid: frozenset[int] = frozenset(),
) -> Reservation:
    """The CPUs `reserved_resources` sets aside among the allowed ones; a quantity takes the
    CPUs of `keep` first and those of `avoid` only when the others cannot hold it."""
    amount = options.reserved_resources
    if amount.cpus is not None or amount.exclude is not None:
        if amount.cpus is not None:
            cpus = amount.cpus
            outside = cpus - allowed
            if outside:
                raise PolicyError(
                    f"reserved_resources: CPUs {cpuset.format(outside)} are not among the "
                    f"available online CPUs {cpuset.format(allowed)}"
                )
        else:
            cpus = allowed - (amount.exclude or frozenset())
        if cpus == allowed:
            raise PolicyError("reserved_resources reserves every available CPU")
        return Reservation(cpus, frozenset(), 0, 1000 * len(cpus))
    milli = amount.milli or 0
    if milli < 0:
        raise PolicyError(f"reserved_resources: negative CPU quantity {milli}m")
    if milli == 0:
        return Reservation(frozenset(), frozenset(), 0, 0)
    count = -(-milli // 1000)
    pool = allowed - isolated
    # a fraction leaves the rest of its last CPU shared: it may take the last one there is
    if count > len(pool) or (count == len(pool) and milli % 1000 == 0):
        raise PolicyError(
            f"reserved_resources: {milli}m needs {count} CPUs but only {len(pool)} "
            "non-isolated CPUs are available"
        )
    free = pool - avoid
    try:
        cpus = cpuallocator.take_cpus(machine, pool, count, prefer=keep & free)
        if cpus & avoid and len(free) >= count:
            cpus = cpuallocator.take_cpus(machine, free, count, prefer=keep & free)
    except cpuallocator.AllocationError as e:
        raise PolicyError(f"reserved_resources: cannot pick {count} CPUs: {e}") from None
    rem = milli % 1000
    if rem == 0:
        return Reservation(cpus, frozenset(), 0, milli)
    return Reservation(cpus, frozenset({max(cpus)}), rem, milli)
