"""Pod-level resources through the daemon and the runtime peer: the sandbox's `pod_resources`
give a container that states nothing its CPUs, and an in-place pod resize (`UpdatePodSandbox`,
subscribed to only where the runtime knows the event) re-places it through UpdateContainers."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.nri.versions import event_bit
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine
from tests import machines

GIB = 1 << 30


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    spec = machines.SyntheticSpec(sockets=1, nodes=2, cores=4, threads=1)
    return machines.synthetic(Path(tmp_path_factory.mktemp("m")), spec)


def resources(cpus: int) -> api_pb2.LinuxResources:
    """The cgroup settings of `cpus` CPUs and 1 GiB, as the kubelet writes a Guaranteed pod's."""
    res = api_pb2.LinuxResources()
    res.cpu.shares.value = 1024 * cpus
    res.cpu.quota.value = 100_000 * cpus
    res.cpu.period.value = 100_000
    res.memory.limit.value = GIB
    return res


def pod_level(cpus: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    """A Guaranteed pod stating `cpus` CPUs for the pod, and its one container stating none."""
    pod = api_pb2.PodSandbox(id="p1", name="pod1", namespace="ns", uid="u1")
    pod.linux.cgroup_parent = "/kubepods/podu1"
    pod.linux.pod_resources.CopyFrom(resources(cpus))
    ctr = api_pb2.Container(
        id="c1", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING, created_at=1
    )
    ctr.linux.resources.cpu.shares.value = 2  # what the kubelet writes for no request
    return pod, ctr


def test_pod_resources_place_the_container_and_a_pod_resize_moves_it(machine: Machine) -> None:
    async def scenario() -> tuple[str, str, bool, list[str]]:
        plugin = TopologyPlugin(Policy(machine, Options(reserved_resources=CpuAmount(milli=0))))
        async with connected(plugin, RuntimePeer(request_timeout=2.0)) as (peer, stub):
            plugin.stub = stub  # as the service sets it: UpdateContainers go through it
            subscribed = bool(stub.events & event_bit(api_pb2.UPDATE_POD_SANDBOX))
            pod, ctr = pod_level(2)
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
            before = peer.containers["c1"].linux.resources.cpu.cpus
            await peer.update_pod_sandbox(pod, resources=resources(3))
            for _ in range(200):
                if peer.unsolicited_updates:
                    break
                await asyncio.sleep(0.01)
            after = peer.containers["c1"].linux.resources.cpu.cpus
            with pytest.raises(PluginError, match="nri-topology"):  # 20 CPUs: no pool has them
                await peer.update_pod_sandbox(pod, resources=resources(20))
            kept = plugin.policy.assignments()["c1"].cpus
            methods = [c.method for c in peer.calls]
        return before, after, kept, subscribed, methods

    before, after, kept, subscribed, methods = asyncio.run(scenario())
    assert subscribed and "UpdatePodSandbox" in methods
    assert len(cpuset.parse(before)) == 2  # two exclusive CPUs from the pod's resources
    assert len(cpuset.parse(after)) == 3
    assert kept == cpuset.parse(after)  # a refused resize keeps what it held


def test_a_pod_resize_sends_its_re_pins_through_the_schedule(machine: Machine) -> None:
    """The resized container and the shared containers that give it a CPU are re-pinned as any
    other change: coalesced, in the schedule's batches."""

    async def scenario() -> tuple[float, float, list[str]]:
        plugin = TopologyPlugin(Policy(machine, Options(reserved_resources=CpuAmount(milli=0))))
        async with connected(plugin, RuntimePeer(request_timeout=2.0)) as (peer, stub):
            plugin.stub = stub
            for i in range(4):
                shared = api_pb2.PodSandbox(id=f"s{i}", name=f"s{i}", namespace="ns", uid=f"v{i}")
                shared.linux.cgroup_parent = f"/kubepods/besteffort/podv{i}"
                await peer.run_pod_sandbox(shared)
                c = api_pb2.Container(id=f"sc{i}", pod_sandbox_id=shared.id, name="app")
                c.linux.resources.cpu.shares.value = 2
                await peer.create_container(shared, c)
            pod, ctr = pod_level(2)
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
            await plugin.settle()
            peer.unsolicited_updates.clear()
            sample = plugin.metrics.registry.get_sample_value
            sent_before = sample("nri_topology_repins_total", {"outcome": "sent"}) or 0.0
            batches_before = sample("nri_topology_update_batch_seconds_count") or 0.0
            await peer.update_pod_sandbox(pod, resources=resources(3))
            await plugin.settle()
            sent = (sample("nri_topology_repins_total", {"outcome": "sent"}) or 0.0) - sent_before
            batches = (sample("nri_topology_update_batch_seconds_count") or 0.0) - batches_before
            return sent, batches, sorted(u.container_id for u in peer.unsolicited_updates)

    sent, batches, updated = asyncio.run(scenario())
    assert "c1" in updated and len(updated) >= 3  # it, and the shared containers of its pool
    assert sent == len(updated)
    assert batches >= math.ceil(sent / 3)  # the schedule's batches of three at most


@pytest.mark.parametrize(("nri", "subscribed"), [("v0.12.2", True), ("v0.9.0", False)])
def test_update_pod_sandbox_is_asked_for_only_where_the_runtime_knows_it(
    machine: Machine, nri: str, subscribed: bool
) -> None:
    async def scenario() -> int:
        plugin = TopologyPlugin(Policy(machine, Options()))
        async with connected(plugin, RuntimePeer(nri_version=nri)) as (_, stub):
            return stub.events

    events = asyncio.run(scenario())
    assert bool(events & event_bit(api_pb2.UPDATE_POD_SANDBOX)) is subscribed
