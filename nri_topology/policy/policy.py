"""The policy facade the daemon, `simulate` and the benchmarks drive.

It turns pod and container data into requests (`intake.request.build_request`) and hands them to the
engine, which keeps all accounting. Every call either succeeds or raises `PolicyError` with the
state exactly as before. See `engine` for accounting and grant rules, `choice.scoring` for the
pool sort key, `pools` for the tree and `checkpoint.restore` for adoption after a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from nri_topology.policy.checkpoint import restore as restoring
from nri_topology.policy.checkpoint import state
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.intake import podlevel
from nri_topology.policy.intake.request import build_request
from nri_topology.policy.options import Options
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    Decision,
    Placement,
    PodInfo,
    PolicyError,
    Request,
    Resources,
    Update,
)
from nri_topology.policy.views import (
    Assignment,
    Changes,
    NodeCapacity,
    PoolView,
    RestoreReport,
    TierMemory,
)
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier


class Policy:
    """Placement of containers on one machine under one set of options."""

    def __init__(self, machine: Machine, options: Options) -> None:
        self._machine = machine
        self._options = options
        self._engine = Engine(machine, options)
        # Which containers are placed is the engine's record (`Engine.grants`), each request
        # with the container data it came from; beside it the latest data of their pods (a
        # resize's newer pod data is every container's of the pod).
        self._pods: dict[str, PodInfo] = {}
        # Stopped containers whose exclusive CPUs wait for their next attempt (`hold`), by
        # (pod id, container name): the kubelet names every attempt of a container alike.
        self._held: dict[tuple[str, str], str] = {}
        self._replaced = False  # the engine was replaced since the last `changes`

    @property
    def options(self) -> Options:
        return self._options

    def create(self, pod: PodInfo, container: ContainerInfo) -> Decision:
        """Place a new container; the decision carries updates for the others that changed.

        The next attempt of a held container (`hold`) takes over what the previous one holds,
        changing no one else when it asks for the same amounts (`Engine.succeed`).
        """
        given = self._with_budget(pod, container)
        req = build_request(pod, given, self._options, machine=self._machine, origin=container)
        previous = self._held.pop((container.pod_id, container.name), None)
        if previous is None:
            decision = self._engine.place(req)
        else:
            try:
                decision = self._engine.succeed(previous, req)
            except PolicyError:
                self._held[(container.pod_id, container.name)] = previous
                raise
        self._pods[pod.id] = pod
        if pod.resources is not None and given is container:
            decision = self._rebudget(pod, container.id, decision)
        return decision

    def _rebudget(self, pod: PodInfo, placed: str, decision: Decision) -> Decision:
        """After a container of `pod` was placed, its budget's holder (`podlevel`) placed again
        with what is left: what a container states is not the holder's any more (a pod that
        states no pod-level amounts reports their sum, its later containers' amounts included).
        The holder's new pinning joins the decision's updates; when it cannot be placed again it
        keeps what it holds."""
        infos = self._infos_of(pod.id)
        holder = podlevel.holder(pod, infos)
        if holder is None or holder == placed:
            return decision
        info = next(i for i in infos if i.id == holder)
        given = podlevel.with_budget(pod, info, infos).resources
        req = build_request(pod, info, self._options, machine=self._machine, resources=given)
        try:
            again = self._engine.resize(req)
        except PolicyError:
            return decision
        updates = {u.container_id: u for u in (*decision.updates, *again.updates)}
        updates.pop(placed, None)  # its own pinning is the decision's, as it is now
        updates[holder] = Update(holder, again.placement)
        return replace(
            decision,
            placement=self._engine.placement(self._engine.grants[placed]),
            updates=tuple(updates[cid] for cid in sorted(updates)),
        )

    def hold(self, container_id: str) -> bool:
        """Keep what a stopped container holds for its next attempt in the same pod, when it
        holds exclusive CPUs: giving them back and taking them again would re-pin every shared
        container twice. False (nothing kept) otherwise; `release` ends a hold."""
        grant = self._engine.grants.get(container_id)
        if grant is None or not grant.exclusive:
            return False
        self._held[(grant.request.pod_id, grant.request.name)] = container_id
        return True

    def resize(self, pod: PodInfo, container: ContainerInfo, resources: Resources) -> Decision:
        """New resources for a running container: in place when they fit, else moved."""
        now = replace(container, resources=resources)
        given = self._with_budget(pod, now).resources
        req = build_request(
            pod, container, self._options, machine=self._machine, resources=given, origin=now
        )
        decision = self._engine.resize(req)
        self._pods[pod.id] = pod
        return decision

    def _with_budget(self, pod: PodInfo, container: ContainerInfo) -> ContainerInfo:
        """The container with its pod's budget when it holds it (`podlevel`)."""
        if pod.resources is None or not podlevel.states_none(container.resources):
            return container
        siblings = [i for i in self._infos_of(pod.id) if i.id != container.id]
        return podlevel.with_budget(pod, container, siblings)

    def _infos_of(self, pod_id: str) -> list[ContainerInfo]:
        """The container data of a pod's placed containers, in id order."""
        grants = self._engine.grants
        return [self._origin(grants[cid].request) for cid in self._engine.pod_containers(pod_id)]

    @staticmethod
    def _origin(req: Request) -> ContainerInfo:
        origin = req.origin
        assert origin is not None  # every request the policy places is built with it
        return origin

    def release(self, container_id: str) -> tuple[Update, ...]:
        """Free what a stopped or removed container held; unknown ids are ignored."""
        g = self._engine.grants.get(container_id)
        if g is None:
            return ()
        key = (g.request.pod_id, g.request.name)
        if self._held.get(key) == container_id:
            del self._held[key]
        updates = self._engine.release(container_id)
        if not self._engine.pod_containers(g.request.pod_id):
            del self._pods[g.request.pod_id]
        return updates

    def restore(
        self,
        pods: Sequence[PodInfo],
        containers: Sequence[ContainerInfo],
        saved: Mapping[str, Any] | None = None,
    ) -> RestoreReport:
        """Replace the state with the running containers, adopting their placements."""
        found, failed = self._found(pods, containers, self._options)
        engine = restoring.new_engine(self._machine, self._options, found, saved)
        report = restoring.restore(engine, found, saved)
        self._replace(engine, {p.id: p for p in pods})
        self._held = {}  # the runtime reports running containers only
        return replace(report, failed={**failed, **report.failed})

    def _found(
        self,
        pods: Sequence[PodInfo],
        containers: Sequence[ContainerInfo],
        options: Options,
        origins: Mapping[str, ContainerInfo] | None = None,
    ) -> tuple[list[restoring.Found], dict[str, str]]:
        """The requests of running containers (`origins`: the data to record for them, when
        not the containers themselves), and why the others cannot be placed."""
        by_id = {p.id: p for p in pods}
        found: list[restoring.Found] = []
        failed: dict[str, str] = {}
        of_pod: dict[str, list[ContainerInfo]] = {}
        for c in containers:
            pod = by_id.get(c.pod_id)
            if pod is not None and pod.resources is not None:
                of_pod.setdefault(c.pod_id, []).append(c)
        for c in sorted(containers, key=lambda c: c.id):
            pod = by_id.get(c.pod_id)
            if pod is None:
                failed[c.id] = f"container {c.id} belongs to unknown pod {c.pod_id}"
                continue
            given = c
            if c.pod_id in of_pod and podlevel.states_none(c.resources):
                given = podlevel.with_budget(pod, c, of_pod[c.pod_id])
            try:
                origin = c if origins is None else origins[c.id]
                req = build_request(pod, given, options, machine=self._machine, origin=origin)
                cpus = cpuset.parse(c.resources.cpuset_cpus) or None
                mems = cpuset.parse(c.resources.cpuset_mems) or None
            except (PolicyError, ValueError) as e:
                failed[c.id] = str(e)
                continue
            found.append(restoring.Found(req, cpus, mems))
        return found, failed

    def container(self, container_id: str) -> tuple[PodInfo, ContainerInfo] | None:
        """The pod and container data a placed container was last placed with, None when it is
        not placed."""
        g = self._engine.grants.get(container_id)
        return None if g is None else (self._pods[g.request.pod_id], self._origin(g.request))

    def pod_containers(self, pod_id: str) -> tuple[str, ...]:
        """The placed containers of a pod, in id order (held ones included)."""
        return self._engine.pod_containers(pod_id)

    def cold_start_done(self, container_id: str) -> tuple[Update, ...]:
        """Widen a cold-started container's memory to DRAM; the update is for itself."""
        return self._engine.finish_cold_start(container_id)

    def snapshot(self, entries: bool = True) -> dict[str, Any]:
        """JSON-able state for the checkpoint, to be given back to `restore`; without the
        containers' entries (an empty map at `state.ENTRIES`) when not `entries`."""
        return state.snapshot(self._engine, entries)

    def changes(self, everything: bool = False) -> Changes:
        """The snapshot entries of the containers whose placement changed since the last call;
        of all containers (`complete`) when `everything`, after a restore or reconfiguration,
        or when too many changed to name.

        Each change is reported once: the checkpoint writer is the one reader, keeping the
        entries of the others from earlier calls.
        """
        e = self._engine
        named = e.take_changed()
        if everything or self._replaced or named is None:
            self._replaced = False
            return Changes({cid: state.entry(e, cid) for cid in sorted(e.grants)}, complete=True)
        return Changes({cid: state.entry(e, cid) for cid in sorted(named)})

    def _replace(self, engine: Engine, pods: Mapping[str, PodInfo]) -> None:
        """Take a new engine, with the data of its containers' pods; the next `changes`
        reports every container."""
        self._engine = engine
        self._pods = {g.request.pod_id: pods[g.request.pod_id] for g in engine.grants.values()}
        self._replaced = True

    def reconfigure(self, options: Options) -> RestoreReport:
        """Switch options, keeping every placement that is still valid under the new ones.

        Only containers whose CPUs or memory nodes left the usable set (or whose accounting no
        longer fits) are re-placed; the report says which. Raises PolicyError, keeping the old
        options and state, when a container cannot be placed under the new options.
        """
        old = self._engine
        pods = list(self._pods.values())
        containers = []
        origins: dict[str, ContainerInfo] = {}
        for cid, g in old.grants.items():
            ctr = origins[cid] = self._origin(g.request)
            current = replace(
                ctr.resources,
                cpuset_cpus=cpuset.format(g.cpus) if g.cpus is not None else "",
                cpuset_mems=cpuset.format(g.mems) if g.mems is not None else "",
            )
            containers.append(replace(ctr, resources=current))
        found, failed = self._found(pods, containers, options, origins)
        saved = state.snapshot(old)
        engine = restoring.new_engine(self._machine, options, found, saved)
        report = restoring.restore(engine, found, saved)
        failed.update(report.failed)
        if failed:
            lines = "; ".join(f"{cid}: {why}" for cid, why in sorted(failed.items()))
            raise PolicyError(f"new options cannot hold every container: {lines}")
        self._replace(engine, self._pods)
        self._options = options
        self._held = {k: cid for k, cid in self._held.items() if cid in engine.grants}
        return report

    def placements(self, ids: Iterable[str] | None = None) -> dict[str, Placement]:
        """The cpuset and memory nodes each container (of `ids`; all when None) is pinned to,
        straight from the grants: the daemon checks cgroups against them after every start."""
        grants = self._engine.grants
        keys = grants.keys() if ids is None else ids
        return {
            cid: Placement(g.cpus, g.mems) for cid in keys if (g := grants.get(cid)) is not None
        }

    def assignments(self) -> Mapping[str, Assignment]:
        e = self._engine
        out: dict[str, Assignment] = {}
        for cid in sorted(e.grants):
            g = e.grants[cid]
            r = g.request
            out[cid] = Assignment(
                container_id=cid,
                pod_id=r.pod_id,
                pod_name=r.pod_name,
                name=r.name,
                namespace=r.namespace,
                qos=r.qos,
                pool=e.pools[g.pool].name,
                kind=g.kind,
                cpus=g.cpus,
                mems=g.mems,
                exclusive=g.exclusive,
                shared=g.shared,
                memory=g.memory,
                memory_nodes=g.zone,
                memory_relaxed=g.relaxed,
                hugepages=g.hugepages,
            )
        return out

    def pools(self) -> Sequence[PoolView]:
        e = self._engine
        placed = [0] * len(e.pools)
        for g in e.grants.values():
            placed[g.pool] += 1
        zones = e.memory_charged()
        views: list[PoolView] = []
        for p in e.pools:
            memory: dict[MemoryTier, TierMemory] = {}
            for tier, nodes in p.mems.items():
                cap = e.memory_capacity(nodes)
                assigned = 0
                for zone, charged in zones.items():
                    if zone <= p.nodes and zone & nodes:
                        assigned += (
                            charged
                            * e.memory_capacity(zone & nodes)
                            // max(e.memory_capacity(zone), 1)
                        )
                memory[tier] = TierMemory(cap, assigned, cap - assigned, nodes)
            views.append(
                PoolView(
                    name=p.name,
                    kind=p.kind,
                    depth=p.depth,
                    parent=e.pools[p.parent].name if p.parent is not None else None,
                    cpus=p.cpus,
                    isolated=p.isolated,
                    reserved=e.reserved_cpus & p.cpus,
                    shared=e.shared_cpus(p.index),
                    capacity_milli=e.sharable_capacity(p.index),
                    assigned_milli=e.shared_assigned(p.index),
                    free_milli=e.allocatable(p.index),
                    containers=placed[p.index],
                    memory=memory,
                    nodes=p.nodes,
                    hugepages=self._hugepages(p.nodes),
                )
            )
        return tuple(views)

    def _hugepages(self, nodes: frozenset[int]) -> dict[int, tuple[int, int]]:
        """Per page size: the pages `nodes` hold and those no container has booked."""
        out: dict[int, tuple[int, int]] = {}
        for n in sorted(nodes):
            for size, total in self._machine.nodes[n].hugepages.items():
                if total > 0:
                    held, free = out.get(size, (0, 0))
                    out[size] = (held + total, free + self._engine.hugepages_free(n, size))
        return dict(sorted(out.items()))

    def node_capacity(self) -> tuple[NodeCapacity, ...]:
        """Per NUMA node capacity, allocatable and available CPU and memory (see NodeCapacity)."""
        e = self._engine
        m = self._machine
        shared_used: dict[int, float] = {}
        for g in e.grants.values():
            if not g.uses_shared or g.kind is CpuKind.RESERVED or not g.shared:
                continue
            shared_cpus = e.shared_cpus(g.pool)
            if not shared_cpus:
                continue
            per_node: dict[int, int] = {}
            for c in shared_cpus:
                node = m.cpus[c].node
                per_node[node] = per_node.get(node, 0) + 1
            for node, count in per_node.items():
                shared_used[node] = shared_used.get(node, 0.0) + g.shared * count / len(shared_cpus)
        memory_used: dict[int, int] = {}
        for node, size in e.options.outside_memory:  # held by another owner (the kubelet)
            memory_used[node] = memory_used.get(node, 0) + size
        for zone, charged in e.memory_charged().items():
            total = e.memory_capacity(zone)
            for node in zone:
                if total:
                    share = charged * e.memory_capacity(frozenset({node})) // total
                    memory_used[node] = memory_used.get(node, 0) + share
        out = []
        for n in sorted(m.nodes):
            node = m.nodes[n]
            cpus = node.cpus & e.allowed
            allocatable = 1000 * len(cpus) - e.reserved_milli(cpus)
            used = 1000 * len(e.exclusive_cpus & cpus) + round(shared_used.get(n, 0.0))
            out.append(
                NodeCapacity(
                    node=n,
                    cpu_capacity=1000 * len(node.cpus),
                    cpu_allocatable=allocatable,
                    cpu_available=max(0, allocatable - used),
                    memory_capacity=node.memory,
                    memory_available=max(0, node.memory - memory_used.get(n, 0)),
                    hugepages=self._hugepages(frozenset({n})),
                )
            )
        return tuple(out)
