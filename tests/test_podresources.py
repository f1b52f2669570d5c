"""The PodResources client and the hint finder against a gRPC server on a real unix socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import structlog

from nri_topology.daemon.hints import HintFinder
from nri_topology.kubelet import podresources_pb2 as pb
from nri_topology.kubelet.podresources import (
    DeviceAssignment,
    PodResourcesClient,
    PodResourcesError,
    pod_devices,
)
from nri_topology.policy.options import Options
from nri_topology.policy.types import ContainerInfo, HintSource, PodInfo, TopologyHint
from tests.podresources_server import Kubelet, pod_resources, serve

GPU = "nvidia.com/gpu"
POD = PodInfo(id="sandbox-1", name="train", namespace="ml")
MAIN = ContainerInfo(id="c1", pod_id=POD.id, name="main")


def answer(nodes: list[int]) -> list[pb.PodResources]:
    return [
        pod_resources("other", "train", {"main": [(GPU, ["9"], [0])]}),
        pod_resources(
            "ml",
            "train",
            {
                "main": [(GPU, ["GPU-1", "GPU-2"], nodes), ("example.com/dongle", ["d0"], [])],
                "sidecar": [],
            },
        ),
    ]


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


@pytest.fixture
async def client(sock: Path) -> AsyncIterator[PodResourcesClient]:
    c = PodResourcesClient(str(sock), timeout_s=5)
    yield c
    await c.close()


def test_service_and_messages_are_the_upstream_ones() -> None:
    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    fields = {f.name: f.number for f in pb.ContainerDevices.DESCRIPTOR.fields}
    assert fields == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert [(f.name, f.number) for f in pb.NUMANode.DESCRIPTOR.fields] == [("ID", 1)]
    assert {f.name: f.number for f in pb.GetPodResourcesRequest.DESCRIPTOR.fields} == {
        "pod_name": 1,
        "pod_namespace": 2,
    }
    # a ContainerResources as a kubelet encodes it decodes to the same devices
    wire = bytes.fromhex(
        "0a046d61696e"  # name: "main"
        "1219"  # devices: 25 bytes
        "0a0e6e76696469612e636f6d2f677075"  # resource_name: "nvidia.com/gpu"
        "120130"  # device_ids: "0"
        "1a040a020801"  # topology.nodes: [ID 1]
    )
    got = pb.ContainerResources.FromString(wire)
    assert (got.name, got.devices[0].resource_name, got.devices[0].topology.nodes[0].ID) == (
        "main",
        GPU,
        1,
    )


def test_devices_without_topology_are_left_out() -> None:
    assert pod_devices(answer([1, 3])[1]) == {
        "main": (DeviceAssignment(GPU, ("GPU-1", "GPU-2"), frozenset({1, 3})),),
        "sidecar": (),
    }


async def test_get_answers_for_the_pod(sock: Path, client: PodResourcesClient) -> None:
    async with serve(sock, Kubelet(answer([1]))) as kubelet:
        got = await client.pod("ml", "train")
    assert got["main"] == (DeviceAssignment(GPU, ("GPU-1", "GPU-2"), frozenset({1})),)
    assert kubelet.calls == ["Get"]


async def test_without_get_the_client_lists_from_then_on(
    sock: Path, client: PodResourcesClient
) -> None:
    async with serve(sock, Kubelet(answer([2]), get_implemented=False)) as kubelet:
        first = await client.pod("ml", "train")
        second = await client.pod("ml", "train")
        with pytest.raises(PodResourcesError, match="no pod ml/gone"):
            await client.pod("ml", "gone")
    assert first == second and first["main"][0].nodes == {2}
    assert kubelet.calls == ["Get", "List", "List", "List"]


async def test_absent_socket_and_failing_kubelet_are_errors(sock: Path) -> None:
    client = PodResourcesClient(str(sock), timeout_s=1)
    try:
        with pytest.raises(PodResourcesError, match=r"UNAVAILABLE|DEADLINE_EXCEEDED"):
            await client.pod("ml", "train")
    finally:
        await client.close()
    client = PodResourcesClient(str(sock), timeout_s=5)
    try:
        async with serve(sock, Kubelet(answer([1]), fail=grpc.StatusCode.INTERNAL)):
            with pytest.raises(PodResourcesError, match="INTERNAL: kubelet says no"):
                await client.pod("ml", "train")
    finally:
        await client.close()


async def test_slow_kubelet_hits_the_deadline(sock: Path) -> None:
    client = PodResourcesClient(str(sock), timeout_s=0.2)
    try:
        async with serve(sock, Kubelet(answer([1]), gate=asyncio.Event())):
            with pytest.raises(PodResourcesError, match="DEADLINE_EXCEEDED"):
                await client.pod("ml", "train")
    finally:
        await client.close()


def gpu_hint(nodes: set[int]) -> TopologyHint:
    return TopologyHint(HintSource.POD_RESOURCES, f"podresourceapi:{GPU}", frozenset(nodes))


async def test_finder_waits_at_most_the_budget_and_keeps_a_late_answer(
    sock: Path, client: PodResourcesClient
) -> None:
    finder = HintFinder(None, client, budget_s=0.05)
    gate = asyncio.Event()
    async with serve(sock, Kubelet(answer([1]), gate=gate)) as kubelet:
        finder.pod_started(POD)  # asked when the sandbox runs
        with structlog.testing.capture_logs() as logged:
            assert await finder.find(POD, MAIN, (), Options()) == ()  # the kubelet is busy
        assert [e["event"] for e in logged] == [
            "PodResources API slower than the budget, placing without its hints"
        ]
        assert logged[0]["container"] == "ml/train/main"
        gate.set()
        while not kubelet.calls or not finder._pods[POD.id].done():
            await asyncio.sleep(0.01)
        assert await finder.find(POD, MAIN, (), Options()) == (gpu_hint({1}),)
        assert kubelet.calls == ["Get"]  # one question per pod
    await finder.close()


async def test_finder_asks_again_after_a_failure_and_per_pod_after_a_change(
    sock: Path, client: PodResourcesClient
) -> None:
    finder = HintFinder(None, client, budget_s=5)
    async with serve(sock, Kubelet(answer([1]), fail=grpc.StatusCode.INTERNAL)) as kubelet:
        assert await finder.find(POD, MAIN, (), Options()) == ()
        kubelet.fail = None
        assert await finder.find(POD, MAIN, (), Options()) == (gpu_hint({1}),)
        kubelet.pods = answer([3])
        assert await finder.find(POD, MAIN, (), Options()) == (gpu_hint({1}),)  # kept per pod
        finder.pod_removed(POD.id)
        assert await finder.find(POD, MAIN, (), Options()) == (gpu_hint({3}),)
        sidecar = ContainerInfo(id="c2", pod_id=POD.id, name="sidecar")
        assert await finder.find(POD, sidecar, (), Options()) == ()
    assert kubelet.calls == ["Get"] * 3  # failed, answered, asked again after the removal
    await finder.close()


async def test_finder_skips_the_kubelet_when_the_container_opts_out(
    sock: Path, client: PodResourcesClient
) -> None:
    finder = HintFinder(None, client, budget_s=5)
    pod = PodInfo(
        id="s2",
        name="train",
        namespace="ml",
        annotations={"topologyhints.resource-policy.nri.io": "devices"},
    )
    async with serve(sock, Kubelet(answer([1]))) as kubelet:
        assert await finder.find(pod, MAIN, (), Options()) == ()
    assert kubelet.calls == []
    await finder.close()


async def test_a_list_larger_than_grpcs_default_limit(
    sock: Path, client: PodResourcesClient
) -> None:
    ids = [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(130_000)]
    bulk = pod_resources("bulk", "p", {"c": [("example.com/x", ids, [0])]})
    kubelet = Kubelet([bulk, *answer([1])], get_implemented=False)
    assert pb.ListPodResourcesResponse(pod_resources=kubelet.pods).ByteSize() > 4 << 20
    async with serve(sock, kubelet):
        got = await client.pod("ml", "train")
    assert got["main"][0].nodes == {1}


async def test_a_pod_removed_while_its_container_waits(
    sock: Path, client: PodResourcesClient
) -> None:
    finder = HintFinder(None, client, budget_s=5)
    async with serve(sock, Kubelet(answer([1]), gate=asyncio.Event())):
        waiting = asyncio.ensure_future(finder.find(POD, MAIN, (), Options()))
        await asyncio.sleep(0.05)
        finder.pod_removed(POD.id)
        assert await waiting == ()
    await finder.close()


async def test_the_client_follows_a_restarted_kubelet(sock: Path) -> None:
    client = PodResourcesClient(str(sock), timeout_s=10)
    try:
        async with serve(sock, Kubelet(answer([1]))):
            assert (await client.pod("ml", "train"))["main"][0].nodes == {1}
        # the kubelet restarts: its socket goes away and comes back with a new answer
        async with serve(sock, Kubelet(answer([3]))):
            assert (await client.pod("ml", "train"))["main"][0].nodes == {3}
    finally:
        await client.close()
