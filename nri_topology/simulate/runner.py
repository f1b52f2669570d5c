"""Drive the policy through a workload, one step at a time, and record what happened.

The runner is the simulated runtime: it hands the policy the pods and containers a node would
report, applies every decision and every update to other containers to its own picture of the
node, and keeps going when a step fails, so a whole story can be told and checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from nri_topology.policy.pinning import apply_updates, merged
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import (
    ColdStart,
    CpuKind,
    Placement,
    PolicyError,
    PoolScore,
    QoS,
    Update,
)
from nri_topology.policy.views import PoolView
from nri_topology.topology.model import Machine, MemoryTier

if TYPE_CHECKING:
    from nri_topology.simulate.workload import RunningContainer, Step, Workload


class NodeState(Protocol):
    """A node's pools and placements, as the tree and the picture draw them: the end of a
    simulation, or a live node (`nri-topology status`)."""

    @property
    def machine(self) -> Machine: ...
    @property
    def machine_name(self) -> str: ...
    @property
    def assignments(self) -> Mapping[str, NodeAssignment]: ...
    @property
    def pools(self) -> tuple[PoolView, ...]: ...


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """Where a container runs right now, as the node holds it (the simulated runtime has applied
    every update; `nri-topology status` reads a live node), with what the policy said of it."""

    id: str
    namespace: str
    pod: str
    name: str
    qos: QoS
    pool: str
    kind: CpuKind
    cpus: frozenset[int] | None  # None: left as the runtime set it
    mems: frozenset[int] | None
    exclusive: frozenset[int]
    cpu_shares: int | None
    memory_tiers: frozenset[MemoryTier]
    hugepages: tuple[tuple[int, int, int], ...] = ()  # (node, page size kB, pages) booked


@dataclass(frozen=True, slots=True)
class Placed:
    """A container placed (created or resized) in a step, with the policy's explanation."""

    assignment: NodeAssignment
    reason: str
    trace: tuple[PoolScore, ...]
    memory_relaxed: bool
    cold_start: ColdStart | None
    warnings: tuple[str, ...] = ()  # annotations ignored or cut back
    degraded: tuple[str, ...] = ()  # what it got less of than it asked for (admission)
    moved: tuple[str, ...] = ()  # shared containers moved to make room for it


@dataclass(frozen=True, slots=True)
class Moved:
    """Another container whose CPUs or memory nodes changed because of this step."""

    id: str
    cpus: frozenset[int] | None  # the new set, None when unchanged
    mems: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class Failure:
    container: str
    message: str
    internal: bool = False  # the policy raised something other than PolicyError: a bug


