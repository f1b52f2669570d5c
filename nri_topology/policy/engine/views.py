"""The engine read from outside: read-only views of its state (`Views`, which `Engine` is)
and its accounting at one moment (`Accounts`), for the policy facade, the checkpoint, the
node capacity and the invariant checks. Nothing outside the engine changes its state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nri_topology.policy.accounts.grant import Grant
from nri_topology.policy.engine.decisions import decision
from nri_topology.policy.engine.state import State
from nri_topology.policy.options import Options
from nri_topology.policy.pools import Pool
from nri_topology.policy.types import Decision, Placement
from nri_topology.topology.model import Machine


@dataclass(frozen=True, slots=True)
class Accounts:
    """The engine's accounting at one moment (`Engine.accounts`); per pool index where a tuple."""

    shared_cpus: tuple[frozenset[int], ...]
    free_isolated: tuple[frozenset[int], ...]
    sub_shared: tuple[int, ...]  # milli-CPU granted from shared CPUs in the subtree
    sub_users: tuple[int, ...]  # shared containers in the subtree
    exclusive: frozenset[int]  # CPUs granted exclusively
    reserved_capacity: int  # milli-CPU
    reserved_granted: int
    memory_requested: int  # the grants' known memory requests
    memory: Mapping[frozenset[int], int]  # bytes charged per zone
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (node, kB) -> pages


class Views:
    """Read-only questions about one engine's state."""

    def __init__(self, state: State) -> None:
        self._state = state

    @property
    def machine(self) -> Machine:
        return self._state.machine

    @property
    def options(self) -> Options:
        return self._state.options

    @property
    def pools(self) -> tuple[Pool, ...]:
        """The pool tree, root first; a grant's `pool` indexes it."""
        return self._state.pools

    @property
    def grants(self) -> Mapping[str, Grant]:
        """What each placed container holds: the record of placed containers (read-only: the
        grants change only through the engine's operations)."""
        return self._state.record.grants

    def pod_containers(self, pod_id: str) -> tuple[str, ...]:
        """The placed containers of a pod, in id order."""
        return self._state.record.of_pod(pod_id)

    @property
    def allowed(self) -> frozenset[int]:
        """The online CPUs containers may be placed on (`available_resources`)."""
        return self._state.allowed

    @property
    def isolated(self) -> frozenset[int]:
        """The allowed kernel-isolated CPUs that are not reserved."""
        return self._state.isolated

    @property
    def reserved_cpus(self) -> frozenset[int]:
        """Every reserved CPU, the partly reserved one included."""
        return self._state.reserved_all

    @property
    def exclusive_cpus(self) -> frozenset[int]:
        """The CPUs granted exclusively."""
        return self._state.taken

    def accounts(self) -> Accounts:
        """The accounting as it stands, for checks of its invariants."""
        s = self._state
        ledger = s.ledger
        return Accounts(
            shared_cpus=tuple(ledger.shared_cpus),
            free_isolated=tuple(ledger.free_iso),
            sub_shared=tuple(ledger.sub_shared),
            sub_users=tuple(ledger.sub_users),
            exclusive=s.taken,
            reserved_capacity=s.reserved_capacity,
            reserved_granted=s.reserved_granted,
            memory_requested=s.memory_requested,
            memory=dict(s.book.zones()),
            hugepages=s.huge.booked_pages(),
        )

    def capacity(self, p: int) -> int:
        """Shared milli-CPU the pool's shared CPUs hold."""
        return self._state.ledger.capacity(p)

    def allocatable(self, p: int) -> int:
        """Milli-CPU still grantable from the pool's shared CPUs (limited by its ancestors)."""
        return self._state.ledger.allocatable(p)

    def shared_cpus(self, p: int) -> frozenset[int]:
        """The pool's shared cpuset: its sharable CPUs no container holds exclusively."""
        return self._state.ledger.shared_cpus[p]

    def sliceable(self, p: int) -> frozenset[int]:
        """The pool's shared CPUs that may become exclusive: the partly reserved one never does."""
        return self._state.ledger.shared_cpus[p] - self._state.partial

    def sharable_capacity(self, p: int) -> int:
        """Shared milli-CPU of all the pool's sharable CPUs, as if none were exclusive."""
        return self._state.ledger.sharable_capacity(p)

    def shared_assigned(self, p: int) -> int:
        """Milli-CPU granted from shared CPUs to containers in the pool's subtree."""
        return self._state.ledger.sub_shared[p]

    def reserved_milli(self, cpus: frozenset[int]) -> int:
        """Milli-CPU the reservation holds among `cpus`."""
        s = self._state
        whole = len(cpus & (s.reserved_all - s.partial))
        return 1000 * whole + (s.partial_reserved if s.partial & cpus else 0)

    def memory_charged(self) -> Mapping[frozenset[int], int]:
        """Bytes charged per memory zone."""
        return self._state.book.zones()

    def memory_capacity(self, nodes: frozenset[int]) -> int:
        """Bytes of memory the nodes hold."""
        return self._state.book.capacity(nodes)

    def hugepages_free(self, node: int, size_kb: int) -> int:
        """Pages of `size_kb` on `node` no container has booked."""
        return self._state.huge.free(node, size_kb)

    def pin(self, g: Grant) -> frozenset[int] | None:
        """The cpuset a grant pins its container to (None when CPU pinning is left alone)."""
        return self._state.pins.pin(g)

    def placement(self, g: Grant) -> Placement:
        """What a grant pins its container to, with its CPU shares."""
        return self._state.pins.placement(g)

    def decision_of(self, container_id: str) -> Decision:
        """The current placement of a container as a decision without trace or updates."""
        return decision(self._state, self._state.record.grants[container_id])

    def pool_index(self, name: str) -> int | None:
        """The index of the pool named `name`, None when this tree has no such pool."""
        return self._state.by_name.get(name)
