"""Device hints through the daemon with the real policy: sysfs devices, the kubelet, resizes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import structlog

from nri_topology.config.load import config_from
from nri_topology.config.schema import Config
from nri_topology.daemon import convert
from nri_topology.daemon.hints import HintFinder
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.settings import hint_finder
from nri_topology.kubelet.podresources import PodResourcesClient
from nri_topology.nri import api_pb2
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.topology import cpuset
from nri_topology.topology.devices import DeviceLocator
from nri_topology.topology.model import Machine
from nri_topology.topology.sysfs import read_machine
from tests import machines
from tests.podresources_server import Kubelet, pod_resources, serve

OPTS = Options(reserved_resources=CpuAmount(milli=0))


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    """2 sockets x 2 nodes x 2 cores x 2 threads, a GPU on node 3 and a VFIO NIC on node 1."""
    spec = machines.SyntheticSpec(sockets=2, nodes=2, cores=2, threads=2, memory=8 << 30)
    root = machines.write_sysfs(tmp_path, spec)
    machines.add_pci_device(root, "0000:3b:00.0", node=3, char=(226, 0), child="drm/card0")
    machines.add_pci_device(root, "0000:18:00.1", node=1, iommu_group=17)
    return root


@pytest.fixture
def machine(sys_root: Path) -> Machine:
    return read_machine(sys_root)


def pod(name: str = "train") -> api_pb2.PodSandbox:
    p = api_pb2.PodSandbox(id=f"sb-{name}", name=name, namespace="ml", uid=f"uid-{name}")
    p.linux.cgroup_parent = "/kubepods/podx"
    return p


def guaranteed(cid: str, cpus: int, p: api_pb2.PodSandbox, name: str = "main") -> api_pb2.Container:
    c = api_pb2.Container(id=cid, pod_sandbox_id=p.id, name=name, state=api_pb2.CONTAINER_CREATED)
    r = c.linux.resources
    r.cpu.shares.value = cpus * 1024
    r.cpu.quota.value = cpus * 100_000
    r.cpu.period.value = 100_000
    r.memory.limit.value = 64 << 20
    return c


def nodes_of(m: Machine, adjust: api_pb2.ContainerAdjustment) -> set[int]:
    return {m.cpus[c].node for c in cpuset.parse(adjust.linux.resources.cpu.cpus)}


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


async def test_a_gpu_device_places_the_container_on_its_node(
    sys_root: Path, machine: Machine
) -> None:
    plugin = TopologyPlugin(Policy(machine, OPTS), hints=HintFinder(DeviceLocator(sys_root), None))
    p = pod()
    await plugin.run_pod_sandbox(p)
    plain, _ = await plugin.create_container(p, guaranteed("c0", 2, p))
    assert nodes_of(machine, plain) == {0}
    c = guaranteed("c1", 2, p)
    c.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
    adjust, _ = await plugin.create_container(p, c)
    assert nodes_of(machine, adjust) == {3}
    assert adjust.linux.resources.cpu.mems == "3"
    # a resize keeps the device's pull: the hints found at creation stay with the container
    bigger = guaranteed("c1", 3, p).linux.resources
    updates = await plugin.update_container(p, c, bigger)
    assert {machine.cpus[x].node for x in cpuset.parse(updates[-1].linux.resources.cpu.cpus)} == {3}
    await plugin.shutdown()


async def test_a_missed_device_node_is_said_and_counted(sys_root: Path, machine: Machine) -> None:
    plugin = TopologyPlugin(Policy(machine, OPTS), hints=HintFinder(DeviceLocator(sys_root), None))
    missed = "nri_topology_topology_hints_missed_total"
    p = pod()
    await plugin.run_pod_sandbox(p)
    for cid, cpus in (("c0", 4), ("c1", 1)):  # c0 fills node 3; c1 gets a CPU of node 2
        c = guaranteed(cid, cpus, p)
        c.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
        with structlog.testing.capture_logs() as logs:
            adjust, _ = await plugin.create_container(p, c)
            await asyncio.sleep(0)
        assert nodes_of(machine, adjust) == ({3} if cid == "c0" else {2})
        (placed,) = [e for e in logs if e.get("container_id") == cid and "reason" in e]
        assert ("covered" if cid == "c0" else "missed, CPUs on NUMA 2") in placed["reason"]
        assert plugin.metrics.registry.get_sample_value(missed) == (0 if cid == "c0" else 1)
    await plugin.shutdown()


async def test_a_vfio_mount_and_an_unknown_device(sys_root: Path, machine: Machine) -> None:
    plugin = TopologyPlugin(Policy(machine, OPTS), hints=HintFinder(DeviceLocator(sys_root), None))
    p = pod()
    c = guaranteed("c1", 2, p)
    c.mounts.add(destination="/dev/vfio/17", source="/dev/vfio/17", options=["rbind", "rw"])
    c.linux.devices.add(path="/dev/gone", type="c", major=9, minor=9)
    with structlog.testing.capture_logs() as logged:
        adjust, _ = await plugin.create_container(p, c)
    assert nodes_of(machine, adjust) == {1}
    warned = [e for e in logged if e["event"] == "device not found in sysfs, no hint from it"]
    assert warned and "/dev/gone" in warned[0]["detail"]
    await plugin.shutdown()


async def test_pod_resources_hints_and_a_stuck_kubelet_never_hold_the_reply(
    machine: Machine, sock: Path
) -> None:
    kubelet = Kubelet([pod_resources("ml", "train", {"main": [("nvidia.com/gpu", ["0"], [2])]})])
    # A budget no busy machine exhausts while the kubelet answers, then a short one it does not.
    finder = HintFinder(None, PodResourcesClient(str(sock), timeout_s=30), budget_s=30)
    plugin = TopologyPlugin(Policy(machine, OPTS), hints=finder)
    async with serve(sock, kubelet):
        p = pod()
        await plugin.run_pod_sandbox(p)
        adjust, _ = await plugin.create_container(p, guaranteed("c1", 2, p))
        assert nodes_of(machine, adjust) == {2}
        # a kubelet that never answers: the container is placed without hints, in time
        kubelet.gate = asyncio.Event()
        finder.budget_s = 0.05
        stuck = pod("stuck")
        await plugin.run_pod_sandbox(stuck)
        with structlog.testing.capture_logs() as logged:
            adjust, _ = await asyncio.wait_for(
                plugin.create_container(stuck, guaranteed("c2", 2, stuck)), timeout=20
            )
        assert not kubelet.gate.is_set()  # answered while the kubelet still holds the call
        assert nodes_of(machine, adjust) == {0}
        assert any("slower than the budget" in e["event"] for e in logged)
        await plugin.remove_pod_sandbox(stuck)
        await plugin.shutdown()


def test_config_decides_where_hints_are_looked_for(tmp_path: Path) -> None:
    assert hint_finder(config_from({"hints": {"devices": False}})) is None
    finder = hint_finder(Config())
    assert finder is not None and finder.locator is not None and finder.pod_resources is None
    finder = hint_finder(
        config_from(
            {"hints": {"pod_resources": {"enabled": True, "socket": str(tmp_path / "k.sock")}}}
        )
    )
    assert finder is not None and finder.pod_resources is not None
    assert finder.pod_resources.socket == str(tmp_path / "k.sock")


async def test_synchronize_finds_device_hints_for_containers_it_must_re_place(
    sys_root: Path, machine: Machine
) -> None:
    """A container without a usable cpuset after a restart is placed anew, near its device."""
    plugin = TopologyPlugin(Policy(machine, OPTS), hints=HintFinder(DeviceLocator(sys_root), None))
    p = pod()
    c = guaranteed("c1", 2, p)
    c.state = api_pb2.CONTAINER_RUNNING
    c.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
    updates = await plugin.synchronize([p], [c])
    (update,) = [u for u in updates if u.container_id == "c1"]
    assert {machine.cpus[x].node for x in cpuset.parse(update.linux.resources.cpu.cpus)} == {3}
    await plugin.shutdown()


async def test_without_devices_only_the_kubelet_is_asked_and_only_when_allowed(
    sys_root: Path,
) -> None:
    """No device refs: nothing to look up in sysfs; the kubelet is asked on creation, never
    when `kubelet=False` (Synchronize), and without either source there is nothing to find."""
    asked: list[str] = []

    class Client:  # the one call HintFinder makes of a PodResourcesClient
        async def pod(self, namespace: str, name: str) -> dict[str, tuple[object, ...]]:
            asked.append(f"{namespace}/{name}")
            return {}

    p = pod()
    pod_info, info = convert.pod_info(p), convert.container_info(guaranteed("c1", 2, p))
    locator = DeviceLocator(str(sys_root))
    assert await HintFinder(locator, None).find(pod_info, info, (), OPTS) == ()
    finder = HintFinder(locator, Client(), budget_s=5)  # type: ignore[arg-type]
    assert await finder.find(pod_info, info, (), OPTS, kubelet=False) == ()
    assert asked == []
    assert await finder.find(pod_info, info, (), OPTS) == ()
    assert asked == ["ml/train"]
