"""A kubelet PodResources v1 server for tests: the upstream service and messages over a real
unix socket, with knobs for the ways a kubelet misbehaves (no Get, slow, failing)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

from nri_topology.kubelet import podresources_pb2 as pb
from nri_topology.testing.grpc_unix import serve_unix


def pod_resources(
    namespace: str, name: str, containers: dict[str, list[tuple[str, list[str], list[int]]]]
) -> pb.PodResources:
    """A PodResources message: per container, (resource, device ids, NUMA node ids)."""
    pod = pb.PodResources(name=name, namespace=namespace)
    for cname, devices in containers.items():
        c = pod.containers.add(name=cname)
        for resource, ids, nodes in devices:
            d = c.devices.add(resource_name=resource, device_ids=ids)
            for n in nodes:
                d.topology.nodes.add(ID=n)
    return pod


@dataclass
class Kubelet:
    """What the server answers and how; change the fields while it runs."""

    pods: list[pb.PodResources] = field(default_factory=list)
    get_implemented: bool = True
    fail: grpc.StatusCode | None = None
    gate: asyncio.Event | None = None  # answers wait until it is set
    calls: list[str] = field(default_factory=list)

    async def _wait(self, context: grpc.aio.ServicerContext) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            await context.abort(self.fail, "kubelet says no")

    async def list(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self.calls.append("List")
        await self._wait(context)
        return pb.ListPodResourcesResponse(pod_resources=self.pods)

    async def get(
        self, request: pb.GetPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        self.calls.append("Get")
        if not self.get_implemented:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "feature gate off")
        await self._wait(context)
        for pod in self.pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=pod)
        await context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
        raise AssertionError("unreachable")


@asynccontextmanager
async def serve(socket: Path, kubelet: Kubelet) -> AsyncIterator[Kubelet]:
    """Serve `kubelet` on `socket` (service v1.PodResourcesLister) until the block ends."""
    server = await serve_unix(
        str(socket),
        "v1.PodResourcesLister",
        {
            "List": (kubelet.list, pb.ListPodResourcesRequest, pb.ListPodResourcesResponse),
            "Get": (kubelet.get, pb.GetPodResourcesRequest, pb.GetPodResourcesResponse),
        },
    )
    try:
        yield kubelet
    finally:
        if kubelet.gate is not None:
            kubelet.gate.set()
        await server.stop(None)
