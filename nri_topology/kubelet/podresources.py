"""Client of the kubelet's PodResources API (v1): the devices a pod's containers were given.

The kubelet serves it over gRPC on a unix socket. `Get` (one pod) is used; a kubelet that does
not implement it (feature gate `KubeletPodResourcesGet` off, before 1.34) answers UNIMPLEMENTED,
and from then on `List` (every pod) is used instead. Every call has a deadline. The channel is
made on first use and kept: gRPC reconnects by itself when the kubelet restarts.

Only devices from device plugins carry topology (`ContainerDevices.topology`, NUMA node ids);
devices without it are left out, as they say nothing about where to place.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
import grpc.aio

from nri_topology.kubelet import podresources_pb2 as pb

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
_SERVICE = "/v1.PodResourcesLister/"
# A List answer on a busy node exceeds gRPC's default 4 MiB; the kubelet's own client allows 16.
# The kubelet recreates its socket when it restarts: reconnect within seconds, not the default
# two minutes of backoff, and let a call made meanwhile wait (up to its deadline) for the new
# connection rather than fail at once. Channels of this client share no connection state with
# other channels in the process.
_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.use_local_subchannel_pool", 1),
)


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """Devices of one resource given to a container, and the NUMA nodes they are on."""

    resource: str
    ids: tuple[str, ...]
    nodes: frozenset[int]


PodDevices = Mapping[str, tuple[DeviceAssignment, ...]]
"""Per container name, the devices with topology that it was given."""


class PodResourcesError(Exception):
    """The kubelet could not be asked or did not answer (the message says which)."""


def pod_devices(pod: pb.PodResources) -> dict[str, tuple[DeviceAssignment, ...]]:
    """The devices with NUMA topology of each container of a pod."""
    out: dict[str, tuple[DeviceAssignment, ...]] = {}
    for ctr in pod.containers:
        found = []
        for dev in ctr.devices:
            nodes = frozenset(n.ID for n in dev.topology.nodes if n.ID >= 0)
            if nodes:
                found.append(DeviceAssignment(dev.resource_name, tuple(dev.device_ids), nodes))
        out[ctr.name] = tuple(found)
    return out


class PodResourcesClient:
    """Asks the kubelet which devices a pod got; one call per question, each with a deadline."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout_s: float = 1.0) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._get_unimplemented = False

    def _connected(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket}", options=_CHANNEL_OPTIONS
            )
        return self._channel

    async def _call(self, method: str, request: object, reply: type) -> object:
        call = self._connected().unary_unary(
            _SERVICE + method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply.FromString,
        )
        deadline = time.monotonic() + self.timeout_s
        try:
            return await call(request, timeout=self.timeout_s, wait_for_ready=True)
        except grpc.aio.AioRpcError as e:
            left = deadline - time.monotonic()
            if e.code() is not grpc.StatusCode.UNAVAILABLE or left <= 0:
                raise
            # A kubelet that restarted under a connection gRPC still held breaks the call on
            # it; the channel reconnects, and the question is safe to ask again (read-only).
            return await call(request, timeout=left, wait_for_ready=True)

    async def pod(self, namespace: str, name: str) -> dict[str, tuple[DeviceAssignment, ...]]:
        """The pod's devices by container; PodResourcesError when the kubelet cannot tell."""
        try:
            if not self._get_unimplemented:
                try:
                    got = await self._call(
                        "Get",
                        pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace),
                        pb.GetPodResourcesResponse,
                    )
                    assert isinstance(got, pb.GetPodResourcesResponse)
                    return pod_devices(got.pod_resources)
                except grpc.aio.AioRpcError as e:
                    if e.code() is not grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    self._get_unimplemented = True
            listed = await self._call(
                "List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse
            )
            assert isinstance(listed, pb.ListPodResourcesResponse)
        except grpc.aio.AioRpcError as e:
            raise PodResourcesError(
                f"PodResources at {self.socket}: {e.code().name}: {e.details()}"
            ) from None
        for pod in listed.pod_resources:
            if pod.namespace == namespace and pod.name == name:
                return pod_devices(pod)
        raise PodResourcesError(f"PodResources at {self.socket}: no pod {namespace}/{name}")

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
