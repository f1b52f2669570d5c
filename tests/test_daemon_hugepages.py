"""Hugepages through the daemon and the runtime peer: a container's hugetlb limits as the runtime
sends them (`hugepage_limits`, page sizes as `2MB`/`1GB`) are booked on NUMA nodes that hold
them, its memory nodes include them, `status` and `explain` show them, and a container asking
for more than is left is refused before it starts."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.status import StatusPages
from nri_topology.nri import api_pb2
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology.model import Machine
from tests import machines

G1 = 1 << 20  # kB
GIB = 1 << 30
# node 0 holds no 1 GiB page, node 1 holds two
PAGES = {0: {2048: 0, G1: 0}, 1: {2048: 0, G1: 2}}


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    """1 socket x 2 NUMA nodes x 4 cores x 2 threads: node 0 CPUs 0-3,8-11, node 1 4-7,12-15."""
    spec = machines.SyntheticSpec(sockets=1, nodes=2, cores=4, threads=2)
    m = machines.synthetic(Path(tmp_path_factory.mktemp("m")), spec)
    return replace(m, nodes={i: replace(n, hugepages=PAGES[i]) for i, n in m.nodes.items()})


def guaranteed(n: int, cpus: int, pages_1g: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    """A Guaranteed pod of one container with `cpus` CPUs, 1 GiB of memory and `pages_1g` pages
    of 1 GiB, its limits as the kubelet has the runtime write them (0 for sizes not asked)."""
    pod = api_pb2.PodSandbox(id=f"p{n}", name=f"pod{n}", namespace="ns", uid=f"u{n}")
    pod.linux.cgroup_parent = f"/kubepods/podu{n}"
    ctr = api_pb2.Container(
        id=f"c{n}", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
    )
    res = ctr.linux.resources
    res.cpu.shares.value = 1024 * cpus
    res.cpu.quota.value = 100_000 * cpus
    res.cpu.period.value = 100_000
    res.memory.limit.value = GIB
    res.hugepage_limits.add(page_size="2MB", limit=0)
    res.hugepage_limits.add(page_size="1GB", limit=pages_1g * GIB)
    return pod, ctr


def test_hugepages_booked_shown_and_refused_through_the_runtime(machine: Machine) -> None:
    async def scenario() -> tuple[list[str], str, dict, dict, str, str]:
        plugin = TopologyPlugin(Policy(machine, Options(reserved_resources=CpuAmount(milli=0))))
        pages = StatusPages(plugin, machine, "node-a")
        async with connected(plugin, RuntimePeer(request_timeout=2.0)) as (peer, _):
            await peer.create_container(*guaranteed(1, 2, 1))
            await peer.create_container(*guaranteed(2, 2, 1))
            with pytest.raises(PluginError) as refused:
                await peer.create_container(*guaranteed(3, 2, 1))
            mems = [peer.containers[c].linux.resources.cpu.mems for c in ("c1", "c2")]
            cpus = peer.containers["c1"].linux.resources.cpu.cpus
            _, _, text = pages.status("text")
            _, _, doc = pages.status("json")
            _, _, explained = pages.explain("ns/pod1/app", "json")
            # A stopped container's CPUs and pages wait for its next attempt until it is removed.
            await peer.stop_container(*guaranteed(1, 2, 1))
            await peer.remove_container(*guaranteed(1, 2, 1))
            await peer.create_container(*guaranteed(3, 2, 1))  # its page is free again
            mems.append(peer.containers["c3"].linux.resources.cpu.mems)
        return (
            mems,
            cpus,
            json.loads(doc),
            json.loads(explained),
            text.decode(),
            str(refused.value),
        )

    mems, cpus, status, explained, text, refused = asyncio.run(scenario())
    assert mems == ["1", "1", "1"]  # node 1 holds the pages; the CPUs follow them
    assert cpus and all(int(c) in machine.nodes[1].cpus for c in cpus.replace("-", ",").split(","))
    assert "1 pages of hugepages-1Gi asked, 0 free" in refused
    (c1,) = [c for c in status["containers"] if c["container_id"] == "c1"]
    assert c1["hugepages"] == [{"node": 1, "resource": "hugepages-1Gi", "pages": 1}]
    root = next(p for p in status["pools"] if p["parent"] is None)
    assert root["hugepages"] == {"hugepages-1Gi": {"pages": 2, "free": 0}}
    assert "hugepages-1Gi 0 of 2 pages free" in text
    assert "(hugepages-1Gi 1 on node 1)" in text
    (e,) = explained["containers"]
    assert e["decision"]["hugepages"] == [{"node": 1, "resource": "hugepages-1Gi", "pages": 1}]


def test_a_restarted_plugin_books_the_running_containers_pages_again(machine: Machine) -> None:
    """A new plugin process synchronizes with the containers running: their pages are booked
    again on their memory nodes, `explain` shows them for the adopted container, and the next
    container still finds none free."""

    async def scenario() -> tuple[dict, str]:
        opts = Options(reserved_resources=CpuAmount(milli=0))
        peer = RuntimePeer(request_timeout=2.0)
        async with connected(TopologyPlugin(Policy(machine, opts)), peer):
            pod, ctr = guaranteed(1, 2, 2)
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        plugin = TopologyPlugin(Policy(machine, opts))
        async with connected(plugin, peer):
            _, _, explained = StatusPages(plugin, machine, "node-a").explain("ns/pod1/app", "json")
            with pytest.raises(PluginError) as refused:
                await peer.create_container(*guaranteed(2, 2, 1))
        return json.loads(explained), str(refused.value)

    explained, refused = asyncio.run(scenario())
    (e,) = explained["containers"]
    assert e["decision"]["what"] == "adopted"
    assert e["decision"]["hugepages"] == [{"node": 1, "resource": "hugepages-1Gi", "pages": 2}]
    assert "1 pages of hugepages-1Gi asked, 0 free" in refused
