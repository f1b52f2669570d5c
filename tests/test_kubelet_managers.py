"""Beside the kubelet's static CPU manager and Memory Manager: their state files read as the
kubelet writes them (checksums included), and the daemon with the real policy keeping off the
CPUs the kubelet pinned containers to, refusing to run, or taking the kubelet's reserved CPUs."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from nri_topology.config.load import read_config
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.service import Daemon, StartupError
from nri_topology.daemon.settings import Overrides
from nri_topology.kubelet.managers import (
    KubeletView,
    cpu_checksum,
    parse_cpu_manager_state,
    parse_kubelet_config,
    parse_memory_manager_state,
)
from nri_topology.nri import api_pb2
from nri_topology.policy.types import CpuKind
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from tests import machines
from tests.sockets import free_port

DATA = Path(__file__).parent / "data" / "kubelet"
GIB = 1 << 30
G1 = 1 << 20  # kB: a 1 GiB page
pytestmark = pytest.mark.usefixtures("restore_logging")

# Files the kubelet's own tests hold as it writes them (pkg/kubelet/cm/cpumanager/state,
# memorymanager/state, and the CPU state of a 32-CPU node), with the checksums it computed.
KUBELET_CPU_FILES = [
    '{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":354655845}',
    '{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6",'
    '"container2":"1-3"}},"checksum":3610638499}',
    '{"policyName":"other","defaultCPUSet":"1-3","entries":{},"checksum":1394507217}',
    '{"policyName":"static","defaultCpuSet":"1,3-15,17,19-31","checksum":1902567528}',
]
KUBELET_MEMORY_FILE = (
    '{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":'
    '{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,'
    '"free":1024}},"cells":[]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],'
    '"type":"memory","size":512}]}},"checksum":4215593881}'
)


@pytest.mark.parametrize("text", KUBELET_CPU_FILES)
def test_cpu_manager_checksums_are_the_kubelets(text: str) -> None:
    assert parse_cpu_manager_state(text).checksum_ok
    edited = text.replace('"1-3"', '"1-2"').replace('"4-6"', '"4-7"').replace("1,3-15", "1,3-14")
    assert not parse_cpu_manager_state(edited).checksum_ok


def test_memory_manager_checksum_is_the_kubelets() -> None:
    state = parse_memory_manager_state(KUBELET_MEMORY_FILE)
    assert state.checksum_ok and state.static
    assert state.assigned == {("pod", "container1"): (frozenset({0}), 512)}
    assert not parse_memory_manager_state(KUBELET_MEMORY_FILE.replace("512}", "513}")).checksum_ok


def test_static_state_names_the_pinned_cpus() -> None:
    state = parse_cpu_manager_state((DATA / "cpu_manager_state.static").read_text())
    assert state.static and state.checksum_ok
    assert state.taken == frozenset({2, 3, 4, 10, 11, 12})
    assert state.default == frozenset({0, 1, 5, 6, 7, 8, 9, 13, 14, 15})
    none = parse_cpu_manager_state((DATA / "cpu_manager_state.none").read_text())
    assert not none.static and none.checksum_ok and none.taken == frozenset()


def test_newer_kubelets_data_field_is_read() -> None:
    inner = {"policyName": "static", "defaultCPUSet": "7-9", "entries": {"p": {"c": "4-6"}}}
    text = json.dumps({"policyName": "x", "data": json.dumps(inner), "dataChecksum": 1})
    assert parse_cpu_manager_state(text).taken == frozenset({4, 5, 6})


def test_kubelet_configuration() -> None:
    config = parse_kubelet_config((DATA / "kubelet-config.yaml").read_text())
    assert config.cpu_manager_policy == "static" and config.memory_manager_policy == "Static"
    assert config.reserved_cpus == frozenset({0, 8}) and config.strict_reservation


def test_checksum_of_no_entries() -> None:
    assert cpu_checksum("none", "4-6", {}) == 354655845


# --- the daemon ------------------------------------------------------------------------------


def _daemon(tmp_path: Path, sock: Path, kubelet: str) -> tuple[Daemon, io.StringIO]:
    """A daemon with the real policy on a 16-CPU machine (8 cores, 2 threads)."""
    if not (tmp_path / "sys").exists():
        machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=1, cores=8, threads=2))
    path = tmp_path / "config.yaml"
    path.write_text(f"kubelet:\n{kubelet}")
    overrides = Overrides(
        socket=str(sock),
        sysfs=str(tmp_path / "sys"),
        state=str(tmp_path / "state" / "state.json"),
        metrics_port=free_port(),
        log_format="json",
    )
    log = io.StringIO()
    daemon = Daemon(path, overrides, log_stream=log, environ={})
    daemon.setup()
    return daemon, log


def _guaranteed(i: int, cpus: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    pod = api_pb2.PodSandbox(id=f"p{i}", name=f"pod{i}", namespace="work", uid=f"u{i}")
    pod.linux.cgroup_parent = f"/kubepods/podu{i}"
    ctr = api_pb2.Container(id=f"c{i}", pod_sandbox_id=pod.id, name="app")
    res = ctr.linux.resources
    res.cpu.shares.value = 1024 * cpus
    res.cpu.quota.value = 100_000 * cpus
    res.cpu.period.value = 100_000
    res.memory.limit.value = 64 << 20
    return pod, ctr


def _paths(cpu: str = "cpu_manager_state.static", memory: str = "none") -> str:
    return (
        f"  cpu_manager_state: {DATA / cpu}\n"
        f"  memory_manager_state: {DATA / memory if memory != 'none' else ''}\n"
    ).replace("memory_manager_state: \n", 'memory_manager_state: ""\n')


async def _http(port: int, path: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    return data.decode().partition("\r\n\r\n")[2]


async def test_static_cpu_manager_said_plainly_and_its_cpus_left_to_it(
    tmp_path: Path, short_dir: Path
) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    daemon, log = _daemon(tmp_path, sock, _paths(memory="memory_manager_state.static"))
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    taken = frozenset({2, 3, 4, 10, 11, 12})
    placed = set()
    for i in range(4):  # 4 x 2 exclusive CPUs: all that is left of 16 besides the kubelet's
        await peer.create_container(*_guaranteed(i, 2))
        assert daemon.plugin is not None
        placed |= daemon.plugin.policy.assignments()[f"c{i}"].exclusive
    assert len(placed) == 8 and not placed & taken
    events = [json.loads(line) for line in log.getvalue().splitlines()]
    warned = [e for e in events if "static CPU manager and Memory Manager is on" in e["event"]]
    assert warned and warned[0]["cpus_taken"] == "2-4,10-12"
    assert daemon.status is not None
    metrics = await _http(daemon.status.port, "/metrics")
    assert 'nri_topology_kubelet_manager_active{manager="cpu"} 1.0' in metrics
    assert 'nri_topology_kubelet_manager_active{manager="memory"} 1.0' in metrics
    status = json.loads(await _http(daemon.status.port, "/status?format=json"))
    kubelet = status["kubelet"]
    assert kubelet["static_cpu_manager"] and kubelet["cpus_taken"] == "2-4,10-12"
    text = await _http(daemon.status.port, "/status")
    assert "Kubelet: its static CPU manager and Memory Manager is on" in text
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()


def test_refuses_to_start_when_asked(tmp_path: Path, short_dir: Path) -> None:
    with pytest.raises(StartupError, match="static CPU manager is on"):
        _daemon(tmp_path, short_dir / "nri.sock", _paths() + "  when_active: refuse\n")


def test_the_none_policy_is_no_reason_to_refuse(tmp_path: Path, short_dir: Path) -> None:
    refuse = _paths("cpu_manager_state.none") + "  when_active: refuse\n"
    daemon, _ = _daemon(tmp_path, short_dir / "nri.sock", refuse)
    assert not daemon.kubelet.view.static_cpu
    daemon.close()


def test_reserved_cpus_from_the_kubelet(tmp_path: Path, short_dir: Path) -> None:
    kubelet = _paths("cpu_manager_state.none") + (
        f"  config: {DATA / 'kubelet-config.yaml'}\n  reserved_cpus: true\n"
    )
    daemon, _ = _daemon(tmp_path, short_dir / "nri.sock", kubelet)
    assert daemon.plugin is not None
    pools = daemon.plugin.policy.pools()
    assert pools[0].reserved == frozenset({0, 8})
    assert daemon.plugin.policy.options.strict_reserved_cpus
    daemon.close()


async def test_reload_reads_the_kubelet_again(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    state = tmp_path / "cpu_manager_state"
    state.write_text((DATA / "cpu_manager_state.none").read_text())
    daemon, _ = _daemon(tmp_path, sock, f"  cpu_manager_state: {state}\n")
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    assert not daemon.kubelet.view.static_cpu
    state.write_text((DATA / "cpu_manager_state.static").read_text())  # the kubelet went static
    await daemon.apply(daemon.config)
    assert daemon.kubelet.view.static_cpu
    for i in range(4):
        await peer.create_container(*_guaranteed(i, 2))
    assert daemon.plugin is not None
    held = frozenset().union(*(a.exclusive for a in daemon.plugin.policy.assignments().values()))
    assert not held & frozenset({2, 3, 4, 10, 11, 12})
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()


def test_memory_manager_reservations_per_node() -> None:
    state = parse_memory_manager_state((DATA / "memory_manager_state.hugepages").read_text())
    assert state.static and state.checksum_ok
    assert state.reserved == {(0, "memory"): 5 * GIB, (0, "hugepages-1Gi"): 2 * GIB}
    assert KubeletView(memory=state).memory_taken == state.reserved
    none = replace(state, policy="None")
    assert KubeletView(memory=none).memory_taken == {}


async def test_memory_manager_reservations_left_to_it(tmp_path: Path, short_dir: Path) -> None:
    """On two NUMA nodes of 8 GiB and two 1 GiB pages each, the kubelet's Memory Manager holds
    5 GiB and both pages of node 0: a container asking a page and one asking 4 GiB get node 1."""
    spec = machines.SyntheticSpec(nodes=2, cores=4, threads=2, memory=8 * GIB, hugepages={G1: 2})
    machines.write_sysfs(tmp_path, spec)
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    daemon, log = _daemon(
        tmp_path, sock, _paths("cpu_manager_state.none", "memory_manager_state.hugepages")
    )
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    pod, ctr = _guaranteed(1, 2)
    ctr.linux.resources.hugepage_limits.add(page_size="1GB", limit=GIB)
    await peer.create_container(pod, ctr)
    pod, ctr = _guaranteed(2, 1)
    ctr.linux.resources.memory.limit.value = 4 * GIB
    await peer.create_container(pod, ctr)
    assert [peer.containers[c].linux.resources.cpu.mems for c in ("c1", "c2")] == ["1", "1"]
    warned = [json.loads(line) for line in log.getvalue().splitlines()]
    words = "(node 0: hugepages-1Gi 2Gi, memory 5Gi)"
    assert any(words in e["event"] for e in warned if "Memory Manager is on" in e["event"])
    assert daemon.status is not None
    metrics = await _http(daemon.status.port, "/metrics")
    assert (
        'nri_topology_kubelet_memory_reserved_bytes{node="0",resource="memory"} 5.36870912e+09'
        in metrics
    )
    status = json.loads(await _http(daemon.status.port, "/status?format=json"))
    assert status["kubelet"]["memory_taken"] == {"0": {"hugepages-1Gi": 2 * GIB, "memory": 5 * GIB}}
    root = next(p for p in status["pools"] if p["parent"] is None)
    assert root["hugepages"] == {"hugepages-1Gi": {"pages": 4, "free": 1}}  # 2 the kubelet's
    (c1,) = [c for c in status["containers"] if c["container_id"] == "c1"]
    assert c1["hugepages"] == [{"node": 1, "resource": "hugepages-1Gi", "pages": 1}]
    text = await _http(daemon.status.port, "/status")
    assert "memory it reserved for them: node 0: hugepages-1Gi 2Gi, memory 5Gi" in text
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()


# --- the kubelet's pinned containers are the kubelet's ------------------------------------


def _write_kubelet_state(path: Path, entries: dict[str, dict[str, str]], default: str) -> None:
    """A static CPU manager's state file as the kubelet writes it: checksummed, renamed in."""
    doc = {
        "policyName": "static",
        "defaultCpuSet": default,
        "entries": entries,
        "checksum": cpu_checksum("static", default, entries),
    }
    new = path.with_name(path.name + ".tmp")
    new.write_text(json.dumps(doc))
    new.replace(path)
    assert parse_cpu_manager_state(path.read_text()).checksum_ok


