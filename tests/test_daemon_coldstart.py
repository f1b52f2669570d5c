"""Cold start with the real policy: memory starts without DRAM; DRAM comes by UpdateContainers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.simulate.machine_spec import load_bundled
from nri_topology.testing.harness import connected
from nri_topology.topology import cpuset
from nri_topology.topology.model import MemoryTier


@pytest.mark.looptime
async def test_cold_started_container_gets_dram_after_the_delay(tmp_path: Path) -> None:
    """On the loop's virtual clock: PMEM only for the annotated duration, then DRAM too."""
    machine = load_bundled("server")[1]  # DRAM nodes 0-3, PMEM nodes 4-5
    dram = {n.id for n in machine.nodes.values() if n.tier is MemoryTier.DRAM}
    plugin = TopologyPlugin(Policy(machine, Options()), checkpoint=Checkpoint(tmp_path / "s.json"))
    pod = api_pb2.PodSandbox(
        id="p1",
        name="db",
        namespace="default",
        uid="u1",
        annotations={"cold-start.resource-policy.nri.io/pod": "duration: 60s"},
    )
    pod.linux.cgroup_parent = "/kubepods/podu1"
    ctr = api_pb2.Container(id="c1", pod_sandbox_id="p1", name="db")
    res = ctr.linux.resources
    res.cpu.shares.value, res.cpu.quota.value, res.cpu.period.value = 2048, 200_000, 100_000
    res.memory.limit.value = 1 << 30
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        reply = await peer.create_container(pod, ctr)
        first = cpuset.parse(reply.adjust.linux.resources.cpu.mems)
        assert first and not first & dram  # PMEM only while cold
        await peer.start_container(pod, ctr)
        started = asyncio.get_running_loop().time()
        await asyncio.sleep(59.9)
        assert not peer.unsolicited_updates
        while not peer.unsolicited_updates:
            await asyncio.sleep(0.01)
        assert 60 <= asyncio.get_running_loop().time() - started < 60.5
        await plugin.settle()
        (update,) = peer.unsolicited_updates
        assert update.container_id == "c1"
        widened = cpuset.parse(peer.containers["c1"].linux.resources.cpu.mems)
        assert first < widened and widened & dram
