"""Restarts, reconnects and reloads with the real policy: only what must move moves, and a cold
start keeps its deadline.

The "server" machine: 4 DRAM NUMA nodes (CPU n belongs to node n % 4), 2 PMEM nodes. Excluding
node 1 with `available_resources` leaves socket #1 with one node, so its NUMA pool collapses into
the socket pool; the container on node 3 must still be adopted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import structlog.testing

from nri_topology.daemon.checkpoint import Checkpoint, encode
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.simulate.machine_spec import load_bundled
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier

S = 1_000_000_000
T0 = 1_700_000_000 * S  # the wall clock of the first run


def server() -> Machine:
    return load_bundled("server")[1]


def node_cpus(machine: Machine, node: int) -> frozenset[int]:
    return frozenset(c for c in machine.cpus if machine.cpus[c].node == node)


def without_node(machine: Machine, node: int) -> Options:
    return Options(
        available_resources=CpuAmount(cpus=frozenset(machine.cpus) - node_cpus(machine, node))
    )


def guaranteed(
    i: int, cpus: int, *, cold: str = ""
) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    annotations = {"cold-start.resource-policy.nri.io/pod": f"duration: {cold}"} if cold else {}
    pod = api_pb2.PodSandbox(
        id=f"p{i}", name=f"pod{i}", namespace="work", uid=f"u{i}", annotations=annotations
    )
    pod.linux.cgroup_parent = f"/kubepods/podu{i}"
    ctr = api_pb2.Container(
        id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
    )
    res = ctr.linux.resources
    res.cpu.shares.value, res.cpu.quota.value, res.cpu.period.value = (
        1024 * cpus,
        100_000 * cpus,
        100_000,
    )
    res.memory.limit.value = 1 << 30
    return pod, ctr


def one_per_node(
    machine: Machine, first: bool = False
) -> tuple[list[api_pb2.PodSandbox], list[api_pb2.Container]]:
    """Four 4-CPU Guaranteed containers as a previous run left them: c<n> on NUMA node n; with
    `first`, c1-c3 on the first CPUs of their node, one of which (3) a 750m reservation takes
    when node 1 is excluded and it is picked anew."""
    pods, ctrs = [], []
    for n in range(4):
        pod, ctr = guaranteed(n, 4)
        held = (
            sorted(node_cpus(machine, n))[:4] if first and n else sorted(node_cpus(machine, n))[4:8]
        )
        ctr.linux.resources.cpu.cpus = cpuset.format(frozenset(held))
        ctr.linux.resources.cpu.mems = str(n)
        pods.append(pod)
        ctrs.append(ctr)
    return pods, ctrs


def plugin(
    machine: Machine, state: Path, options: Options | None = None, now_ns: int = T0
) -> TopologyPlugin:
    return TopologyPlugin(
        Policy(machine, options or Options()),
        checkpoint=Checkpoint(state),
        wall_clock_ns=lambda: now_ns,
    )


def re_placed(logs: list[dict]) -> list[str]:
    return [e["container_id"] for e in logs if e["event"] == "container re-placed"]


def cpus_of(plugin: TopologyPlugin) -> dict[str, frozenset[int]]:
    return {cid: a.cpus or frozenset() for cid, a in plugin.policy.assignments().items()}


async def first_run(
    machine: Machine, state: Path, first: bool = False
) -> tuple[list, list, dict[str, frozenset[int]]]:
    pods, ctrs = one_per_node(machine, first)
    first = plugin(machine, state)
    async with connected(first, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
        assert peer.applied_updates == []  # all four adopted as found
        await first.flush()
        return list(peer.pods.values()), list(peer.containers.values()), cpus_of(first)


ON_THE_PICK = pytest.mark.parametrize("first", [False, True], ids=["", "on-the-reservations-pick"])


@ON_THE_PICK
async def test_restart_after_excluding_a_node_moves_only_that_nodes_container(
    tmp_path: Path, first: bool
) -> None:
    machine, state = server(), tmp_path / "state.json"
    pods, ctrs, before = await first_run(machine, state, first)
    second = plugin(machine, state, without_node(machine, 1))
    with structlog.testing.capture_logs() as logs:
        async with connected(second, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
            await asyncio.sleep(0)  # decision log lines go out after the reply
            assert [u.container_id for u in peer.applied_updates] == ["c1"]
            after = cpus_of(second)
    assert re_placed(logs) == ["c1"]
    assert {c: after[c] for c in ("c0", "c2", "c3")} == {c: before[c] for c in ("c0", "c2", "c3")}
    assert not after["c1"] & node_cpus(machine, 1)
    (sync,) = [e for e in logs if e["event"] == "synchronized with the runtime"]
    assert (sync["adopted"], sync["replaced"]) == (3, 1)
    assert second.policy.pools()[0].reserved == {0}  # kept from the checkpoint


@ON_THE_PICK
async def test_reload_after_excluding_a_node_moves_only_that_nodes_container(
    tmp_path: Path, first: bool
) -> None:
    machine, state = server(), tmp_path / "state.json"
    pods, ctrs = one_per_node(machine, first)
    running = plugin(machine, state)
    async with connected(running, RuntimePeer(pods=pods, containers=ctrs)) as (peer, stub):
        running.stub = stub
        before = cpus_of(running)
        with structlog.testing.capture_logs() as logs:
            await running.reconfigure(without_node(machine, 1))
            await running.settle()
            await asyncio.sleep(0)
        assert [u.container_id for u in peer.unsolicited_updates] == ["c1"]
        after = cpus_of(running)
    assert re_placed(logs) == ["c1"]
    assert {c: after[c] for c in ("c0", "c2", "c3")} == {c: before[c] for c in ("c0", "c2", "c3")}
    assert not after["c1"] & node_cpus(machine, 1)


async def cold_started(machine: Machine, state: Path, duration: str) -> tuple[list, list, int]:
    """A first run that creates and starts one cold-started container at T0; its saved deadline."""
    first = plugin(machine, state)
    async with connected(first) as (peer, _):
        pod, ctr = guaranteed(1, 2, cold=duration)
        await peer.run_pod_sandbox(pod)
        reply = await peer.create_container(pod, ctr)
        dram = {n for n, x in machine.nodes.items() if x.tier is MemoryTier.DRAM}
        assert not cpuset.parse(reply.adjust.linux.resources.cpu.mems) & dram  # cold
        await peer.start_container(pod, ctr)
        await first.flush()
        await first.shutdown()
        body = Checkpoint(state).load().body
        assert body is not None
        return (
            list(peer.pods.values()),
            list(peer.containers.values()),
            body["cold_starts"]["deadline_ns"]["c1"],
        )


async def test_restart_mid_cold_start_keeps_the_saved_deadline(tmp_path: Path) -> None:
    machine, state = server(), tmp_path / "state.json"
    pods, ctrs, deadline = await cold_started(machine, state, "100s")
    assert deadline == T0 + 100 * S
    # 60 s later a new process starts; 40 s of the cold start are left, not 100
    second = plugin(machine, state, now_ns=T0 + 60 * S)
    with structlog.testing.capture_logs() as logs:
        async with connected(second, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
            await asyncio.sleep(0)
            assert peer.applied_updates == []
            await second.flush()
            body = Checkpoint(state).load().body
            assert body is not None and body["cold_starts"]["deadline_ns"] == {"c1": deadline}
        # and on a reconnect within the same process
        async with connected(second, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
            await second.flush()
            body = Checkpoint(state).load().body
            assert body is not None and body["cold_starts"]["deadline_ns"] == {"c1": deadline}
    assert re_placed(logs) == []


@pytest.mark.looptime
async def test_cold_start_that_ended_while_down_widens_at_once(tmp_path: Path) -> None:
    machine, state = server(), tmp_path / "state.json"
    pods, ctrs, deadline = await cold_started(machine, state, "100s")
    second = plugin(machine, state, now_ns=deadline + 5 * S)
    dram = {n for n, x in machine.nodes.items() if x.tier is MemoryTier.DRAM}
    async with connected(second, RuntimePeer(pods=pods, containers=ctrs)):
        async with asyncio.timeout(5):
            while not (second.policy.assignments()["c1"].mems or frozenset()) & dram:
                await asyncio.sleep(0.01)
        await second.flush()
        body = Checkpoint(state).load().body
        assert body is not None and body["cold_starts"]["deadline_ns"] == {}


async def test_a_clock_set_back_cannot_stretch_a_cold_start(tmp_path: Path) -> None:
    machine, state = server(), tmp_path / "state.json"
    pods, ctrs, _ = await cold_started(machine, state, "100s")
    second = plugin(machine, state, now_ns=T0 - 3600 * S)  # the clock went back an hour
    async with connected(second, RuntimePeer(pods=pods, containers=ctrs)):
        await second.flush()
        body = Checkpoint(state).load().body
        assert body is not None
        assert body["cold_starts"]["deadline_ns"] == {"c1": T0 - 3600 * S + 100 * S}


async def test_forged_checkpoint_with_a_valid_checksum_moves_nothing(tmp_path: Path) -> None:
    machine, state = server(), tmp_path / "state.json"
    first = plugin(machine, state)
    async with connected(first) as (peer, _):
        for i in range(20):
            pod, ctr = guaranteed(i, 1) if i % 2 else guaranteed(i, 2)
            if i % 4 == 1:  # 1500m: one exclusive CPU and a shared part
                ctr.linux.resources.cpu.quota.value = 150_000
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await first.flush()
        pods, ctrs = list(peer.pods.values()), list(peer.containers.values())
    body = Checkpoint(state).load().body
    assert body is not None
    for entry in body["policy"]["containers"].values():
        entry.update(exclusive="0-111", pool="nowhere")
    state.write_bytes(encode(body))  # a valid checksum over nonsense
    second = plugin(machine, state)
    with structlog.testing.capture_logs() as logs:
        async with connected(second, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
            assert peer.applied_updates == []
            assert cpus_of(second) == cpus_of(first)
    (warning,) = [e for e in logs if e["event"].startswith("checkpoint entries contradict")]
    assert warning["dropped"] == 20 and warning["log_level"] == "warning"
    assert counter(second, "checkpoint_implausible") == 20


def counter(p: TopologyPlugin, reason: str) -> float:
    value = p.metrics.registry.get_sample_value("nri_topology_errors_total", {"reason": reason})
    return value or 0.0


async def test_checkpoint_of_the_wrong_shapes_is_survived(tmp_path: Path) -> None:
    machine, state = server(), tmp_path / "state.json"
    pods, ctrs, before = await first_run(machine, state)
    body = Checkpoint(state).load().body
    assert body is not None
    body["cold_starts"] = {"pending_ns": [1, 2], "deadline_ns": "soon"}
    body["policy"]["containers"]["c0"] = ["not", "an", "entry"]
    body["policy"]["containers"]["c1"]["exclusive"] = "0-999999999999"
    state.write_bytes(encode(body))
    second = plugin(machine, state)
    async with connected(second, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
        assert peer.applied_updates == [] and cpus_of(second) == before
