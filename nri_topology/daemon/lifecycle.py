"""Placements' lives outside their container's own create and update: released (stopped,
removed, left by its pod, its hold over), held for a stopped container's next attempt, widened
when a cold start ends, placed again under new policy options, for a pod resized in place or
from what the runtime reports at Synchronize.
Each is a policy call under the plugin's lock, with what is kept beside a placement
(explanation, timers, cgroup path, pending re-pins) dropped with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from nri_topology.daemon import logs
from nri_topology.daemon.admission import Admission
from nri_topology.daemon.explain import Explanations
from nri_topology.daemon.metrics import Metrics
from nri_topology.daemon.persistence import State
from nri_topology.daemon.timers import Timers
from nri_topology.daemon.updates.path import UpdatePath
from nri_topology.daemon.verify import Verifier
from nri_topology.policy.intake import podlevel
from nri_topology.policy.options import Options
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import ContainerInfo, Placement, PodInfo, PolicyError, Update
from nri_topology.policy.views import RestoreReport

if TYPE_CHECKING:
    from nri_topology.daemon.placement_file import PlacementFiles

_log = structlog.get_logger("nri_topology.daemon")


class Lifecycle:
    """Ends, holds and option changes of placements, for the plugin's events and timers."""

    def __init__(
        self,
        policy: PolicyPort,
        lock: asyncio.Lock,
        *,
        metrics: Metrics,
        admission: Admission,
        explained: Explanations,
        timers: Timers,
        state: State,
        updates: UpdatePath,
        verifier: Verifier | None,
        files: PlacementFiles | None,
        commit: Callable[[], None],
    ) -> None:
        self.policy = policy
        self._lock = lock
        self.metrics = metrics
        self.admission = admission
        self.explained = explained
        self.timers = timers
        self.state = state
        self.updates = updates
        self.verifier = verifier
        self.files = files
        self._commit = commit

    async def release(self, container_id: str, why: str) -> tuple[Update, ...]:
        """Give back what the container holds; the other containers' updates that follow."""
        async with self._lock:
            if self.policy.container(container_id) is None:
                return ()
            updates = self.release_locked(container_id)
            self._commit()
        if logs.enabled(logging.INFO):  # binding a filtered line's logger costs more than asking
            summary = logs.summarize_updates(updates)
            _log.info("released", container_id=container_id, why=why, **summary)
        if self.files is not None:
            self.files.updated(updates)
        return updates

    def release_locked(self, container_id: str) -> tuple[Update, ...]:
        """`release` with the lock held, nothing committed yet."""
        started = time.perf_counter()
        try:
            updates = self.policy.release(container_id)
        except PolicyError as exc:  # not known to the policy: nothing to give back
            _log.warning("release refused", container_id=container_id, reason=str(exc))
            updates = ()
        self.admission.observe("release", started)
        self.explained.forget(container_id)
        self.updates.forget(container_id)
        self.timers.forget(container_id)
        if self.verifier is not None:
            self.verifier.forget(container_id)
        return updates

    async def release_pod(self, pod_id: str, why: str) -> None:
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
                updates += self.release_locked(cid)
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

    async def hold(self, container_id: str, seconds: float) -> bool:
        """Keep a stopped container's CPUs for its next attempt, for `seconds` at most."""
        async with self._lock:
            if not self.policy.hold(container_id):
                return False
            if self.verifier is not None:
                self.verifier.forget(container_id)
            self.timers.hold(container_id, seconds)
        _log.info("stopped, CPUs held for its next attempt", container_id=container_id)
        return True

    async def hold_expired(self, container_id: str) -> None:
        self.updates.defer(await self.release(container_id, "no next attempt came"), "release")

    async def cold_start_expired(self, container_id: str) -> None:
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
            self.admission.observe("cold_start", started)
            self._commit()
        summary = logs.summarize_updates(updates)
        _log.info("cold start over, memory widened", container_id=container_id, **summary)
        if self.files is not None:
            self.files.updated(updates)
        if updates:  # the container's own memory, not a re-pin of others: at once
            await self.updates.send(updates, "cold_start")

    async def reconfigure(self, options: Options) -> None:
        """Apply new policy options; raises PolicyError (state unchanged) if they cannot apply."""
        async with self._lock:
            started = time.perf_counter()
            report = self.policy.reconfigure(options)
            self.admission.observe("reconfigure", started)
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

    async def restore(
        self, pods: list[PodInfo], containers: list[ContainerInfo], created: set[str]
    ) -> RestoreReport:
        """Take over what the runtime reports at Synchronize (`created`: not started yet): the
        checkpoint's placements kept where they still fit, the others placed again."""
        async with self._lock:
            saved = self.state.saved()
            # Placed by this process before a reconnection, and no longer reported: their
            # removal was missed while the connection was down.
            missing = set(self.policy.assignments()).difference(c.id for c in containers)
            started = time.perf_counter()
            report = self.state.restore(pods, containers, saved)
            self.admission.observe("restore", started)
            self.explained.synchronized()
            self.timers.restore(saved.get("cold_starts"), report.cold_starts, created)
            self.timers.end_holds(list(self.timers.held))  # the policy holds none after a restore
            held = self.policy.assignments()  # as the reply sets them
            # the reply sets every container's placement anew
            self.updates.reset((cid, Placement(a.cpus, a.mems)) for cid, a in held.items())
            self._commit()
            if self.files is not None:
                from nri_topology.daemon.placement_file import assigned

                placed = {cid: assigned(a) for cid, a in held.items()}
        if self.files is not None:
            await self.files.adopt(placed)
        for cid, decision in report.decisions.items():  # the re-placed ones only
            self.explained.log(decision, "re-placed", report.replaced.get(cid, ""))
        self.explained.adopted(report.adopted)
        self.admission.restored(report, missing, pods, containers)
        return report

    async def resize_pod(self, pod: PodInfo) -> None:
        """A pod resized in place: the container holding its budget (`podlevel`) is placed again
        with the new one; what changes for it and for others goes through the update path."""
        async with self._lock:
            infos = [
                known[1]
                for cid in self.policy.pod_containers(pod.id)
                if (known := self.policy.container(cid)) is not None
            ]
            holder = podlevel.holder(pod, infos)
            if holder is None:
                return  # no container of the pod takes its amounts from the pod's
            info = next(i for i in infos if i.id == holder)
            decision = self.admission.decide(
                "resize", pod, info, lambda: self.policy.resize(pod, info, info.resources)
            )
            self._commit()
        self.explained.log(decision, "resized", "pod resources changed")
        if self.files is not None:
            self.files.replaced(decision)
            self.files.updated(u for u in decision.updates if u.container_id != holder)
        updates = {u.container_id: u for u in decision.updates}
        updates[holder] = Update(holder, decision.placement)
        self.updates.defer([updates[cid] for cid in sorted(updates)], "pod resize")
