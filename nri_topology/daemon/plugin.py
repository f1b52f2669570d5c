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
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from nri_topology.cri.client import CriClient, CriError, default_socket
from nri_topology.daemon import convert, logs
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.drift import compare
from nri_topology.daemon.metrics import Metrics, StateView, from_policy
from nri_topology.daemon.schedule import PACED, Closed, Pacing, Schedule
from nri_topology.daemon.verify import Verifier, Written
from nri_topology.daemon.writer import CheckpointWriter, Snapshot
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import NotConnectedError, Plugin, Refused, Stub, StubError, Updates
from nri_topology.nri.versions import runtime_serves_updates_apart
from nri_topology.policy.checkpoint.state import ENTRIES
from nri_topology.policy.intake import podlevel
from nri_topology.policy.intake.annotations import in_domains, key_problems
from nri_topology.policy.options import Options
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import (
    AnnotationError,
    ColdStart,
    ContainerInfo,
    Decision,
    Placement,
    PodInfo,
    PolicyError,
    PoolScore,
    Update,
    Verdict,
    qualified_name,
)
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.daemon.hints import HintFinder
    from nri_topology.daemon.placement_file import PlacementFiles

_log = structlog.get_logger("nri_topology.daemon")
_KEYS_LISTED = 8  # unknown annotation keys named in one warning
_TRACE_PARTS_MAX = 8192  # distinct sort keys (and verdicts) shared among kept traces

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
class Explained:
    """Why a container holds what it holds: the decision that placed it, and when."""

    what: str  # created, resized, adopted (kept as found at a restart), re-placed
    at_ns: int  # wall clock
    decision: Decision
    window_s: float | None = None  # exclusivity window of its grant, once closed


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


class Transport:
    """How updates travel apart from a reply; chosen at Configure."""

    CRI = "cri"  # UpdateContainerResources on the runtime's CRI socket
    NRI = "nri"  # NRI UpdateContainers
    REPLY = "reply"  # none safe: they wait for the next reply that can carry them


