"""The policy-backed NRI plugin: runtime events in, placements out, state kept across restarts.

The plugin turns each NRI event into calls on the rooms beside it and answers the runtime
(docs/protocol.md §6): every policy call runs under one lock, so decisions are strictly
serialized; a refusal fails the event with the policy's message and changes nothing
(`admission`); other containers' re-pins go to the update path (`updates`), which writes them
into their cgroups and sends them to the runtime after the reply, or hands them back for it,
and never holds up a reply beyond a granted container's own start; placements that end without
a decision (stopped, removed, left by a pod, a hold or a cold start over) are `lifecycle`'s; the
state is checkpointed off the request path (`persistence`), and a crash loses no placement
because Synchronize reports every container's cpuset; decided == applied is checked in the
cgroups after a start and periodically (`verify`); decisions are kept for `explain`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from nri_topology.daemon import convert, logs
from nri_topology.daemon.admission import Admission
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.explain import Explained, Explanations
from nri_topology.daemon.lifecycle import Lifecycle
from nri_topology.daemon.metrics import Metrics, StateView, from_policy
from nri_topology.daemon.persistence import State
from nri_topology.daemon.settings import Settings
from nri_topology.daemon.timers import Timers
from nri_topology.daemon.updates.path import UpdatePath
from nri_topology.daemon.updates.schedule import PACED
from nri_topology.daemon.updates.transport import Transports
from nri_topology.daemon.verify import Verifier
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin, Stub, Updates
from nri_topology.policy.options import Options
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import (
    ContainerInfo,
    Placement,
)
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.daemon.hints import HintFinder
    from nri_topology.daemon.placement_file import PlacementFiles

_log = structlog.get_logger("nri_topology.daemon")

# What a re-pin through the CRI leaves at zero: the runtime relays it to us with these unset.
_NOT_IN_A_REPIN = ("shares", "quota", "period")


def _cpusets_only(res: api_pb2.LinuxResources) -> bool:
    """Whether an UpdateContainer's resources carry cpusets and nothing that a resize sets
    (CPU shares, quota, period, memory limit); hugepage limits and unified settings the runtime
    may fill in from the container's own are not looked at."""
    cpu = res.cpu
    if not cpu.cpus and not cpu.mems:
        return False
    if any(getattr(cpu, name).value for name in _NOT_IN_A_REPIN):
        return False
    return not res.memory.limit.value


def _kubelet_repin(policy: PolicyPort, info: ContainerInfo) -> Updates:
    """The kubelet re-pins a container its static CPU manager pinned (after it restarted, or
    from its reconcile loop): the cpuset is the kubelet's to give, the memory nodes stay."""
    now = policy.placements([info.id]).get(info.id)
    cpus = cpuset.parse(info.resources.cpuset_cpus)
    return [convert.container_update(info.id, Placement(cpus, now.mems if now else None))]


def _current(policy: PolicyPort, container_id: str) -> Updates:
    """The answer when the runtime relays our own CRI re-pin: the container's current cpusets
    (newer than those sent, when the policy moved it since), nothing else. No lock and no wait:
    the runtime holds its NRI lock until we answer, and our CRI call waits for it."""
    now = policy.placements([container_id]).get(container_id)
    if now is None:  # released meanwhile: the runtime applies what was sent
        return []
    return [convert.container_update(container_id, Placement(now.cpus, now.mems))]


# Containers in these states hold resources; stopped and unknown ones do not.
_LIVE_STATES = (
    api_pb2.CONTAINER_CREATED,
    api_pb2.CONTAINER_RUNNING,
    api_pb2.CONTAINER_PAUSED,
)