def _besteffort(i: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    pod = api_pb2.PodSandbox(id=f"p{i}", name=f"pod{i}", namespace="work", uid=f"u{i}")
    pod.linux.cgroup_parent = f"/kubepods/besteffort/podu{i}"
    ctr = api_pb2.Container(id=f"c{i}", pod_sandbox_id=pod.id, name="app")
    ctr.linux.resources.cpu.shares.value = 2
    return pod, ctr


def _running(pair: tuple[api_pb2.PodSandbox, api_pb2.Container], cpus: str) -> api_pb2.Container:
    ctr = pair[1]
    ctr.state = api_pb2.CONTAINER_RUNNING
    ctr.linux.resources.cpu.cpus = cpus
    ctr.linux.resources.cpu.mems = "0"
    return ctr


def _cpus_of(peer: RuntimePeer, cid: str) -> frozenset[int]:
    return cpuset.parse(peer.containers[cid].linux.resources.cpu.cpus)


@contextlib.asynccontextmanager
async def _serving(
    tmp_path: Path, short_dir: Path, state: Path, peer: RuntimePeer
) -> AsyncIterator[tuple[Daemon, TopologyPlugin, io.StringIO]]:
    """The daemon beside the kubelet's CPU state file `state`, connected to `peer` and
    synchronized, stopped cleanly at the end."""
    sock = short_dir / "nri.sock"
    await peer.listen(str(sock))
    daemon, log = _daemon(tmp_path, sock, f"  cpu_manager_state: {state}\n")
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    assert daemon.plugin is not None
    await daemon.plugin.settle()
    yield daemon, daemon.plugin, log
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()


async def test_the_kubelets_pinned_container_keeps_its_cpus_at_a_restart_and_a_reload(
    tmp_path: Path, short_dir: Path
) -> None:
    """The plugin starts (or restarts) with the kubelet's pinned container running, as a real
    node's Synchronize reports it: adopted as it is, not re-placed; the others leave its CPUs;
    a reload keeps it as it is; new containers get the rest."""
    state = tmp_path / "cpu_manager_state"
    _write_kubelet_state(state, {"u1": {"app": "2,10"}}, "0-1,3-9,11-15")
    pinned, shared = _guaranteed(1, 2), _besteffort(2)
    peer = RuntimePeer(
        pods=[pinned[0], shared[0]],
        containers=[_running(pinned, "2,10"), _running(shared, "0-15")],
    )
    async with _serving(tmp_path, short_dir, state, peer) as (daemon, plugin, log):
        assert _cpus_of(peer, "c1") == {2, 10}
        assert plugin.policy.assignments()["c1"].kind is CpuKind.PRESERVE
        assert _cpus_of(peer, "c2") == frozenset(range(16)) - {2, 10}
        events = [json.loads(line) for line in log.getvalue().splitlines()]
        assert not [e for e in events if e.get("container_id") == "c1" and "placed" in e["event"]]

        await daemon.apply(read_config(tmp_path / "config.yaml").config)  # a reload
        await plugin.settle()
        assert _cpus_of(peer, "c1") == {2, 10}
        assert plugin.policy.assignments()["c1"].kind is CpuKind.PRESERVE
        assert not [u for u in peer.applied_updates if u.container_id == "c1"]
        for i in range(3, 6):
            await peer.create_container(*_guaranteed(i, 2))
            await peer.create_container(*_besteffort(i + 10))
        await plugin.settle()
        for cid in ("c3", "c4", "c5", "c13", "c14", "c15", "c2"):
            assert not _cpus_of(peer, cid) & {2, 10}, cid


async def test_a_container_the_kubelet_pins_keeps_its_cpus_when_created_and_re_pinned(
    tmp_path: Path, short_dir: Path
) -> None:
    """The kubelet pins a new container (its state file written before the creation, the
    cpuset in the creation request): it keeps that cpuset, and the shared containers leave
    it. After a kubelet restart its reconcile loop re-pins the container through the runtime
    (an UpdateContainer with only the cpuset): answered with the kubelet's cpuset."""
    state = tmp_path / "cpu_manager_state"
    _write_kubelet_state(state, {}, "0-15")
    peer = RuntimePeer()
    async with _serving(tmp_path, short_dir, state, peer) as (_, plugin, _):
        await peer.create_container(*_besteffort(2))
        assert _cpus_of(peer, "c2") == frozenset(range(16))

        _write_kubelet_state(state, {"u3": {"app": "4,12"}}, "0-3,5-11,13-15")
        pod, ctr = _guaranteed(3, 2)
        ctr.linux.resources.cpu.cpus = "4,12"  # the kubelet's CPU manager sets it at creation
        await peer.create_container(pod, ctr)
        await plugin.settle()
        assert _cpus_of(peer, "c3") == {4, 12}
        assert plugin.policy.assignments()["c3"].kind is CpuKind.PRESERVE
        assert _cpus_of(peer, "c2") == frozenset(range(16)) - {4, 12}

        repin = api_pb2.LinuxResources()
        repin.cpu.cpus = "4,12"
        reply = await peer.update_container(pod, peer.containers["c3"], repin)
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in reply.update] == [
            ("c3", "4,12")
        ]
        assert _cpus_of(peer, "c3") == {4, 12}
        await peer.create_container(*_guaranteed(5, 2))  # the plugin's own exclusive container
        assert not _cpus_of(peer, "c5") & {4, 12}


async def test_a_pinned_container_moved_before_goes_back_to_the_kubelets_cpus(
    tmp_path: Path, short_dir: Path
) -> None:
    """A container of the kubelet's that an earlier plugin moved (or anything else did) runs
    on other CPUs than the kubelet gave it, which the kubelet does not see: at Synchronize the
    plugin gives it back the kubelet's cpuset."""
    state = tmp_path / "cpu_manager_state"
    _write_kubelet_state(state, {"u1": {"app": "2,10"}}, "0-1,3-9,11-15")
    pinned = _guaranteed(1, 2)
    peer = RuntimePeer(pods=[pinned[0]], containers=[_running(pinned, "1,9")])
    async with _serving(tmp_path, short_dir, state, peer) as (_, plugin, _):
        assert _cpus_of(peer, "c1") == {2, 10}
        assert plugin.policy.assignments()["c1"].cpus == {2, 10}