def _is_ns(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mapping(value: Any) -> Mapping[str, Any]:
    """A checkpoint part that should be a mapping; anything else counts as empty."""
    return value if isinstance(value, Mapping) else {}


class _Timers:
    """Cold-start deadlines (wall clock, so they survive a restart) and their asyncio timers."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}  # container -> delay in ns, timer not started yet
        self.deadlines: dict[str, int] = {}  # container -> wall-clock deadline in ns
        self.handles: dict[str, asyncio.TimerHandle] = {}

    def cancel(self, container_id: str) -> None:
        self.pending.pop(container_id, None)
        self.deadlines.pop(container_id, None)
        handle = self.handles.pop(container_id, None)
        if handle is not None:
            handle.cancel()

    def to_json(self) -> dict[str, Any]:
        return {"pending_ns": dict(self.pending), "deadline_ns": dict(self.deadlines)}


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
        self.stub: Stub | None = None
        self._runtime_config = runtime_config
        self._now_ns = wall_clock_ns
        self._lock = asyncio.Lock()
        # Which containers exist, and their pods, is the policy's to know (`policy.container`);
        # the daemon keeps only what the policy cannot: warnings given, decisions for `explain`,
        # timers, and (in `verifier`) the cgroup paths the runtime reported.
        self._keys_reported: dict[str, set[str]] = {}  # pod id -> unknown keys warned about
        self._timers = _Timers()
        # Stopped containers whose CPUs the policy holds for their next attempt: their pod and
        # the timer that ends the hold (`policy.hold`).
        self._holds: dict[str, tuple[str, asyncio.TimerHandle]] = {}
        # The last decision for each placed container, for `nri-topology explain`.
        self.decisions: dict[str, Explained] = {}
        # Sort keys and verdicts of the kept traces, by value, so that equal ones are kept once:
        # a fill of 1000 containers made 7000 keys, 2621 of them distinct, and few verdicts.
        self._keys: dict[tuple[object, ...], tuple[object, ...]] = {}
        self._verdicts: dict[Verdict, Verdict] = {}
        self._saved: dict[str, Any] | None = None
        self._loaded = False
        self._background: set[asyncio.Task[None]] = set()
        self.schedule = Schedule(settings.pacing or PACED)
        self.paced = False  # re-pins after the reply: decided at Configure, for this runtime
        self.transport = Transport.REPLY  # decided at Configure
        self.cri: CriClient | None = None
        # Re-pins sent through the CRI whose answer is awaited, by container: the runtime relays
        # each to us as an UpdateContainer (`_own_repin`).
        self._awaiting: dict[str, int] = {}
        # Updates with no safe transport, waiting for the next reply that can carry them.
        self._riding: dict[str, Placement] = {}
        self._cri_asking: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._windows: dict[str, float] = {}  # closed before their decision was kept
        self._cgroups_read_only = False  # found at the first write: re-pins wait for the runtime
        self._writer: CheckpointWriter | None = None
        self.verifier: Verifier | None = None
        if settings.cgroup_root is not None:
            self.verifier = Verifier(
                settings.cgroup_root,
                self._settled_placements,
                self._send,
                lambda check: self.metrics.cgroup_drift.labels(check).inc(),
                settings.verify_interval_s,
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

    # --- views for metrics and health ----------------------------------------------------------

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
        self.schedule.event(self._clock())

    async def configure(self, req: api_pb2.ConfigureRequest) -> int | None:
        self.metrics.request("Configure")
        if req.config.strip() and self._runtime_config is not None:
            await self._runtime_config(req.config)
        await self._choose_transport(req)
        return None

    async def _choose_transport(self, req: api_pb2.ConfigureRequest) -> None:
        """The transport for updates apart from a reply, and whether re-pins are paced."""
        s = self.settings
        runtime = f"{req.runtime_name} {req.runtime_version}"
        socket = s.cri_socket or default_socket(req.runtime_name)
        safe = runtime_serves_updates_apart(req)
        # Where the NRI serves UpdateContainers apart from its events, auto takes it: each
        # re-pin through the CRI costs the runtime two more relays to its plugins, which on a
        # busy node lengthens the new container's start more than a batch under the NRI lock.
        ask_cri = s.transport == Transport.CRI or (s.transport == "auto" and not safe)
        answered = ""
        if ask_cri and socket is not None:
            if self.cri is None or self.cri.socket != socket:
                if self.cri is not None:
                    await self.cri.close()
                self.cri = CriClient(socket)
            there = Path(socket).exists()
            if not there:
                _log.warning(
                    "the runtime's CRI does not answer: no socket there (updates.cri_socket)",
                    cri_socket=socket,
                )
            if s.transport == Transport.CRI:
                answered = "(not asked)"
            elif there:
                try:
                    answered = await self.cri.version()
                except CriError as exc:
                    _log.warning(
                        "the runtime's CRI does not answer", error=str(exc), cri_socket=socket
                    )
        if answered:
            transport = Transport.CRI
        elif s.transport == Transport.CRI:
            transport = Transport.CRI  # configured, with no socket known: cannot be
        elif safe or (s.pace_old_runtimes and s.pacing is not None):
            transport = Transport.NRI
        else:
            transport = Transport.REPLY
        if transport == Transport.CRI and socket is None:
            _log.error(
                "updates.transport is cri, but the CRI socket of this runtime is not known: "
                "set updates.cri_socket; updates wait for replies meanwhile",
                runtime=runtime,
            )
            transport = Transport.REPLY
        self.transport = transport
        self.paced = s.pacing is not None and transport != Transport.REPLY
        self.metrics.transport(transport)
        if self._cri_asking is not None:
            self._cri_asking.cancel()
            self._cri_asking = None
        if s.transport == "auto" and self.cri is not None and not answered and not safe:
            self._cri_asking = asyncio.ensure_future(self._ask_cri_later())
        if transport == Transport.NRI and not safe:
            _log.warning(
                "the runtime's NRI adaptation may deadlock on UpdateContainers (older than "
                "v0.12.1) and its CRI does not answer: pacing re-pins through NRI all the same, "
                "as configured",
                runtime=runtime,
                nri_version=req.NRI_version or None,
            )
        elif transport == Transport.REPLY:
            _log.warning(
                "no safe transport for updates apart from a reply (NRI older than v0.12.1, and "
                "no CRI socket answers): re-pins travel in the replies, other updates wait for "
                "the next one",
                runtime=runtime,
                nri_version=req.NRI_version or None,
                cri_socket=socket,
            )
        _log.info(
            "updates apart from a reply",
            transport=transport,
            paced=self.paced,
            runtime=runtime,
            cri_socket=socket if transport == Transport.CRI else None,
            cri=answered or None,
        )

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
            self.decisions = {c: e for c, e in self.decisions.items() if self._placed(c)}
            self._keys_reported = {}
            created = {c.id for c in live if c.state == api_pb2.CONTAINER_CREATED}
            self._restore_timers(_mapping(saved.get("cold_starts")), report.cold_starts, created)
            self._end_holds(list(self._holds))  # the policy holds nothing after a restore
            held = self.policy.assignments().items()  # as the reply sets them
            self.schedule.reset((cid, Placement(a.cpus, a.mems)) for cid, a in held)
            self._riding.clear()  # the reply sets every container's placement anew
            self._windows.clear()
            self._commit()
            placed = self._placement_docs() if self.files is not None else {}
        if self.files is not None:
            await self.files.adopt(placed)
        for cid, decision in report.decisions.items():  # the re-placed ones only
            self._log_decision(decision, "re-placed", report.replaced.get(cid, ""))
        self._explain_adopted(report.adopted)
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
            self.verifier.reset({c.id: c.linux.cgroups_path for c in live})
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
        self._log_decision(decision, "resized", "pod resources changed")
        if self.files is not None:
            self.files.replaced(decision)
            self.files.updated(u for u in decision.updates if u.container_id != holder)
        updates = {u.container_id: u for u in decision.updates}
        updates[holder] = Update(holder, decision.placement)
        self._defer([updates[cid] for cid in sorted(updates)], "pod resize")

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
                (held if cid in self._holds else left).append(cid)
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
        self._defer(updates, why)

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
                self._timers.pending[info.id] = decision.cold_start.delay_ns
            if self._holds:  # a previous attempt taken over is no longer placed
                gone = [c for c in self._holds if not self._placed(c)]
                self._end_holds(gone)
                for c in gone:
                    self.decisions.pop(c, None)
            self._commit()
            in_reply = self._with_riders(self._schedule_decision(decision), info.id)
        self._log_decision(decision, "created")
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
            delay = self._timers.pending.pop(ctr.id, None)
            if delay is None:
                return
            self._timers.deadlines[ctr.id] = self._now_ns() + delay
            self._arm(ctr.id, delay / 1e9)
            self._commit()

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._event("PostStartContainer")
        if self.schedule.started(ctr.id):
            self._wake()
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
        if ctr.id in self._awaiting and _cpusets_only(resources):
            return self._own_repin(ctr.id)
        self.schedule.event(self._clock())
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
            in_reply = self._with_riders(self._schedule_decision(decision), info.id)
        self._log_decision(decision, "resized")
        if self.files is not None:
            self.files.replaced(decision)
            self.files.updated(u for u in decision.updates if u.container_id != info.id)
        # The runtime takes the last entry for the container being updated as its new resources.
        own = convert.container_update(info.id, decision.placement)
        others = [u for u in in_reply if u.container_id != info.id]
        return [*convert.updates(others, ignore_failure=True), own]

    async def _ask_cri_later(self) -> None:
        """Ask a CRI that did not answer at Configure again for a while; once it answers,
        updates apart from a reply go through it, re-pins after the reply."""
        for _ in range(_CRI_ASKS):
            await asyncio.sleep(_CRI_ASK_EVERY_S)
            cri = self.cri
            if cri is None:
                return
            try:
                answered = await cri.version()
            except CriError:
                continue
            async with self._lock:
                if not self.paced:  # replies applied everything but what waits for one
                    held = self.policy.placements()
                    self.schedule.reset(held.items())
                riding, self._riding = self._riding, {}
                self.transport = Transport.CRI
                self.paced = self.settings.pacing is not None
            self.metrics.transport(Transport.CRI)
            _log.info(
                "the runtime's CRI answers now: updates apart from a reply go through it",
                cri=answered,
                cri_socket=cri.socket,
                paced=self.paced,
            )
            self._send_later([Update(cid, p) for cid, p in riding.items()], "cri_ready")
            return

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
        if self.settings.restart_hold_s > 0 and await self._hold(pod.id, ctr.id):
            return convert.updates(self._with_riders((), ctr.id), ignore_failure=True)
        updates = await self._release(ctr.id, "stopped")
        if not self.paced:
            return convert.updates(self._with_riders(updates, ctr.id), ignore_failure=True)
        self._defer(updates, "release")
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._event("RemoveContainer")
        # Normally released at stop already; a removal without a stop must not leak resources.
        # Other containers' updates have no reply to ride on here, so they go out separately.
        updates = await self._release(ctr.id, "removed")
        if self.files is not None:
            self.files.removed(ctr.id)
        self._defer(updates, "release")

    # --- reconfiguration, cold start, shutdown -------------------------------------------------

    async def reconfigure(self, options: Options) -> None:
        """Apply new policy options; raises PolicyError (state unchanged) if they cannot apply."""
        async with self._lock:
            started = time.perf_counter()
            report = self.policy.reconfigure(options)
            self._observe("reconfigure", started)
            timers = self._timers
            self._restore_timers(timers.to_json(), report.cold_starts, set(timers.pending))
            self._commit()
        for cid, decision in report.decisions.items():
            self._log_decision(decision, "re-placed", report.replaced.get(cid, ""))
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
        self._defer(updates, "reconfigure")

    async def shutdown(self) -> bool:
        """Finish the request in flight, disconnect, write the final checkpoint.

        False when the checkpoint on disk is older than the state (its last write failed).
        """
        async with self._lock:
            if self.stub is not None:
                await self.stub.stop()
            # Deadlines stay in the checkpoint; the next run re-arms them.
            for handle in self._timers.handles.values():
                handle.cancel()
            self._timers.handles.clear()
            for _, handle in self._holds.values():
                handle.cancel()
            self._commit()
        if self.verifier is not None:
            await self.verifier.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.hints is not None:
            await self.hints.close()
        if self._cri_asking is not None:
            self._cri_asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cri_asking
        if self.cri is not None:
            await self.cri.close()
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
        return {"policy": self.policy.snapshot(), "cold_starts": self._timers.to_json()}

    def _snapshot(self, whole: bool) -> Snapshot:
        """The checkpoint body for the writer: the policy's entries changed since the last one,
        or all of them (when `whole`, or the policy has no list of changes)."""
        changes = self.policy.changes(everything=whole)
        policy = self.policy.snapshot(entries=False)
        body = {"policy": policy, "cold_starts": self._timers.to_json()}
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
        self.decisions.pop(container_id, None)
        self._riding.pop(container_id, None)
        self._windows.pop(container_id, None)
        self._closed(self.schedule.forget(container_id, self._clock()))
        self._timers.cancel(container_id)
        self._end_holds([container_id])
        if self.verifier is not None:
            self.verifier.forget(container_id)
        return updates

    async def _hold(self, pod_id: str, container_id: str) -> bool:
        """Keep a stopped container's CPUs for its next attempt, for `restart_hold_s` at most."""
        async with self._lock:
            if not self.policy.hold(container_id):
                return False
            self._timers.cancel(container_id)
            if self.verifier is not None:
                self.verifier.forget(container_id)
            self._end_holds([container_id])
            handle = asyncio.get_running_loop().call_later(
                self.settings.restart_hold_s,
                lambda: self._spawn(self._hold_expired(container_id)),
            )
            self._holds[container_id] = (pod_id, handle)
        _log.info("stopped, CPUs held for its next attempt", container_id=container_id)
        return True

    def _end_holds(self, ids: Iterable[str]) -> None:
        """Forget the holds of these containers (released, or taken over by a next attempt)."""
        for cid in ids:
            hold = self._holds.pop(cid, None)
            if hold is not None:
                hold[1].cancel()

    async def _hold_expired(self, container_id: str) -> None:
        self._defer(await self._release(container_id, "no next attempt came"), "release")

    def _restore_timers(
        self, saved: Mapping[str, Any], cold_starts: Mapping[str, ColdStart], created: set[str]
    ) -> None:
        """Keep the cold-start timers of the containers still in cold start.

        A cold start belongs to the container, so a saved deadline is kept whether the container
        was adopted or re-placed; one that passed while the plugin was down fires now. A
        container not started yet (`created`) waits for StartContainer as before. A started one
        without a saved deadline (no checkpoint, or a crash before it was written) gets the full
        duration from now: when it started is not known, and widening too early defeats the
        cold start. Deadlines are wall-clock (they must outlive the process); one further away
        than the full duration (the clock was set back) is cut to it.
        """
        for handle in self._timers.handles.values():
            handle.cancel()
        now = self._now_ns()
        pending = _mapping(saved.get("pending_ns"))
        deadlines = _mapping(saved.get("deadline_ns"))
        self._timers = _Timers()
        for cid, cold in cold_starts.items():
            if cid in created:
                delay = pending.get(cid)
                self._timers.pending[cid] = delay if _is_ns(delay) else cold.delay_ns
                continue
            deadline = deadlines.get(cid)
            if not _is_ns(deadline):
                deadline = now + cold.delay_ns
            deadline = min(deadline, now + cold.delay_ns)
            self._timers.deadlines[cid] = deadline
            self._arm(cid, max(0.0, (deadline - now) / 1e9))

    def _arm(self, container_id: str, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        old = self._timers.handles.pop(container_id, None)
        if old is not None:
            old.cancel()
        self._timers.handles[container_id] = loop.call_later(
            delay_s, lambda: self._spawn(self._cold_start_expired(container_id))
        )

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _cold_start_expired(self, container_id: str) -> None:
        async with self._lock:
            self._timers.handles.pop(container_id, None)
            if self._timers.deadlines.pop(container_id, None) is None:
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
            await self._send(updates, "cold_start")

    async def _placements(self, ids: Iterable[str] | None) -> dict[str, Placement]:
        """Current placements (cpus, mems) of `ids` (all when None), read under the lock."""
        async with self._lock:
            return self.policy.placements(ids)

    async def _settled_placements(self, ids: Iterable[str] | None) -> dict[str, Placement]:
        """Placements to check cgroups against: not those whose re-pin is still on its way."""
        found = await self._placements(ids)
        busy = self.schedule.busy
        return {cid: p for cid, p in found.items() if not busy(cid)}

    async def _verify(self, ids: Sequence[str] | None, why: str) -> None:
        assert self.verifier is not None
        try:
            await self.verifier.check(ids, why)
        except Exception as exc:  # checking is best effort; the periodic check tries again
            _log.error("cgroup check failed", check=why, error=str(exc))

    # --- the update schedule -----------------------------------------------------------------

    @staticmethod
    def _clock() -> float:
        """The schedule's clock: the event loop's, which its timers run on."""
        return asyncio.get_running_loop().time()

    def _schedule_decision(self, decision: Decision) -> tuple[Update, ...]:
        """Hand the decision's re-pins of other containers to the schedule, or, in in-reply
        mode, return them for the reply; open the window of its exclusive CPUs."""
        cid = decision.container_id
        others = tuple(u for u in decision.updates if u.container_id != cid)
        if not self.paced:
            if decision.exclusive:  # applied before the container runs: no window
                self._closed((Closed(cid, 0.0),))
            return others
        now = self._clock()
        sched = self.schedule
        sched.change(others, now)
        sched.holds(cid, decision.placement)
        closed = sched.grant(cid, decision.exclusive, now)
        if closed is not None:
            self._closed((closed,))
        elif decision.exclusive:
            sched.starting(cid, now)
        if others:
            self._write_ahead()
            self._wake()
        return ()

    def _defer(self, updates: Sequence[Update], why: str) -> None:
        """Re-pins with no reply to ride on (or after one): through the schedule, or in in-reply
        mode at once through the transport."""
        if not updates:
            return
        if not self.paced:
            self._send_later(updates, why)
            return
        self.schedule.change(updates, self._clock())
        self._write_ahead()
        self._wake()

    def writes_cgroups(self) -> bool:
        """Whether paced re-pins go into the containers' cgroups ahead of the runtime."""
        return (
            self.paced
            and self.settings.cgroup_first
            and self.verifier is not None
            and not self._cgroups_read_only
        )

    def _write_ahead(self) -> None:
        """Re-pins pending in the schedule go into the containers' cgroups now: the runtime
        applies them later, paced, but no container keeps running on CPUs taken from it."""
        if not self.writes_cgroups():
            return
        batch = self.schedule.to_write()
        if batch:
            self._spawn(self._write(batch))

    async def _write(self, batch: dict[str, Placement]) -> None:
        """Write `batch` (handed out by the schedule) and tell the schedule what is written."""
        assert self.verifier is not None
        try:
            results = await self.verifier.write(batch)
        except Exception as exc:  # the schedule must hear back, or these wait forever
            _log.error("writing cgroups failed", error=str(exc))
            results = dict.fromkeys(batch, Written.REFUSED)
        ok = {cid: batch[cid] for cid, r in results.items() if r is Written.WRITTEN}
        failed = [cid for cid in batch if cid not in ok]
        self._closed(self.schedule.written(ok, failed, self._clock()))
        for outcome, n in Counter(results.values()).items():
            label = "refused" if outcome is Written.READ_ONLY else outcome.value
            self.metrics.cgroup_writes.labels(label).inc(n)
        if Written.READ_ONLY in results.values() and not self._cgroups_read_only:
            self._cgroups_read_only = True
            _log.warning(
                "containers' cgroups cannot be written here (mount them read-write, or set "
                "updates.cgroup_first to false): re-pins wait for the runtime",
                cgroup_root=str(self.verifier.root),
            )
        self._wake()

    def _wake(self) -> None:
        self._kick.set()
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._drain())
            self._background.add(self._pump)
            self._pump.add_done_callback(self._background.discard)

    async def _drain(self) -> None:
        """Send the schedule's batches as they fall due; ends when nothing is pending."""
        sched = self.schedule
        while True:
            now = self._clock()
            batch = sched.next_batch(now)
            if batch:
                await self._send_batch(batch)
                continue
            wait = sched.wakeup(now)
            if wait is None:
                return
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), wait)

    async def _send_batch(self, batch: dict[str, Placement]) -> None:
        """One batch of re-pins (one UpdateContainers, or concurrent CRI calls); then what
        landed, what to retry, what is gone."""
        started = self._clock()
        if self.transport == Transport.CRI:
            await self._through_cri(batch, "re-pin")
        else:
            updates = [
                convert.container_update(c, p, ignore_failure=True) for c, p in batch.items()
            ]
            if not await self._through_nri(updates, "re-pin"):
                self.schedule.lost(self._clock())
                return
        self.metrics.update_batch.observe(self._clock() - started)
        retry, drop = await self._landed(batch)
        done = self.schedule.done(self._clock(), retry, drop)
        self._write_ahead()  # shrinks that came while these were in flight
        repins = self.metrics.repins
        repins.labels("sent").inc(len(batch))
        for outcome, ids in (
            ("retried", done.retried),
            ("given_up", done.given_up),
            ("dropped", done.dropped),
        ):
            if ids:
                repins.labels(outcome).inc(len(ids))
        if done.given_up:
            _log.warning("re-pins did not land; the periodic check repairs them", ids=done.given_up)
        self._closed(done.closed)

    async def _landed(self, batch: Mapping[str, Placement]) -> tuple[set[str], set[str]]:
        """Of a sent batch: those to send again (live, cgroup not as sent) and those gone
        (released meanwhile, or no cgroup to read: exited, or not yet created, which the check
        after its start covers)."""
        drop = {cid for cid in batch if not self._placed(cid)}
        if self.verifier is None:
            return set(), drop
        live = [cid for cid in batch if cid not in drop]
        applied = await self.verifier.read(live)
        retry = set()
        for cid in live:
            seen = applied.get(cid)
            if seen is None:
                drop.add(cid)
            elif compare(cid, batch[cid].cpus, batch[cid].mems, seen) is not None:
                retry.add(cid)
        return retry, drop

    def _closed(self, closed: Iterable[Closed]) -> None:
        """Windows that closed: observed, and kept with their decision."""
        for c in closed:
            self.metrics.exclusive_window.observe(c.seconds)
            known = self.decisions.get(c.owner)
            if known is None:  # its decision is kept once the reply is out
                self._windows[c.owner] = c.seconds
            else:
                self.decisions[c.owner] = replace(known, window_s=c.seconds)

    async def _through_nri(self, updates: Updates, why: str) -> bool:
        """One UpdateContainers; False when it may not have reached the runtime (no connection:
        Synchronize on reconnect reports what each container holds and repairs the rest). A
        refusal is logged and counted, not raised: each update ignores failure, and the cgroups
        tell what landed."""
        try:
            if self.stub is None:
                raise NotConnectedError("no runtime connection")
            await self.stub.update_containers(updates)
        except NotConnectedError as exc:
            self.metrics.error("update_not_connected")
            _log.warning(
                "updates not delivered; reconnecting repairs them", why=why, error=str(exc)
            )
            return False
        except StubError as exc:
            self.metrics.error("update_failed")
            _log.warning("runtime refused updates", why=why, error=str(exc))
        return True

    async def _through_cri(self, placements: Mapping[str, Placement], why: str) -> None:
        """One UpdateContainerResources per container, at most `batch` at once; failures are
        logged and counted (a container that exited meanwhile fails), not raised."""
        cri = self.cri
        assert cri is not None
        awaiting = self._awaiting
        sem = asyncio.Semaphore(self.schedule.pacing.batch)

        async def one(cid: str, p: Placement) -> None:
            cpus = cpuset.text(p.cpus) if p.cpus else ""
            mems = cpuset.text(p.mems) if p.mems else ""
            if not cpus and not mems:
                return
            async with sem:
                awaiting[cid] = awaiting.get(cid, 0) + 1
                try:
                    await cri.update_cpusets(cid, cpus, mems)
                except CriError as exc:
                    self.metrics.error("update_failed")
                    _log.info("CRI update failed", why=why, container_id=cid, error=str(exc))
                finally:
                    left = awaiting.pop(cid) - 1
                    if left:
                        awaiting[cid] = left

        await asyncio.gather(*(one(cid, p) for cid, p in placements.items()))

    def _with_riders(self, updates: Iterable[Update], own: str) -> tuple[Update, ...]:
        """`updates` for a reply, after the updates waiting for one (none but with no safe
        transport); not the event's own container's, which its reply sets anew."""
        if not self._riding:
            return tuple(updates)
        riding, self._riding = self._riding, {}
        riding.pop(own, None)
        self.metrics.repins.labels("rode_reply").inc(len(riding))
        return (*(Update(cid, p) for cid, p in riding.items()), *updates)

    def _send_later(self, updates: Sequence[Update], why: str) -> None:
        self._spawn(self._send(updates, why))

    async def _send(self, updates: Sequence[Update], why: str) -> None:
        """Updates apart from any reply, through the transport, from a task of its own; failures
        are logged and counted, not raised. With no safe transport they wait for the next reply
        that can carry updates (`_with_riders`): an NRI UpdateContainers could deadlock."""
        if not updates:
            return
        if self.transport == Transport.REPLY:
            for u in updates:
                self._riding[u.container_id] = u.placement
            self.metrics.repins.labels("held_for_reply").inc(len(updates))
            return
        if self.transport == Transport.CRI:
            await self._through_cri({u.container_id: u.placement for u in updates}, why)
        elif self.stub is not None:
            await self._through_nri(convert.updates(updates, ignore_failure=True), why)

    def _explain_adopted(self, adopted: Sequence[str]) -> None:
        """Containers kept as found have no decision of this run: `explain` shows what they hold,
        without a trace. One placed by this process earlier (a reconnection) keeps its decision."""
        new = [cid for cid in adopted if cid not in self.decisions]
        if not new:
            return
        held, now = self.policy.assignments(), self._now_ns()
        for cid in new:
            a = held.get(cid)
            if a is not None:
                placed = Decision(
                    cid,
                    a.pool,
                    a.kind,
                    Placement(a.cpus, a.mems),
                    a.exclusive,
                    hugepages=a.hugepages,
                )
                self.decisions[cid] = Explained("adopted", now, placed)

    def _log_decision(self, decision: Decision, what: str, why: str = "") -> None:
        """Log and keep a decision once the reply carrying it is out: its fields (the cpusets of
        dozens of updated containers) are a visible share of a reply's time."""
        known = self.policy.container(decision.container_id)  # as it is now: names are values
        asyncio.get_running_loop().call_soon(self._after_reply, decision, what, known, why)

    def _after_reply(
        self,
        decision: Decision,
        what: str,
        known: tuple[PodInfo, ContainerInfo] | None,
        why: str,
    ) -> None:
        if logs.enabled(logging.INFO):
            pod_name = f"{known[0].namespace}/{known[0].name}" if known else ""
            name = f"{pod_name}/{known[1].name}" if known else decision.container_id
            fields = logs.decision_fields(decision, name, pod_name)
            if why:
                fields["why"] = why
            _log.info(f"container {what}", **fields)
        cid = decision.container_id
        if self._placed(cid):  # not released meanwhile
            # Without the other containers' updates, which explain nothing about this one.
            kept = dataclasses.replace(decision, updates=(), trace=self._shared(decision.trace))
            window = self._windows.pop(cid, None)
            self.decisions[cid] = Explained(what, self._now_ns(), kept, window)

    def _shared(self, trace: tuple[PoolScore, ...]) -> tuple[PoolScore, ...]:
        """The trace with each sort key and verdict replaced by an equal one kept before."""
        keys, verdicts = self._keys, self._verdicts
        if len(keys) >= _TRACE_PARTS_MAX or len(verdicts) >= _TRACE_PARTS_MAX:
            keys.clear()  # the kept traces keep theirs; later ones start sharing anew
            verdicts.clear()
        return tuple(
            PoolScore(
                s.pool, keys.setdefault(s.key, s.key), verdicts.setdefault(s.result, s.result)
            )
            for s in trace
        )