class TopologyPlugin(Plugin):
    """Wires NRI events to the policy; see the module docstring for the rules."""

    def __init__(
        self,
        policy: PolicyPort,
        *,
        checkpoint: Checkpoint | None = None,
        metrics: Metrics | None = None,
        settings: Settings | None = None,
        runtime_config: Callable[[str], Awaitable[None]] | None = None,
        wall_clock_ns: Callable[[], int] = time.time_ns,
        checkpoint_retry_s: float = 10.0,
        hints: HintFinder | None = None,
        files: PlacementFiles | None = None,
    ) -> None:
        self.policy = policy
        self.hints = hints
        self.files = files
        self.on_change: Callable[[], None] | None = None  # e.g. the NRT publisher
        # Reads again what the kubelet's static CPU manager pins, before a container it may pin
        # is placed, and applies it (the daemon's `_kubelet_refresh`); None: nothing to read.
        self.kubelet_refresh: Callable[[], Awaitable[None]] | None = None
        self.checkpoint = checkpoint
        self.metrics = metrics or Metrics(self.state_view)
        self.settings = settings = settings or Settings()
        self._runtime_config = runtime_config
        self._lock = asyncio.Lock()
        # Which containers exist, and their pods, is the policy's to know (`policy.container`);
        # the daemon keeps only what the policy cannot: warnings given, decisions for `explain`
        # (`explained`), cold-start timers and holds (`timers`), and (in `verifier`) the cgroup
        # paths the runtime reported.
        self.admission = Admission(self.metrics)
        self.timers = Timers(
            wall_clock_ns,
            lambda cid: self._spawn(self.lifecycle.cold_start_expired(cid)),
            lambda cid: self._spawn(self.lifecycle.hold_expired(cid)),
        )
        self.explained = Explanations(policy, wall_clock_ns)
        self._background: set[asyncio.Task[None]] = set()
        self.state = State(
            policy,
            checkpoint,
            self.timers.to_json,
            self._lock,
            self.metrics.error,
            checkpoint_retry_s,
        )
        self.verifier: Verifier | None = None
        if settings.cgroup_root is not None:
            self.verifier = Verifier(
                settings.cgroup_root,
                self._settled_placements,
                lambda updates, why: self.updates.send(updates, why),
                lambda check: self.metrics.cgroup_drift.labels(check).inc(),
                settings.verify_interval_s,
            )
        transports = Transports(
            self.metrics,
            wanted=settings.transport,
            cri_socket=settings.cri_socket,
            pace_old_runtimes=settings.pace_old_runtimes,
            paced_if_safe=settings.pacing is not None,
            concurrency=(settings.pacing or PACED).batch,
        )
        self.updates = UpdatePath(
            self.metrics,
            transports,
            pacing=settings.pacing,
            cgroups=self.verifier,
            cgroup_first=settings.cgroup_first,
            placed=self._placed,
            on_closed=lambda c: self.explained.window_closed(c.owner, c.seconds),
            spawn=self._spawn,
        )
        self.lifecycle = Lifecycle(
            policy,
            self._lock,
            metrics=self.metrics,
            admission=self.admission,
            explained=self.explained,
            timers=self.timers,
            state=self.state,
            updates=self.updates,
            verifier=self.verifier,
            files=files,
            commit=self._commit,
        )

    # --- views for metrics, health and explain ------------------------------------------------

    @property
    def stub(self) -> Stub | None:
        """The runtime connection; re-pins through NRI go out on it."""
        return self.updates.stub

    @stub.setter
    def stub(self, stub: Stub | None) -> None:
        self.updates.stub = stub

    @property
    def decisions(self) -> dict[str, Explained]:
        """The last decision for each placed container, for `nri-topology explain`."""
        return self.explained.decisions

    def state_view(self) -> StateView:
        """Pools and containers for the metrics endpoint, as the policy sees them now."""
        return from_policy(self.policy.pools(), self.policy.assignments().values())

    def ready(self) -> tuple[bool, str]:
        if self.stub is None:
            return False, "not started"
        if not self.stub.registered:
            why = self.stub.unreachable  # while the runtime's NRI socket cannot be reached
            return False, "not registered with the runtime" + (f": {why}" if why else "")
        if not self.stub.ready:
            return False, "registered, waiting for Synchronize"
        return True, ""

    # --- NRI handlers -------------------------------------------------------------------------

    def _event(self, name: str) -> None:
        """A runtime event for a pod: counted, and the runtime's record re-pins give way to it."""
        self.metrics.request(name)
        self.updates.event()

    async def configure(self, req: api_pb2.ConfigureRequest) -> int | None:
        self.metrics.request("Configure")
        if req.config.strip() and self._runtime_config is not None:
            await self._runtime_config(req.config)
        await self.updates.configure(req, self._lock, lambda: self.policy.placements())
        return None

    async def synchronize(
        self, pods: Sequence[api_pb2.PodSandbox], containers: Sequence[api_pb2.Container]
    ) -> Updates:
        self.metrics.request("Synchronize")
        if self.kubelet_refresh is not None:  # it may have pinned containers while we were away
            await self.kubelet_refresh()
        pod_infos = [convert.pod_info(p) for p in pods]
        live = [c for c in containers if c.state in _LIVE_STATES]
        infos = [convert.container_info(c) for c in live]
        if self.hints is not None:  # device hints, for containers re-placed or resized later
            refs = [convert.device_refs(c) for c in live]
            infos = await self.hints.restored(pod_infos, infos, refs, self.policy.options)
        created = {c.id for c in live if c.state == api_pb2.CONTAINER_CREATED}
        report = await self.lifecycle.restore(pod_infos, infos, created)
        if self.verifier is not None:
            found = await self.verifier.reset({c.id: c.linux.cgroups_path for c in live})
            # running ones only: a container created but not started may have no cgroup yet
            running = sum(c.state == api_pb2.CONTAINER_RUNNING for c in live)
            self.updates.cgroup_root_holds(found, running)
            self.verifier.start()
        _log.info(
            "synchronized with the runtime",
            pods=len(pod_infos),
            containers=len(infos),
            adopted=len(report.adopted),
            replaced=len(report.replaced),
            failed=len(report.failed),
            **logs.summarize_updates(report.updates),
        )
        self.metrics.registered.set(1)
        return convert.updates(report.updates, ignore_failure=True)

    async def run_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._event("RunPodSandbox")
        if self.hints is not None:
            self.hints.pod_started(convert.pod_info(pod))

    async def stop_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._event("StopPodSandbox")
        await self.lifecycle.release_pod(pod.id, "pod_stopped")

    async def update_pod_sandbox(
        self,
        pod: api_pb2.PodSandbox,
        overhead: api_pb2.LinuxResources,
        resources: api_pb2.LinuxResources,
    ) -> None:
        """A pod resized in place (KEP-1287 with pod-level resources): the container holding the
        pod's budget (`podlevel`) is placed again with the new one (the policy keeps the pod's
        new data for all its containers); what changes for it and for others goes through the
        update schedule like any re-pin, as this event's reply carries no updates."""
        self._event("UpdatePodSandbox")
        # the new resources beside the pod; without them the pod's own say what it has now
        await self.lifecycle.resize_pod(
            convert.pod_info(pod, resources if resources.ByteSize() else None)
        )

    async def remove_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._event("RemovePodSandbox")
        if self.hints is not None:
            self.hints.pod_removed(pod.id)
        self.admission.pod_gone(pod.id)
        await self.lifecycle.release_pod(pod.id, "pod_removed")

    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> tuple[api_pb2.ContainerAdjustment | None, Updates]:
        self._event("CreateContainer")
        pod_info, info = convert.pod_info(pod), convert.container_info(ctr)
        if self.kubelet_refresh is not None and info.resources.cpuset_cpus:  # the kubelet's?
            await self.kubelet_refresh()
        if self.hints is not None:  # before the lock: other events go on while it looks
            refs = convert.device_refs(ctr)
            found = await self.hints.find(pod_info, info, refs, self.policy.options)
            if found:
                info = replace(info, hints=found)
        self.admission.report_keys(pod_info, info)
        async with self._lock:
            if self._placed(info.id):  # a retried creation: place it afresh
                self.lifecycle.release_locked(info.id)
            decision = self.admission.decide(
                "create", pod_info, info, lambda: self.policy.create(pod_info, info)
            )
            if self.verifier is not None:
                self.verifier.track(info.id, ctr.linux.cgroups_path)
            if decision.cold_start is not None:
                self.timers.created(info.id, decision.cold_start.delay_ns)
            if self.timers.held:  # a previous attempt taken over is no longer placed
                gone = [c for c in self.timers.held if not self._placed(c)]
                self.timers.end_holds(gone)
                for c in gone:
                    self.explained.forget(c)
            self._commit()
            in_reply = self.updates.transports.with_riders(self.updates.decided(decision), info.id)
        self.explained.log(decision, "created")
        env = {}
        if self.settings.expose_env:
            env = convert.exposure(decision, self.settings.env_prefix)
        adjust = convert.adjustment(decision, env)
        if self.files is not None:
            self.files.updated(decision.updates)
            if self.settings.expose_file:
                mount = await self.files.create(decision, self.settings.file_dir)
                if mount is not None:
                    adjust.mounts.append(mount)
        return adjust, convert.updates(in_reply, ignore_failure=True)

    async def start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._event("StartContainer")
        async with self._lock:
            if self.timers.started(ctr.id):
                self._commit()
        # The runtime starts the task once we answer: not before the shared cgroups let go.
        await self.updates.before_start(ctr.id)

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._event("PostStartContainer")
        self.updates.started(ctr.id)
        if self.verifier is not None and self._placed(ctr.id):
            self.verifier.track(ctr.id, ctr.linux.cgroups_path)
            self._spawn(self._verify([ctr.id], "post_start"))

    async def update_container(
        self,
        pod: api_pb2.PodSandbox,
        ctr: api_pb2.Container,
        resources: api_pb2.LinuxResources,
    ) -> Updates:
        self.metrics.request("UpdateContainer")
        if self.updates.transports.relayed(ctr.id) and _cpusets_only(resources):
            self.metrics.own_repins.inc()
            return _current(self.policy, ctr.id)
        self.updates.event()
        pod_info = convert.pod_info(pod)
        info = convert.container_info(ctr, resources)
        if self.kubelet_refresh is not None and info.resources.cpuset_cpus:  # the kubelet's?
            await self.kubelet_refresh()
        if _cpusets_only(resources) and (pod.uid, ctr.name) in self.policy.options.kubelet_pinned:
            return _kubelet_repin(self.policy, info)
        async with self._lock:
            known = self.policy.container(info.id)
            if known is not None and known[1].hints:  # found at creation; devices do not change
                info = replace(info, hints=known[1].hints)
            decision = self.admission.decide(
                "resize",
                pod_info,
                info,
                lambda: self.policy.resize(pod_info, info, info.resources),
            )
            self._commit()
            in_reply = self.updates.transports.with_riders(self.updates.decided(decision), info.id)
        self.explained.log(decision, "resized")
        if self.files is not None:
            self.files.replaced(decision)
            self.files.updated(u for u in decision.updates if u.container_id != info.id)
        # The runtime takes the last entry for the container being updated as its new resources.
        own = convert.container_update(info.id, decision.placement)
        others = [u for u in in_reply if u.container_id != info.id]
        return [*convert.updates(others, ignore_failure=True), own]

    async def stop_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> Updates:
        self._event("StopContainer")
        if self.settings.restart_hold_s > 0 and await self.lifecycle.hold(
            ctr.id, self.settings.restart_hold_s
        ):
            return convert.updates(
                self.updates.transports.with_riders((), ctr.id), ignore_failure=True
            )
        updates = await self.lifecycle.release(ctr.id, "stopped")
        if not self.updates.paced:
            return convert.updates(
                self.updates.transports.with_riders(updates, ctr.id), ignore_failure=True
            )
        self.updates.defer(updates, "release")
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._event("RemoveContainer")
        # Normally released at stop already; a removal without a stop must not leak resources.
        # Other containers' updates have no reply to ride on here, so they go out separately.
        updates = await self.lifecycle.release(ctr.id, "removed")
        if self.files is not None:
            self.files.removed(ctr.id)
        self.updates.defer(updates, "release")

    # --- reconfiguration, cold start, shutdown -------------------------------------------------

    async def reconfigure(self, options: Options) -> None:
        """Apply new policy options; raises PolicyError (state unchanged) if they cannot apply."""
        await self.lifecycle.reconfigure(options)

    async def shutdown(self) -> bool:
        """Finish the request in flight, disconnect, write the final checkpoint.

        False when the checkpoint on disk is older than the state (its last write failed).
        """
        async with self._lock:
            if self.stub is not None:
                await self.stub.stop()
            self.timers.stop()
            self._commit()
        if self.verifier is not None:
            await self.verifier.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.hints is not None:
            await self.hints.close()
        await self.updates.close()
        if self.files is not None:
            await self.files.flush()
        await self.flush()
        self.state.close()
        self.metrics.registered.set(0)
        if self.checkpoint is not None and self.checkpoint.failing:
            _log.error(
                "shut down, but the final checkpoint write failed: the state file is older "
                "than the placements; the next start adopts them from the runtime",
                checkpoint=str(self.checkpoint.path),
            )
            return False
        _log.info("shut down", checkpoint=str(self.checkpoint.path) if self.checkpoint else None)
        return True

    async def settle(self) -> None:
        """Wait until the background updates started so far are done."""
        self.updates.catch_up()
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # --- internals ----------------------------------------------------------------------------

    def _placed(self, container_id: str) -> bool:
        return self.policy.container(container_id) is not None

    def _commit(self) -> None:
        """Note a change of state: checkpointed soon, off the request path."""
        self.state.changed()
        if self.on_change is not None:
            self.on_change()

    async def flush(self) -> None:
        """Write the latest state now and wait until it is on disk (or its write has failed)."""
        await self.state.flush()

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _settled_placements(self, ids: Iterable[str] | None) -> dict[str, Placement]:
        """Placements to check cgroups against (read under the lock): not those whose re-pin
        is still on its way."""
        async with self._lock:
            found = self.policy.placements(ids)
        busy = self.updates.schedule.busy
        return {cid: p for cid, p in found.items() if not busy(cid)}

    async def _verify(self, ids: Sequence[str] | None, why: str) -> None:
        assert self.verifier is not None
        try:
            await self.verifier.check(ids, why)
        except Exception as exc:  # checking is best effort; the periodic check tries again
            _log.error("cgroup check failed", check=why, error=str(exc))
