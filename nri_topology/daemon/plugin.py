"""The policy-backed NRI plugin: runtime events in, placements out, state kept across restarts.

Rules it keeps (docs/protocol.md §6):
* every policy call runs under one lock, so decisions are strictly serialized;
* changes to other containers (re-pins) follow the reply where a safe transport exists:
  `schedule.Schedule` sends them in small paced batches from a task of its own, never awaited by
  a handler and never while holding the lock, because the runtime holds its own lock while it
  waits for our reply (docs/architecture.md, "Update schedule"). The transport, chosen at
  Configure: the runtime's CRI (UpdateContainerResources, cpusets only, as the kubelet's CPU
  manager re-pins; the runtime relays it to us as an UpdateContainer, which we answer with the
  container's current cpusets), else NRI UpdateContainers where the runtime's NRI serves them
  apart from its events (v0.12.1 and later), else none: re-pins travel in the reply of the event
  that caused them, and changes with no event to ride on (cold-start expiry, drift repair, a pod
  resized in place) wait for the next reply that can carry updates. With `updates.in_reply`
  re-pins travel in the reply whatever the transport. Updates of other containers never fail the
  event's own container (`ignore_failure`);
* placements left when a pod's sandbox stops or is removed, and those of containers missing from
  the runtime's Synchronize, are released and counted;
* after every change the state is checkpointed, off the request path: `CheckpointWriter` takes
  the snapshot under the lock once the policy is idle (at most about a second later) and writes
  it; shutdown writes the latest state. A crash in between loses no placement, because the
  runtime's Synchronize reports every container's cpuset and the policy adopts it;
* a request the policy refuses fails with the policy's message; the state stays as it was;
* decided == applied: after a container starts and periodically, `verify.Verifier` reads its
  cgroup and sends the placement again where the cgroup differs (an update that reached the
  container between creation and start can be lost by the runtime);
* annotations the policy ignored or cut back are logged as warnings and counted, unknown keys of
  our annotation domains once per pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from nri_topology.daemon import convert, logs
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.explain import Explained, Explanations
from nri_topology.daemon.metrics import Metrics, StateView, from_policy
from nri_topology.daemon.timers import Timers
from nri_topology.daemon.updates.path import UpdatePath
from nri_topology.daemon.updates.schedule import PACED, Pacing
from nri_topology.daemon.updates.transport import Transports
from nri_topology.daemon.verify import Verifier
from nri_topology.daemon.writer import CheckpointWriter, Snapshot
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin, Refused, Stub, Updates
from nri_topology.policy.checkpoint.state import ENTRIES
from nri_topology.policy.intake import podlevel
from nri_topology.policy.intake.annotations import in_domains, key_problems
from nri_topology.policy.options import Options
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import (
    AnnotationError,
    ContainerInfo,
    Decision,
    Placement,
    PodInfo,
    PolicyError,
    Update,
    qualified_name,
)
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.daemon.hints import HintFinder
    from nri_topology.daemon.placement_file import PlacementFiles

_log = structlog.get_logger("nri_topology.daemon")
_KEYS_LISTED = 8  # unknown annotation keys named in one warning

_SHOWN = 10  # per-container details in one warning line, at most
# A CRI that does not answer at Configure (a runtime starts the plugins it launches before its
# CRI serves) is asked again this often, this many times.
_CRI_ASK_EVERY_S = 2.0
_CRI_ASKS = 60

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


# Containers in these states hold resources; stopped and unknown ones do not.
_LIVE_STATES = (
    api_pb2.CONTAINER_CREATED,
    api_pb2.CONTAINER_RUNNING,
    api_pb2.CONTAINER_PAUSED,
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Daemon behaviour that is not placement policy."""

    expose_env: bool = True  # give new containers environment variables naming their placement
    env_prefix: str = convert.ENV_PREFIX
    cgroup_root: Path | None = None  # where containers' cgroups are read; None: never checked
    verify_interval_s: float = 10.0  # periodic cgroup check; 0: only after a container starts
    expose_file: bool = False  # mount a placement file, kept current, into new containers
    file_dir: str = "/.nri-topology"  # where that file's directory appears in the container
    # How long a stopped container's exclusive CPUs wait for its next attempt; 0: not at all.
    restart_hold_s: float = 330.0
    pacing: Pacing | None = PACED  # re-pins after the reply; None: in the reply
    # Pace re-pins even where the runtime's NRI adaptation may deadlock on UpdateContainers
    # (older than v0.12.1) and no CRI answers; otherwise they travel in the reply there.
    pace_old_runtimes: bool = False
    transport: str = "auto"  # updates apart from a reply: auto, cri, nri (`Transport`)
    cri_socket: str | None = None  # None: the runtime's default, by its name in Configure
    # Paced re-pins are written into the containers' cgroups at once, ahead of the runtime.
    cgroup_first: bool = True


