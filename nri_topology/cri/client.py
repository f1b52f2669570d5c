"""Client of the runtime's CRI RuntimeService: re-pins through UpdateContainerResources.

A request that sets only `cpuset_cpus` and `cpuset_mems` changes only the cpusets: the runtime
leaves every resource the request leaves at zero as it is (this is how the kubelet's static CPU
manager re-pins). The runtime relays the request to its NRI plugins as an UpdateContainer, under
its NRI lock only for that round trip, and applies the update outside of it, in the usual lock
order: unlike an NRI UpdateContainers, it cannot deadlock an older NRI adaptation, and other
pods' events wait for no `runc update` (docs/protocol.md §6.6).

Every call has a deadline. The channel is made on first use and kept: gRPC reconnects by itself
when the runtime restarts.
"""

from __future__ import annotations

import grpc
import grpc.aio

from nri_topology.cri import api_pb2 as cri
from nri_topology.cri.runtimes import CriError

_SERVICE = "/runtime.v1.RuntimeService/"
# The runtime recreates its socket when it restarts: reconnect within seconds, not the default
# two minutes of backoff. Channels of this client share no connection state with others.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.use_local_subchannel_pool", 1),
)


class CriClient:
    """UpdateContainerResources (and Version, to see that the runtime answers) on one socket."""

    def __init__(self, socket: str, timeout_s: float = 10.0) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None

    def _connected(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket}", options=_CHANNEL_OPTIONS
            )
        return self._channel

    async def _call(self, method: str, request: object, reply: type, timeout_s: float) -> object:
        call = self._connected().unary_unary(
            _SERVICE + method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply.FromString,
        )
        try:
            return await call(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise CriError(
                f"CRI {method} at {self.socket}: {e.code().name}: {e.details()}", e.code()
            ) from None

    async def version(self, timeout_s: float = 1.0) -> str:
        """The runtime's name and version, as it answers on the socket."""
        got = await self._call(
            "Version", cri.VersionRequest(version="v1"), cri.VersionResponse, timeout_s
        )
        assert isinstance(got, cri.VersionResponse)
        return f"{got.runtime_name} {got.runtime_version}"

    async def update_cpusets(self, container_id: str, cpus: str, mems: str) -> None:
        """Set the container's cpusets (an empty one is left as it is), nothing else."""
        req = cri.UpdateContainerResourcesRequest(container_id=container_id)
        req.linux.cpuset_cpus = cpus
        req.linux.cpuset_mems = mems
        await self._call(
            "UpdateContainerResources",
            req,
            cri.UpdateContainerResourcesResponse,
            self.timeout_s,
        )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
