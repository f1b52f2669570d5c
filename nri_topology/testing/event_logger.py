"""A plugin that subscribes to every event, logs it and changes nothing: for tests and the demo."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import structlog

from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin, Updates

log = structlog.get_logger(__name__)


def _container_fields(pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> dict[str, str]:
    return {
        "pod": f"{pod.namespace}/{pod.name}",
        "container": ctr.name,
        "id": ctr.id,
        "cpus": ctr.linux.resources.cpu.cpus,
        "mems": ctr.linux.resources.cpu.mems,
    }


class EventLogger(Plugin):
    """Logs each request and changes nothing, so it is safe on any node."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def _pod(self, event: str, pod: api_pb2.PodSandbox) -> None:
        self.counts[event] += 1
        log.info(event, pod=f"{pod.namespace}/{pod.name}", id=pod.id)

    def _ctr(self, event: str, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self.counts[event] += 1
        log.info(event, **_container_fields(pod, ctr))

    async def synchronize(
        self, pods: Sequence[api_pb2.PodSandbox], containers: Sequence[api_pb2.Container]
    ) -> Updates:
        self.counts["synchronize"] += 1
        log.info("synchronize", pods=len(pods), containers=len(containers))
        return []

    async def run_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._pod("run_pod_sandbox", pod)

    async def update_pod_sandbox(
        self,
        pod: api_pb2.PodSandbox,
        overhead: api_pb2.LinuxResources,
        resources: api_pb2.LinuxResources,
    ) -> None:
        self._pod("update_pod_sandbox", pod)

    async def post_update_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._pod("post_update_pod_sandbox", pod)

    async def stop_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._pod("stop_pod_sandbox", pod)

    async def remove_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self._pod("remove_pod_sandbox", pod)

    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> tuple[api_pb2.ContainerAdjustment | None, Updates]:
        self._ctr("create_container", pod, ctr)
        return None, []

    async def post_create_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._ctr("post_create_container", pod, ctr)

    async def start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._ctr("start_container", pod, ctr)

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._ctr("post_start_container", pod, ctr)

    async def update_container(
        self,
        pod: api_pb2.PodSandbox,
        ctr: api_pb2.Container,
        resources: api_pb2.LinuxResources,
    ) -> Updates:
        self._ctr("update_container", pod, ctr)
        return []

    async def post_update_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._ctr("post_update_container", pod, ctr)

    async def stop_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> Updates:
        self._ctr("stop_container", pod, ctr)
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self._ctr("remove_container", pod, ctr)
