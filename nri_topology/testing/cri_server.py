"""The test runtime's CRI, as far as the plugin uses it: Version and UpdateContainerResources.

Served over gRPC on a real unix socket, beside a `RuntimePeer`. An UpdateContainerResources is
handled as containerd handles it (checked on the real runtimes by tests/e2e/test_repins.py): an
unknown container fails with NOT_FOUND; otherwise the request's resources go to the plugin as an
NRI UpdateContainer, under the runtime's NRI lock for that round trip only (every resource field
present, those the request leaves out at zero), and the plugin's answer for the container
becomes its new resources, applied after the lock is released.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import grpc.aio

from nri_topology.cri import api_pb2 as cri
from nri_topology.nri import api_pb2
from nri_topology.testing.grpc_unix import serve_unix
from nri_topology.testing.runtime import RuntimePeer


@dataclass(frozen=True, slots=True)
class Call:
    """One UpdateContainerResources served: the cpusets asked, and those applied."""

    container_id: str
    asked: tuple[str, str]
    applied: tuple[str, str] | None  # None: refused


def nri_resources(linux: cri.LinuxContainerResources) -> api_pb2.LinuxResources:
    """The CRI request's resources as the runtime relays them to its NRI plugins."""
    out = api_pb2.LinuxResources()
    out.cpu.shares.value = linux.cpu_shares
    out.cpu.quota.value = linux.cpu_quota
    out.cpu.period.value = linux.cpu_period
    out.cpu.cpus = linux.cpuset_cpus
    out.cpu.mems = linux.cpuset_mems
    out.memory.limit.value = linux.memory_limit_in_bytes
    for key, value in linux.unified.items():
        out.unified[key] = value
    return out


def _apply_set_fields(into: api_pb2.LinuxResources, new: api_pb2.LinuxResources) -> None:
    """What the runtime changes: the fields the update sets to something other than zero."""
    cpu, ncpu = into.cpu, new.cpu
    for name in ("cpus", "mems"):
        if getattr(ncpu, name):
            setattr(cpu, name, getattr(ncpu, name))
    for name in ("shares", "quota", "period"):
        if getattr(ncpu, name).value:
            getattr(cpu, name).value = getattr(ncpu, name).value
    if new.memory.limit.value:
        into.memory.limit.value = new.memory.limit.value


class CriServer:
    """A gRPC RuntimeService for `peer`; `calls` records what it served."""

    def __init__(self, peer: RuntimePeer, name: str = "containerd", version: str = "v1.7.24"):
        self.peer = peer
        self.name = name
        self.version = version
        self.calls: list[Call] = []
        self.concurrent = 0
        self.most_concurrent = 0  # the most UpdateContainerResources served at once
        self._server: grpc.aio.Server | None = None

    async def listen(self, path: str) -> None:
        self._server = await serve_unix(
            path,
            "runtime.v1.RuntimeService",
            {
                "Version": (self._version, cri.VersionRequest, cri.VersionResponse),
                "UpdateContainerResources": (
                    self._update,
                    cri.UpdateContainerResourcesRequest,
                    cri.UpdateContainerResourcesResponse,
                ),
            },
        )

    async def close(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    async def _version(
        self, req: cri.VersionRequest, ctx: grpc.aio.ServicerContext
    ) -> cri.VersionResponse:
        return cri.VersionResponse(
            version="0.1.0",
            runtime_name=self.name,
            runtime_version=self.version,
            runtime_api_version="v1",
        )

    async def _update(
        self, req: cri.UpdateContainerResourcesRequest, ctx: grpc.aio.ServicerContext
    ) -> cri.UpdateContainerResourcesResponse:
        cid = req.container_id
        asked = (req.linux.cpuset_cpus, req.linux.cpuset_mems)
        ctr = self.peer.containers.get(cid)
        if ctr is None:
            self.calls.append(Call(cid, asked, None))
            await ctx.abort(grpc.StatusCode.NOT_FOUND, f"container {cid!r} not found")
        self.concurrent += 1
        self.most_concurrent = max(self.most_concurrent, self.concurrent)
        try:
            effective = nri_resources(req.linux)
            peer = self.peer
            conn = peer._target(api_pb2.UPDATE_CONTAINER)
            if conn is not None:
                pod = peer.pods.get(ctr.pod_sandbox_id, api_pb2.PodSandbox())
                nri = api_pb2.UpdateContainerRequest(
                    pod=pod, container=ctr, linux_resources=effective
                )
                try:
                    reply = await peer._relay(
                        conn, "UpdateContainer", nri, api_pb2.UpdateContainerResponse
                    )
                except Exception as exc:  # the plugin failed it: so does the runtime
                    self.calls.append(Call(cid, asked, None))
                    await ctx.abort(grpc.StatusCode.UNKNOWN, f"NRI container update failed: {exc}")
                for update in reply.update:
                    if update.container_id == cid:  # the last one wins
                        effective.MergeFrom(update.linux.resources)
            await asyncio.sleep(0)  # the runtime's own update, after the NRI round trip
            _apply_set_fields(ctr.linux.resources, effective)
            now = ctr.linux.resources.cpu
            self.calls.append(Call(cid, asked, (now.cpus, now.mems)))
        finally:
            self.concurrent -= 1
        return cri.UpdateContainerResourcesResponse()