class TopologyPlugin(Plugin):
    """Wires NRI events to the policy; see the module docstring for the rules."""

    def __init__(
        self,
        policy: PolicyPort,
        *,
        checkpoint: Checkpoint | None = None,
        metrics: Metrics | None = None,
        settings: Settings = Settings(),
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
        self.settings = settings
        self._runtime_config = runtime_config
        self._lock = asyncio.Lock()
        # Which containers exist, and their pods, is the policy's to know (`policy.container`);
        # the daemon keeps only what the policy cannot: warnings given, decisions for `explain`
        # (`explained`), cold-start timers and holds (`timers`), and (in `verifier`) the cgroup
        # paths the runtime reported.
        self._keys_reported: dict[str, set[str]] = {}  # pod id -> unknown keys warned about
        self.timers = Timers(
            wall_clock_ns,
            lambda cid: self._spawn(self._cold_start_expired(cid)),
            lambda cid: self._spawn(self._hold_expired(cid)),
        )
        self.explained = Explanations(policy, wall_clock_ns)
        self._saved: dict[str, Any] | None = None
        self._loaded = False
        self._background: set[asyncio.Task[None]] = set()
        self._writer: CheckpointWriter | None = None
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
        if checkpoint is not None:
            self._writer = CheckpointWriter(
                checkpoint,
                self._snapshot,
                self._lock,
                lambda: self.metrics.error("checkpoint_write"),
                entries_at=("policy", ENTRIES),
                retry_s=checkpoint_retry_s,
            )

    # --- views for metrics, health and explain ------------------------------------------------

    @property
    def stub(self) -> Stub | None:
        """The runtime connection; re-pins through NRI go out on it."""
        return self.updates.stub

    @stub.setter
    def stub(self, stub: Stub | None) -> None:
        self.updates.stub = stub

    # the update path's state, as status and tests read it
    @property
    def transport(self) -> str:
        return self.updates.transport

    @property
    def paced(self) -> bool:
        return self.updates.paced

    def writes_cgroups(self) -> bool:
        return self.updates.writes_cgroups()

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
        self.updates.event(_clock())

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
            infos = await self._with_device_hints(pod_infos, live, infos)
        async with self._lock:
            saved = self._saved_state()
            # Placed by this process before a reconnection, and no longer reported: their
            # removal was missed while the connection was down.
            missing = set(self.policy.assignments()).difference(c.id for c in live)
            started = time.perf_counter()
            try:
                report = self.policy.restore(pod_infos, infos, saved.get("policy"))
            except Exception as exc:
                if not saved:
                    raise
                # A checkpoint this policy cannot use (from another version, or edited with a
                # fresh checksum) must not take the plugin down: rebuild from the runtime alone.
                self.metrics.error("restore")
                _log.error(
                    "restoring state failed, rebuilding without the checkpoint", error=str(exc)
                )
                report = self.policy.restore(pod_infos, infos, None)
            self._observe("restore", started)
            self.explained.synchronized()
            self._keys_reported = {}
            created = {c.id for c in live if c.state == api_pb2.CONTAINER_CREATED}
            self.timers.restore(saved.get("cold_starts"), report.cold_starts, created)
            self.timers.end_holds(list(self.timers.held))  # the policy holds none after a restore
            held = self.policy.assignments().items()  # as the reply sets them
            # the reply sets every container's placement anew
            self.updates.reset((cid, Placement(a.cpus, a.mems)) for cid, a in held)
            self._commit()
            placed = self._placement_docs() if self.files is not None else {}
        if self.files is not None:
            await self.files.adopt(placed)
        for cid, decision in report.decisions.items():  # the re-placed ones only
            self.explained.log(decision, "re-placed", report.replaced.get(cid, ""))
        self.explained.adopted(report.adopted)
        if report.dropped:
            # A checkpoint that contradicts the runtime (edited, forged, or from another node)
            # is not believed for those containers; the runtime's cpusets are.
            self.metrics.error("checkpoint_implausible", len(report.dropped))
            shown = dict(sorted(report.dropped.items())[:_SHOWN])
            _log.warning(
                "checkpoint entries contradict the runtime, taking the runtime's view",
                dropped=len(report.dropped),
                entries=shown,
            )
        if missing:
            self.metrics.orphans.labels("not_reported").inc(len(missing))
            _log.warning(
                "containers no longer reported by the runtime, released",
                released=len(missing),
                containers=sorted(missing)[:_SHOWN],
            )
        failed = dict(report.failed)
        if failed:
            self.metrics.error("restore_failed", len(failed))
            for cid, why in failed.items():
                _log.warning("not placed, pinning left as is", container_id=cid, reason=why)
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
            failed=len(failed),
            **logs.summarize_updates(report.updates),
        )
        pods_by_id = {p.id: p for p in pod_infos}
        for info in infos:
            pod = pods_by_id.get(info.pod_id)
            if pod is not None:
                self._report_keys(pod, info)
        self.metrics.registered.set(1)
        return convert.updates(report.updates, ignore_failure=True)

    async def run_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._event("RunPodSandbox")
        if self.hints is not None:
            self.hints.pod_started(convert.pod_info(pod))

    async def stop_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._event("StopPodSandbox")
        await self._release_pod(pod.id, "pod_stopped")

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
        pod_info = convert.pod_info(pod, resources if resources.ByteSize() else None)
        async with self._lock:
            infos = [
                known[1]
                for cid in self.policy.pod_containers(pod_info.id)
                if (known := self.policy.container(cid)) is not None
            ]
            holder = podlevel.holder(pod_info, infos)
            if holder is None:
                return  # no container of the pod takes its amounts from the pod's
            info = next(i for i in infos if i.id == holder)
            decision = self._decide(
                "resize", pod_info, info, lambda: self.policy.resize(pod_info, info, info.resources)
            )
            self._commit()
        self.explained.log(decision, "resized", "pod resources changed")
        if self.files is not None:
            self.files.replaced(decision)
            self.files.updated(u for u in decision.updates if u.container_id != holder)
        updates = {u.container_id: u for u in decision.updates}
        updates[holder] = Update(holder, decision.placement)
        self.updates.defer([updates[cid] for cid in sorted(updates)], "pod resize")

    async def remove_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._event("RemovePodSandbox")
        if self.hints is not None:
            self.hints.pod_removed(pod.id)
        self._keys_reported.pop(pod.id, None)
        await self._release_pod(pod.id, "pod_removed")

    async def _release_pod(self, pod_id: str, why: str) -> None:
        """Release what the pod's containers still hold: a container whose creation the runtime
        abandoned may never be stopped or removed on its own (CRI-O tells plugins late)."""
        async with self._lock:
            held, left = [], []
            for cid in self.policy.pod_containers(pod_id):
                (held if cid in self.timers.held else left).append(cid)
            if not held and not left:
                return
            updates: list[Update] = []
            for cid in (*held, *left):
                updates += self._release_locked(cid)
            self._commit()
        if held:  # stopped containers kept for a next attempt the pod will not start
            _log.info("held CPUs released", pod_id=pod_id, why=why, containers=held)
        if left:
            self.metrics.orphans.labels(why).inc(len(left))
            _log.warning(
                "placements left by a pod released", pod_id=pod_id, why=why, containers=left
            )
        if self.files is not None:
            self.files.updated(updates)
            for cid in (*held, *left):
                self.files.removed(cid)
        self.updates.defer(updates, why)

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
        self._report_keys(pod_info, info)
        async with self._lock:
            if self._placed(info.id):  # a retried creation: place it afresh
                self._release_locked(info.id)
            decision = self._decide(
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
            return self._own_repin(ctr.id)
        self.updates.event(_clock())
        pod_info = convert.pod_info(pod)
        info = convert.container_info(ctr, resources)
        if self.kubelet_refresh is not None and info.resources.cpuset_cpus:  # the kubelet's?
            await self.kubelet_refresh()
        if _cpusets_only(resources) and (pod.uid, ctr.name) in self.policy.options.kubelet_pinned:
            return self._kubelet_repin(info)
        async with self._lock:
            known = self.policy.container(info.id)
            if known is not None and known[1].hints:  # found at creation; devices do not change
                info = replace(info, hints=known[1].hints)
            decision = self._decide(
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

    def _kubelet_repin(self, info: ContainerInfo) -> Updates:
        """The kubelet re-pins a container its static CPU manager pinned (after it restarted, or
        from its reconcile loop): the cpuset is the kubelet's to give, the memory nodes stay."""
        now = self.policy.placements([info.id]).get(info.id)
        cpus = cpuset.parse(info.resources.cpuset_cpus)
        return [convert.container_update(info.id, Placement(cpus, now.mems if now else None))]

    def _own_repin(self, container_id: str) -> Updates:
        """The runtime relays our own CRI re-pin: answer with the container's current cpusets
        (newer than those sent, when the policy moved it since), nothing else. No lock and no
        wait: the runtime holds its NRI lock until we answer, and our CRI call waits for it."""
        self.metrics.own_repins.inc()
        now = self.policy.placements([container_id]).get(container_id)
        if now is None:  # released meanwhile: the runtime applies what was sent
            return []
        return [convert.container_update(container_id, Placement(now.cpus, now.mems))]

    async def stop_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> Updates:
        self._event("StopContainer")
        if self.settings.restart_hold_s > 0 and await self._hold(ctr.id):
            return convert.updates(
                self.updates.transports.with_riders((), ctr.id), ignore_failure=True
            )
        updates = await self._release(ctr.id, "stopped")
        if not self.paced:
            return convert.updates(
                self.updates.transports.with_riders(updates, ctr.id), ignore_failure=True
            )
        self.updates.defer(updates, "release")
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._event("RemoveContainer")
        # Normally released at stop already; a removal without a stop must not leak resources.
        # Other containers' updates have no reply to ride on here, so they go out separately.
        updates = await self._release(ctr.id, "removed")
        if self.files is not None:
            self.files.removed(ctr.id)
        self.updates.defer(updates, "release")

    # --- reconfiguration, cold start, shutdown -------------------------------------------------

    async def reconfigure(self, options: Options) -> None:
        """Apply new policy options; raises PolicyError (state unchanged) if they cannot apply."""
        async with self._lock:
            started = time.perf_counter()
            report = self.policy.reconfigure(options)
            self._observe("reconfigure", started)
            self.timers.reconfigured(report.cold_starts)
            self._commit()
        for cid, decision in report.decisions.items():
            self.explained.log(decision, "re-placed", report.replaced.get(cid, ""))
        updates = report.updates
        _log.info(
            "policy options applied",
            adopted=len(report.adopted),
            replaced=len(report.replaced),
            **logs.summarize_updates(updates),
        )
        if self.files is not None:
            for decision in report.decisions.values():
                self.files.replaced(decision)
            self.files.updated(updates)
        self.updates.defer(updates, "reconfigure")

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
        if self._writer is not None:
            self._writer.close()
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
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # --- internals ----------------------------------------------------------------------------

    def _saved_state(self) -> dict[str, Any]:
        """The checkpoint on the first Synchronize, afterwards our own newer in-memory state."""
        if not self._loaded:
            self._loaded = True
            if self.checkpoint is not None:
                self._saved = self.checkpoint.load().body
        else:
            self._saved = self._body()
        return self._saved or {}

    async def _with_device_hints(
        self,
        pods: Sequence[PodInfo],
        live: Sequence[api_pb2.Container],
        infos: list[ContainerInfo],
    ) -> list[ContainerInfo]:
        assert self.hints is not None
        by_id = {p.id: p for p in pods}
        out = []
        for ctr, info in zip(live, infos, strict=True):
            refs = convert.device_refs(ctr)
            pod = by_id.get(info.pod_id)
            if refs and pod is not None:
                found = await self.hints.find(pod, info, refs, self.policy.options, kubelet=False)
                info = replace(info, hints=found) if found else info
            out.append(info)
        return out

    def _placement_docs(self) -> dict[str, dict[str, Any]]:
        from nri_topology.daemon.placement_file import assigned

        return {cid: assigned(a) for cid, a in self.policy.assignments().items()}

    def _body(self) -> dict[str, Any]:
        return {"policy": self.policy.snapshot(), "cold_starts": self.timers.to_json()}

    def _snapshot(self, whole: bool) -> Snapshot:
        """The checkpoint body for the writer: the policy's entries changed since the last one,
        or all of them (when `whole`, or the policy has no list of changes)."""
        changes = self.policy.changes(everything=whole)
        policy = self.policy.snapshot(entries=False)
        body = {"policy": policy, "cold_starts": self.timers.to_json()}
        if changes.complete:
            policy[ENTRIES] = changes.entries
            return Snapshot(body)
        return Snapshot(body, changes.entries)

    def _placed(self, container_id: str) -> bool:
        return self.policy.container(container_id) is not None

    def _commit(self) -> None:
        """Note a change of state; the writer checkpoints it soon, off the request path."""
        if self._writer is not None:
            self._writer.changed()
        if self.on_change is not None:
            self.on_change()

    async def flush(self) -> None:
        """Write the latest state now and wait until it is on disk (or its write has failed)."""
        if self._writer is not None:
            await self._writer.flush()

    def _observe(self, operation: str, started: float) -> None:
        self.metrics.observe(operation, time.perf_counter() - started)

    def _decide(
        self, operation: str, pod: PodInfo, info: ContainerInfo, call: Callable[[], Decision]
    ) -> Decision:
        started = time.perf_counter()
        try:
            decision = call()
        except PolicyError as exc:
            self._observe(operation, started)
            self.metrics.error("policy")
            if isinstance(exc, AnnotationError):
                self.metrics.annotation_refusals.labels(exc.limit or "invalid").inc()
            who = qualified_name(pod.namespace, pod.name, info.name)
            _log.warning("placement refused", container=who, operation=operation, reason=str(exc))
            # The policy's message names the container and says why; the runtime shows it as is.
            raise Refused(f"nri-topology: {exc}") from exc
        self._observe(operation, started)
        for warning in decision.warnings:
            self.metrics.annotation_warnings.labels(warning.kind).inc()
            _log.warning(
                "annotation ignored",
                container=qualified_name(pod.namespace, pod.name, info.name),
                kind=warning.kind,
                reason=warning.message,
            )
        if decision.degraded or decision.moved:
            self._count_admission(operation, pod, info, decision)
        if decision.hints_missed:
            self.metrics.hints_missed.inc()
        return decision

    def _count_admission(
        self, operation: str, pod: PodInfo, info: ContainerInfo, decision: Decision
    ) -> None:
        """Degraded placements warn and count; moves of other containers count."""
        for degradation in decision.degraded:
            self.metrics.degraded.labels(str(degradation)).inc()
        if decision.moved:
            self.metrics.moves.inc(len(decision.moved))
        if decision.degraded:
            _log.warning(
                "placement degraded",
                container=qualified_name(pod.namespace, pod.name, info.name),
                operation=operation,
                degraded=[str(d) for d in decision.degraded],
                reason=decision.reason,
            )

    def _report_keys(self, pod: PodInfo, info: ContainerInfo) -> None:
        """Warn once per pod about keys of our domains that the policy does not act on."""
        if not pod.annotations and not info.annotations:
            return
        reported = self._keys_reported.get(pod.id, ())
        keys = [
            k for k in (*pod.annotations, *info.annotations) if in_domains(k) and k not in reported
        ]
        if not keys:
            return  # nothing new; most pods have none, and keep no empty set
        self._keys_reported.setdefault(pod.id, set()).update(keys)
        problems = key_problems(keys)
        if not problems:
            return
        for problem in problems:
            self.metrics.annotation_warnings.labels(f"{problem.kind}_key").inc()
        listed = [p.message for p in problems[:_KEYS_LISTED]]
        more = {"more": len(problems) - len(listed)} if len(problems) > len(listed) else {}
        _log.warning(
            "annotation keys ignored", pod=f"{pod.namespace}/{pod.name}", keys=listed, **more
        )

    async def _release(self, container_id: str, why: str) -> tuple[Update, ...]:
        async with self._lock:
            if not self._placed(container_id):
                return ()
            updates = self._release_locked(container_id)
            self._commit()
        if logs.enabled(logging.INFO):  # binding a filtered line's logger costs more than asking
            summary = logs.summarize_updates(updates)
            _log.info("released", container_id=container_id, why=why, **summary)
        if self.files is not None:
            self.files.updated(updates)
        return updates

    def _release_locked(self, container_id: str) -> tuple[Update, ...]:
        started = time.perf_counter()
        try:
            updates = self.policy.release(container_id)
        except PolicyError as exc:  # not known to the policy: nothing to give back
            _log.warning("release refused", container_id=container_id, reason=str(exc))
            updates = ()
        self._observe("release", started)
        self.explained.forget(container_id)
        self.updates.forget(container_id)
        self.timers.forget(container_id)
        if self.verifier is not None:
            self.verifier.forget(container_id)
        return updates

    async def _hold(self, container_id: str) -> bool:
        """Keep a stopped container's CPUs for its next attempt, for `restart_hold_s` at most."""
        async with self._lock:
            if not self.policy.hold(container_id):
                return False
            if self.verifier is not None:
                self.verifier.forget(container_id)
            self.timers.hold(container_id, self.settings.restart_hold_s)
        _log.info("stopped, CPUs held for its next attempt", container_id=container_id)
        return True

    async def _hold_expired(self, container_id: str) -> None:
        self.updates.defer(await self._release(container_id, "no next attempt came"), "release")

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _cold_start_expired(self, container_id: str) -> None:
        async with self._lock:
            if not self.timers.cold_start_due(container_id):
                return  # released meanwhile
            started = time.perf_counter()
            try:
                updates = self.policy.cold_start_done(container_id)
            except PolicyError as exc:
                self.metrics.error("cold_start")
                _log.error("cold start widening failed", container_id=container_id, error=str(exc))
                self._commit()
                return
            self._observe("cold_start", started)
            self._commit()
        summary = logs.summarize_updates(updates)
        _log.info("cold start over, memory widened", container_id=container_id, **summary)
        if self.files is not None:
            self.files.updated(updates)
        if updates:  # the container's own memory, not a re-pin of others: at once
            await self.updates.send(updates, "cold_start")

    async def _placements(self, ids: Iterable[str] | None) -> dict[str, Placement]:
        """Current placements (cpus, mems) of `ids` (all when None), read under the lock."""
        async with self._lock:
            return self.policy.placements(ids)

    async def _settled_placements(self, ids: Iterable[str] | None) -> dict[str, Placement]:
        """Placements to check cgroups against: not those whose re-pin is still on its way."""
        found = await self._placements(ids)
        busy = self.updates.schedule.busy
        return {cid: p for cid, p in found.items() if not busy(cid)}

    async def _verify(self, ids: Sequence[str] | None, why: str) -> None:
        assert self.verifier is not None
        try:
            await self.verifier.check(ids, why)
        except Exception as exc:  # checking is best effort; the periodic check tries again
            _log.error("cgroup check failed", check=why, error=str(exc))


def _clock() -> float:
    """The update schedule's clock: the event loop's, which its timers run on."""
    return asyncio.get_running_loop().time()
