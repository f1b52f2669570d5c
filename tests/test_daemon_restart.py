"""Restart with the real policy: 300 running containers survive a plugin restart unmoved, whether
the checkpoint is there, is older than the last creations (a crash before the next write), or the
state is rebuilt from Synchronize alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology.model import Machine
from tests import machines
from tests.pods import running_pair

EXCLUSIVE = 40  # guaranteed pods with 2 whole CPUs each
SHARED = 260  # burstable pods with 100m each


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    spec = machines.SyntheticSpec(sockets=2, nodes=2, cores=16, threads=2)
    return machines.synthetic(tmp_path_factory.mktemp("machine"), spec)


def _workload() -> list[tuple[api_pb2.PodSandbox, api_pb2.Container]]:
    return [
        running_pair(f"{i:03}", i % 7 == 0 and i // 7 < EXCLUSIVE)
        for i in range(EXCLUSIVE + SHARED)
    ]


def _plugin(machine: Machine, state: Path) -> TopologyPlugin:
    return TopologyPlugin(Policy(machine, Options()), checkpoint=Checkpoint(state))


def _exclusive(plugin: TopologyPlugin) -> dict[str, frozenset[int]]:
    return {cid: a.exclusive for cid, a in plugin.policy.assignments().items() if a.exclusive}


async def _first_run(machine: Machine, state: Path):
    plugin = _plugin(machine, state)
    async with connected(plugin) as (peer, _):
        for pod, ctr in _workload():
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await plugin.settle()  # the re-pins that follow the replies
        await plugin.flush()
        return plugin, list(peer.pods.values()), list(peer.containers.values())


@pytest.fixture(scope="module")
def running(machine: Machine, tmp_path_factory: pytest.TempPathFactory):
    """The first run: 300 containers created through the socket, then the plugin goes away."""
    state = tmp_path_factory.mktemp("state") / "state.json"
    plugin, pods, containers = asyncio.run(_first_run(machine, state))
    return plugin, state, pods, containers


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "synchronize-only"])
async def test_restart_moves_no_exclusive_cpu(
    running, machine: Machine, tmp_path: Path, checkpoint: bool
) -> None:
    first, state, pods, containers = running
    before = _exclusive(first)
    assert len(before) == EXCLUSIVE and len(containers) == EXCLUSIVE + SHARED
    path = tmp_path / "state.json"
    if checkpoint:
        path.write_bytes(state.read_bytes())
    second = _plugin(machine, path)
    peer = RuntimePeer(pods=pods, containers=containers)
    async with connected(second, peer):
        assert _exclusive(second) == before
        assert len(second.policy.assignments()) == EXCLUSIVE + SHARED
        moved = [
            u.container_id
            for u in peer.applied_updates
            if u.container_id in before and u.linux.resources.cpu.cpus
        ]
        assert moved == []
        if checkpoint:
            assert peer.applied_updates == []
        await second.flush()
        assert Checkpoint(path).load().body is not None  # rewritten after the restore


async def test_crash_before_the_next_checkpoint_moves_no_exclusive_cpu(
    machine: Machine, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    stale = tmp_path / "stale.json"
    workload = _workload()
    first = _plugin(machine, state)
    async with connected(first) as (peer, _):
        for pod, ctr in workload[:150]:
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await first.flush()
        stale.write_bytes(state.read_bytes())  # the last write before the crash
        for pod, ctr in workload[150:]:
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        pods, containers = list(peer.pods.values()), list(peer.containers.values())
    before = _exclusive(first)
    saved = Checkpoint(stale).load().body
    assert saved is not None
    late = set(before) - set(saved["policy"]["containers"])
    assert late  # exclusive containers the checkpoint does not know
    second = _plugin(machine, stale)
    peer = RuntimePeer(pods=pods, containers=containers)
    async with connected(second, peer):
        assert _exclusive(second) == before
        assert len(second.policy.assignments()) == EXCLUSIVE + SHARED
        moved = {u.container_id for u in peer.applied_updates if u.container_id in before}
        assert moved == set()


KINDS = ("capacity", "free", "assigned")


def test_metrics_match_the_real_policy_views(running) -> None:
    plugin = running[0]
    text = generate_latest(plugin.metrics.registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    pools = plugin.policy.pools()
    assert pools
    for view in pools:
        label = (("pool", view.name),)
        cores = {k: samples[(f"nri_topology_pool_cpu_{k}_cores", label)] for k in KINDS}
        assert cores == {
            "capacity": view.capacity_milli / 1000,
            "free": view.free_milli / 1000,
            "assigned": view.assigned_milli / 1000,
        }
        assert samples[("nri_topology_pool_containers", label)] == view.containers
        for tier, memory in view.memory.items():
            key = (("pool", view.name), ("tier", str(tier)))
            assert samples[("nri_topology_pool_memory_free_bytes", key)] == memory.free
    per_container = [k for k in samples if k[0] == "nri_topology_container_cpus"]
    assert len(per_container) == EXCLUSIVE + SHARED
    exclusive = sum(
        v for k, v in samples.items() if k[0] == "nri_topology_container_exclusive_cpus"
    )
    assert exclusive == 2 * EXCLUSIVE