@dataclass(frozen=True, slots=True)
class StepResult:
    number: int  # 1-based, as in error messages
    action: Literal["create", "remove", "resize", "wait"]
    target: str
    note: str
    expect_error: bool
    placed: tuple[Placed, ...] = ()
    updates: tuple[Moved, ...] = ()
    released: tuple[str, ...] = ()
    errors: tuple[Failure, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def as_expected(self) -> bool:
        """Failed exactly when the workload said it would, and never with a policy bug."""
        if any(e.internal for e in self.errors):
            return False
        return bool(self.errors) == self.expect_error


@dataclass(frozen=True)
class Simulation:
    machine: Machine
    machine_name: str
    workload: Workload
    steps: tuple[StepResult, ...]
    assignments: Mapping[str, NodeAssignment]  # at the end, by container id
    pools: tuple[PoolView, ...] = field(default=())

    @property
    def as_expected(self) -> bool:
        return all(s.as_expected for s in self.steps)


def _failure(cid: str, exc: Exception) -> Failure:
    if isinstance(exc, PolicyError):
        return Failure(cid, str(exc))
    return Failure(cid, f"internal error: {type(exc).__name__}: {exc}", internal=True)


class Runner:
    """Feeds workload steps to a policy and keeps the node's picture up to date."""

    def __init__(self, policy: PolicyPort, machine: Machine) -> None:
        self._policy = policy
        self._capacity = sum(n.memory for n in machine.nodes.values())
        self._running: dict[str, RunningContainer] = {}
        self._cold: dict[str, int] = {}  # container id -> when its cold start ends (ns)
        self.clock_ns = 0  # simulated time: only wait steps move it
        self.assignments: dict[str, NodeAssignment] = {}

    def run(self, workload: Workload) -> tuple[StepResult, ...]:
        return tuple(self.step(n, s) for n, s in enumerate(workload.steps, start=1))

    def step(self, number: int, step: Step) -> StepResult:
        # Loaded here, not with the module: the daemon's status pages import this module for the
        # node picture and need no workload schema.
        from nri_topology.simulate.workload import container_id, create_containers, pod_id, resized

        base = StepResult(number, step.action, step.target, step.note, step.expect_error)
        if step.create is not None:
            made = create_containers(step.create, step=number, memory_capacity=self._capacity)
            return self._place(base, [(c, None) for c in made])
        if step.resize is not None:
            spec = step.resize
            cid = container_id(spec.namespace, spec.pod, spec.container)
            old = self._running.get(cid)
            if old is None:
                return replace(base, errors=(Failure(cid, "container is not running"),))
            return self._place(base, [(resized(old, spec), old)])
        if step.remove is None:
            return self._wait(base, step.wait_ns)
        spec_r = step.remove
        # Containers whose creation failed are not running: there is nothing to release.
        if spec_r.container is not None:
            cid = container_id(spec_r.namespace, spec_r.pod, spec_r.container)
            ids = [cid] if cid in self._running else []
        else:
            pid = pod_id(spec_r.namespace, spec_r.pod)
            ids = [cid for cid, rc in self._running.items() if rc.pod.id == pid]
        return self._remove(base, ids)

    def _place(
        self, base: StepResult, items: list[tuple[RunningContainer, RunningContainer | None]]
    ) -> StepResult:
        placed: list[Placed] = []
        moved: dict[str, Moved] = {}
        errors: list[Failure] = []
        for rc, old in items:
            try:
                if old is None:
                    decision = self._policy.create(rc.pod, rc.info)
                else:
                    decision = self._policy.resize(rc.pod, old.info, rc.info.resources)
            except Exception as exc:  # recorded; the simulation goes on with the next one
                errors.append(_failure(rc.info.id, exc))
                continue
            self._running[rc.info.id] = rc
            assignment = NodeAssignment(
                id=rc.info.id,
                namespace=rc.pod.namespace,
                pod=rc.pod.name,
                name=rc.info.name,
                qos=rc.qos,
                pool=decision.pool,
                kind=decision.kind,
                cpus=decision.placement.cpus,
                mems=decision.placement.mems,
                exclusive=decision.exclusive,
                cpu_shares=decision.placement.cpu_shares,
                memory_tiers=decision.memory_tiers,
                hugepages=decision.hugepages,
            )
            self.assignments[rc.info.id] = assignment
            if decision.cold_start is not None:
                self._cold[rc.info.id] = self.clock_ns + decision.cold_start.delay_ns
            else:
                self._cold.pop(rc.info.id, None)
            placed.append(
                Placed(
                    assignment,
                    decision.reason,
                    decision.trace,
                    decision.memory_relaxed,
                    decision.cold_start,
                    tuple(w.message for w in decision.warnings),
                    tuple(str(d) for d in decision.degraded),
                    decision.moved,
                )
            )
            self._apply(decision.updates, moved)
            if decision.moved:  # moved to make room: another pool, perhaps another kind
                now = self._policy.assignments()
                for cid in decision.moved:
                    if cid in self.assignments and cid in now:
                        n = now[cid]
                        self.assignments[cid] = replace(
                            self.assignments[cid], pool=n.pool, kind=n.kind, exclusive=n.exclusive
                        )
        return replace(
            base, placed=tuple(placed), updates=self._ordered(moved), errors=tuple(errors)
        )

    def _remove(self, base: StepResult, ids: list[str]) -> StepResult:
        moved: dict[str, Moved] = {}
        released: list[str] = []
        errors: list[Failure] = []
        for cid in ids:
            try:
                updates = self._policy.release(cid)
            except Exception as exc:
                errors.append(_failure(cid, exc))
                continue
            released.append(cid)
            self._running.pop(cid, None)
            self.assignments.pop(cid, None)
            self._cold.pop(cid, None)
            moved.pop(cid, None)
            self._apply(updates, moved)
        return replace(
            base, updates=self._ordered(moved), released=tuple(released), errors=tuple(errors)
        )

    def _wait(self, base: StepResult, ns: int) -> StepResult:
        """Let time pass; cold starts that come due widen their memory, earliest first."""
        self.clock_ns += ns
        moved: dict[str, Moved] = {}
        errors: list[Failure] = []
        due = sorted((t, cid) for cid, t in self._cold.items() if t <= self.clock_ns)
        for _, cid in due:
            del self._cold[cid]
            try:
                updates = self._policy.cold_start_done(cid)
            except Exception as exc:
                errors.append(_failure(cid, exc))
                continue
            self._apply(updates, moved)
        return replace(base, updates=self._ordered(moved), errors=tuple(errors))

    def _apply(self, updates: tuple[Update, ...], moved: dict[str, Moved]) -> None:
        """Apply other containers' new placements; several in one step merge into one line."""
        current = {
            u.container_id: Placement(a.cpus, a.mems, a.cpu_shares)
            for u in updates
            if (a := self.assignments.get(u.container_id)) is not None
        }
        applied = apply_updates(current, updates)
        for cid, p in applied.placements.items():
            self.assignments[cid] = replace(
                self.assignments[cid], cpus=p.cpus, mems=p.mems, cpu_shares=p.cpu_shares
            )
        for update in applied.applied:
            cid, change = update.container_id, update.placement
            prev = moved.get(cid)
            if prev is not None:
                change = merged(Placement(prev.cpus, prev.mems), change)
            moved[cid] = Moved(cid, change.cpus, change.mems)

    @staticmethod
    def _ordered(moved: dict[str, Moved]) -> tuple[Moved, ...]:
        return tuple(moved[k] for k in sorted(moved))
