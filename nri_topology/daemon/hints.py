"""Topology hints for a container: where its devices sit, found without stalling the daemon.

Two sources, each optional:

* sysfs, for the devices the runtime hands the plugin (Linux devices by major:minor, VFIO
  groups, device nodes among the mounts): cached per device by the `DeviceLocator`, read in a
  worker thread when a device is new (or a mounted node must be looked at);
* the kubelet's PodResources API, for devices that device plugins allocated: asked once per pod,
  as soon as its sandbox runs, and kept until the pod is removed. CreateContainer waits for the
  answer at most `budget_s`; a slower, failing or absent kubelet means a warning and placement
  without those hints, never a failed or late container. A failed answer is not kept, so the
  next container of the pod asks again; a slow one is kept once it arrives.

The policy receives plain `TopologyHint` values and never sees where they came from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from nri_topology.daemon.convert import DeviceRef
from nri_topology.policy.intake.request import hint_sources
from nri_topology.policy.options import Options
from nri_topology.policy.types import (
    ContainerInfo,
    HintSource,
    PodInfo,
    TopologyHint,
    qualified_name,
)
from nri_topology.topology.devices import DeviceError, DeviceLocator

if TYPE_CHECKING:  # the client loads grpc, which only a daemon asking the kubelet needs
    from nri_topology.kubelet.podresources import DeviceAssignment, PodResourcesClient

_log = structlog.get_logger("nri_topology.hints")

_PodAnswer = dict[str, tuple["DeviceAssignment", ...]]


def sysfs_hints(
    locator: DeviceLocator, refs: Iterable[DeviceRef]
) -> tuple[tuple[TopologyHint, ...], tuple[str, ...]]:
    """Hints of the devices that sysfs places, and warnings for those it does not know."""
    hints: list[TopologyHint] = []
    warnings: list[str] = []
    for ref in refs:
        try:
            if ref.kind:
                found = locator.device(ref.kind, ref.major, ref.minor, ref.path)
            else:
                found = locator.path(ref.path)
        except DeviceError as e:
            warnings.append(f"{ref.source} {ref.path}: {e}")
            continue
        if found is not None:
            provider = f"{ref.path} ({','.join(found.devices)})"
            hints.append(TopologyHint(ref.source, provider, found.nodes, found.cpus))
    return tuple(hints), tuple(warnings)


def pod_resources_hints(answer: _PodAnswer, container: str) -> tuple[TopologyHint, ...]:
    """Hints of the devices the kubelet gave one container."""
    return tuple(
        TopologyHint(HintSource.POD_RESOURCES, f"podresourceapi:{d.resource}", d.nodes)
        for d in answer.get(container, ())
    )


class HintFinder:
    """Finds a container's hints; holds the per-pod PodResources answers (the only cache)."""

    def __init__(
        self,
        locator: DeviceLocator | None,
        pod_resources: PodResourcesClient | None,
        budget_s: float = 0.5,
    ) -> None:
        self.locator = locator
        self.pod_resources = pod_resources
        self.budget_s = budget_s
        self._pods: dict[str, asyncio.Task[_PodAnswer]] = {}

    def pod_started(self, pod: PodInfo) -> None:
        """Ask the kubelet about a new pod now, so that its containers find the answer ready."""
        if self.pod_resources is not None and pod.id not in self._pods:
            task = asyncio.ensure_future(self.pod_resources.pod(pod.namespace, pod.name))
            task.add_done_callback(_retrieve)  # a failure nobody waited for is not an error
            self._pods[pod.id] = task

    def pod_removed(self, pod_id: str) -> None:
        task = self._pods.pop(pod_id, None)
        if task is not None and not task.done():
            task.cancel()

    async def restored(
        self,
        pods: Iterable[PodInfo],
        infos: Sequence[ContainerInfo],
        refs: Sequence[tuple[DeviceRef, ...]],
        options: Options,
    ) -> list[ContainerInfo]:
        """The containers a Synchronize reported, with the hints of their devices (for those
        re-placed or resized later); the kubelet is not asked: it knows only new pods."""
        by_id = {p.id: p for p in pods}
        out = []
        for info, devices in zip(infos, refs, strict=True):
            pod = by_id.get(info.pod_id)
            if devices and pod is not None:
                found = await self.find(pod, info, devices, options, kubelet=False)
                info = replace(info, hints=found) if found else info
            out.append(info)
        return out

    async def find(
        self,
        pod: PodInfo,
        info: ContainerInfo,
        refs: tuple[DeviceRef, ...],
        options: Options,
        *,
        kubelet: bool = True,
    ) -> tuple[TopologyHint, ...]:
        """The container's hints from the sources it wants; never raises, warns instead.

        `kubelet=False` leaves the PodResources API out (Synchronize, where waiting for it per
        pod would hold up the whole restart)."""
        if not refs and (not kubelet or self.pod_resources is None):
            return ()  # nothing to ask: which sources the container wants does not matter
        sources = hint_sources(pod, info, options)
        container = info.name
        who = qualified_name(pod.namespace, pod.name, container)
        hints: tuple[TopologyHint, ...] = ()
        wanted = tuple(r for r in refs if r.source in sources)
        locator = self.locator
        if locator is not None and wanted:
            if all(r.kind and locator.known(r.kind, r.major, r.minor, r.path) for r in wanted):
                found, warnings = sysfs_hints(locator, wanted)  # all cached: no I/O, no thread
            else:
                found, warnings = await asyncio.to_thread(sysfs_hints, locator, wanted)
            for warning in warnings:
                _log.warning(
                    "device not found in sysfs, no hint from it", container=who, detail=warning
                )
            hints += found
        if kubelet and self.pod_resources is not None and HintSource.POD_RESOURCES in sources:
            answer = await self._answer(pod, who)
            if answer is not None:
                hints += pod_resources_hints(answer, container)
        return hints

    async def _answer(self, pod: PodInfo, who: str) -> _PodAnswer | None:
        self.pod_started(pod)
        task = self._pods[pod.id]
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.budget_s)
        except TimeoutError:
            _log.warning(
                "PodResources API slower than the budget, placing without its hints",
                container=who,
                budget_s=self.budget_s,
            )
        except Exception as e:  # PodResourcesError, or anything else: no hints, never a failure
            _log.warning(
                "PodResources API failed, placing without its hints", container=who, error=str(e)
            )
            if self._pods.get(pod.id) is task:
                del self._pods[pod.id]
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this call is cancelled, not the lookup
            # the pod was removed meanwhile: nothing to wait for
        return None

    async def close(self) -> None:
        for task in self._pods.values():
            task.cancel()
        for task in self._pods.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pods.clear()
        if self.pod_resources is not None:
            await self.pod_resources.close()


def _retrieve(task: asyncio.Task[_PodAnswer]) -> None:
    if not task.cancelled():
        task.exception()
