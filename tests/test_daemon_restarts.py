"""A container's next attempt in the same pod, with the real policy through the socket.

When a container of a Guaranteed pod crashes, the kubelet creates its next attempt in the same
pod under the same name while the exited one is not yet removed. The next attempt gets the CPUs
the previous one held, and no other container is re-pinned at the stop nor at the creation.
"""

from __future__ import annotations

import asyncio

import pytest

from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.settings import Settings
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.testing.harness import connected
from nri_topology.topology.model import Machine
from tests import machines

SHARED = 6  # burstable pods beside the guaranteed one


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    spec = machines.SyntheticSpec(sockets=1, nodes=1, cores=8, threads=2)
    return machines.synthetic(tmp_path_factory.mktemp("machine"), spec)


def _pod(name: str, guaranteed: bool) -> api_pb2.PodSandbox:
    pod = api_pb2.PodSandbox(id=f"sb-{name}", name=name, namespace="work", uid=f"uid-{name}")
    pod.linux.cgroup_parent = f"/kubepods/{'' if guaranteed else 'burstable/'}poduid-{name}"
    return pod


def _container(
    pod: api_pb2.PodSandbox, cid: str, name: str = "app", cpus: int = 0
) -> api_pb2.Container:
    ctr = api_pb2.Container(
        id=cid, pod_sandbox_id=pod.id, name=name, state=api_pb2.CONTAINER_CREATED
    )
    res = ctr.linux.resources
    if cpus:
        res.cpu.shares.value = 1024 * cpus
        res.cpu.quota.value = 100_000 * cpus
        res.cpu.period.value = 100_000
        res.memory.limit.value = 64 << 20
    else:
        res.cpu.shares.value = 102
    return ctr


def _plugin(machine: Machine, hold_s: float) -> TopologyPlugin:
    return TopologyPlugin(Policy(machine, Options()), settings=Settings(restart_hold_s=hold_s))


async def _node(peer, cpus: int = 2) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    """Shared pods, then a guaranteed pod whose container `g-0` holds `cpus` exclusive CPUs."""
    for i in range(SHARED):
        pod = _pod(f"shared{i}", guaranteed=False)
        await peer.run_pod_sandbox(pod)
        await peer.create_container(pod, _container(pod, f"s{i}"))
    pod = _pod("guaranteed", guaranteed=True)
    await peer.run_pod_sandbox(pod)
    ctr = _container(pod, "g-0", cpus=cpus)
    await peer.create_container(pod, ctr)
    return pod, ctr


def _exclusive(plugin: TopologyPlugin, cid: str) -> frozenset[int]:
    return plugin.policy.assignments()[cid].exclusive


def _moved(peer) -> list[str]:
    """Containers re-pinned since the peer last forgot: in replies and through UpdateContainers."""
    return sorted({u.container_id for u in (*peer.applied_updates, *peer.unsolicited_updates)})


def _forget(peer) -> None:
    peer.applied_updates.clear()
    peer.unsolicited_updates.clear()


async def test_next_attempt_gets_the_same_cpus_and_nobody_moves(machine: Machine) -> None:
    plugin = _plugin(machine, hold_s=60)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        pod, first = await _node(peer)
        await plugin.settle()  # the re-pins that follow the reply have landed
        held = _exclusive(plugin, "g-0")
        assert len(held) == 2
        shared = plugin.policy.placements(["s0"])["s0"].cpus
        assert shared is not None and not shared & held
        _forget(peer)
        reply = await peer.stop_container(pod, first)
        assert list(reply.update) == []
        await peer.create_container(pod, _container(pod, "g-1", cpus=2))
        await plugin.settle()
        assert _exclusive(plugin, "g-1") == held
        assert "g-0" not in plugin.policy.assignments()
        assert _moved(peer) == []
        assert plugin.policy.placements(["s0"])["s0"].cpus == shared
        # The exited attempt is removed afterwards: nothing changes either.
        await peer.remove_container(pod, first)
        await plugin.settle()
        assert _moved(peer) == []
        assert _exclusive(plugin, "g-1") == held


async def test_without_a_hold_the_stop_gives_the_cpus_back(machine: Machine) -> None:
    plugin = _plugin(machine, hold_s=0)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        pod, first = await _node(peer)
        await plugin.settle()
        _forget(peer)
        await peer.stop_container(pod, first)
        await plugin.settle()  # in the reply or after it, as the schedule sends them
        assert _moved(peer) == [f"s{i}" for i in range(SHARED)]


@pytest.mark.parametrize("end", ["expiry", "remove", "stop-pod", "remove-pod"])
async def test_a_hold_ends_and_the_shared_containers_get_the_cpus(
    machine: Machine, end: str
) -> None:
    plugin = _plugin(machine, hold_s=0.05 if end == "expiry" else 60)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        pod, first = await _node(peer)
        await plugin.settle()  # the re-pins that follow the reply have landed
        held = _exclusive(plugin, "g-0")
        _forget(peer)
        await peer.stop_container(pod, first)
        assert _moved(peer) == []
        if end == "expiry":
            await asyncio.sleep(0.2)
        elif end == "remove":
            await peer.remove_container(pod, first)
        elif end == "stop-pod":
            await peer.stop_pod_sandbox(pod)
        else:
            await peer.remove_container(pod, first)
            await peer.remove_pod_sandbox(pod)
        await plugin.settle()
        assert "g-0" not in plugin.policy.assignments()
        assert _moved(peer) == [f"s{i}" for i in range(SHARED)]
        shared = plugin.policy.placements(["s0"])["s0"].cpus
        assert shared is not None and held <= shared


async def test_a_next_attempt_asking_for_more_is_placed_afresh(machine: Machine) -> None:
    plugin = _plugin(machine, hold_s=60)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        pod, first = await _node(peer)
        await plugin.settle()  # the re-pins that follow the reply have landed
        held = _exclusive(plugin, "g-0")
        await peer.stop_container(pod, first)
        await peer.create_container(pod, _container(pod, "g-1", cpus=4))
        now = _exclusive(plugin, "g-1")
        assert len(now) == 4 and held <= now  # its old CPUs first
        assert "g-0" not in plugin.policy.assignments()


async def test_another_container_of_the_pod_does_not_take_the_cpus(machine: Machine) -> None:
    plugin = _plugin(machine, hold_s=60)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        pod, first = await _node(peer)
        await plugin.settle()  # the re-pins that follow the reply have landed
        held = _exclusive(plugin, "g-0")
        await peer.stop_container(pod, first)
        await peer.create_container(pod, _container(pod, "side-0", name="side", cpus=2))
        assert not _exclusive(plugin, "side-0") & held
        assert _exclusive(plugin, "g-0") == held  # still held for its own next attempt
