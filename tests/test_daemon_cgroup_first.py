"""Re-pins written into the containers' cgroups first, through the daemon with the real policy
over real unix sockets and real files standing for the cgroups.

The 20-CPU desktop: BestEffort containers share the pool, each with a cgroup directory holding
its cpuset files; a 1-CPU Guaranteed container is created and not started yet, so the paced
re-pins through the runtime wait for its start. The shared containers' cgroups give up its CPU
at once all the same, and its exclusivity window closes before the runtime has been asked.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.settings import Settings
from nri_topology.daemon.updates.schedule import Pacing
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.simulate import machine_spec
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from tests.pods import new_container, new_pod

DESKTOP = machine_spec.load_bundled("desktop")[1]
# The runtime's re-pins wait for the Guaranteed container's start, which these tests make late.
PACING = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.2, start_wait_s=30.0)
SHARED = 7
ALL = "0-19"


def _container(
    i: int, cpus: int = 0, qos: str = "besteffort/", path: str | None = None
) -> api_pb2.Container:
    return new_container(i, cpus, path or f"/kubepods/{qos}podu{i}/c{i}")


def _cgroup(root: Path, i: int) -> Path:
    d = root / f"kubepods/besteffort/podu{i}/c{i}"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(ALL + "\n")
    (d / "cpuset.mems").write_text("0\n")
    return d


def _plugin(root: Path, cgroup_first: bool = True, pacing: Pacing = PACING) -> TopologyPlugin:
    settings = Settings(
        pacing=pacing, cgroup_root=root, verify_interval_s=0, cgroup_first=cgroup_first
    )
    return TopologyPlugin(Policy(DESKTOP, Options()), settings=settings)


def _sample(plugin: TopologyPlugin, name: str, **labels: str) -> float:
    return plugin.metrics.registry.get_sample_value(name, labels) or 0.0


async def _until(what, timeout_s: float = 10.0) -> None:
    """Wait for `what()`: the writes run in a worker thread after the reply."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not what():
        assert loop.time() < deadline, "not in time"
        await asyncio.sleep(0.01)


async def _shared(peer: RuntimePeer, root: Path) -> list[Path]:
    dirs = []
    for i in range(SHARED):
        dirs.append(_cgroup(root, i))
        await peer.run_pod_sandbox(new_pod(i, "besteffort/"))
        await peer.create_container(new_pod(i, "besteffort/"), _container(i))
    return dirs


async def _guaranteed(
    peer: RuntimePeer,
) -> tuple[api_pb2.PodSandbox, api_pb2.Container, api_pb2.CreateContainerResponse]:
    """The 1-CPU Guaranteed pod, its container created (not started): the reply."""
    g, ctr = new_pod(100, ""), _container(100, cpus=1, qos="")
    await peer.run_pod_sandbox(g)
    return g, ctr, await peer.create_container(g, ctr)


def _on(d: Path) -> frozenset[int]:
    return cpuset.parse((d / "cpuset.cpus").read_text().strip())


async def test_the_cgroups_give_up_the_granted_cpu_before_the_runtime_is_asked(
    tmp_path: Path,
) -> None:
    plugin = _plugin(tmp_path)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        g, ctr, reply = await _guaranteed(peer)
        exclusive = cpuset.parse(reply.adjust.linux.resources.cpu.cpus)
        await _until(lambda: plugin.decisions["c100"].window_s is not None)
        assert all(not (_on(d) & exclusive) for d in dirs)
        assert peer.unsolicited_updates == []  # the runtime's re-pins wait for the start
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="written") == SHARED
        assert _sample(plugin, "nri_topology_exclusive_window_seconds_count") == 1
        # the runtime's record follows once the container has started
        await peer.post_start_container(g, ctr)
        await plugin.settle()
        assert sorted(u.container_id for u in peer.unsolicited_updates) == [
            f"c{i}" for i in range(SHARED)
        ]
        assert all(
            cpuset.parse(peer.containers[f"c{i}"].linux.resources.cpu.cpus) == _on(dirs[i])
            for i in range(SHARED)
        )
        assert _sample(plugin, "nri_topology_repins_total", outcome="sent") == SHARED
        assert _sample(plugin, "nri_topology_repins_total", outcome="retried") == 0


async def test_a_grant_released_before_the_runtime_applied_it_costs_the_runtime_nothing(
    tmp_path: Path,
) -> None:
    """Written into the cgroups, then given back (the pod removed before it started): the
    cgroups hold their full sets again and the runtime, whose record never changed, is not
    asked for a single re-pin."""
    plugin = _plugin(tmp_path, pacing=Pacing(batch=3, gap_s=0.005, grow_delay_s=0.2))
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        g, ctr, _ = await _guaranteed(peer)
        await _until(lambda: plugin.decisions["c100"].window_s is not None)
        assert all(_on(d) != cpuset.parse(ALL) for d in dirs)
        await peer.stop_container(g, ctr)
        await peer.remove_container(g, ctr)
        await _until(lambda: all(_on(d) == cpuset.parse(ALL) for d in dirs))
        await plugin.settle()
        assert peer.unsolicited_updates == []
        assert _sample(plugin, "nri_topology_repins_total", outcome="sent") == 0
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="written") == 2 * SHARED


async def test_without_cgroup_first_the_window_waits_for_the_runtime(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, cgroup_first=False)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        g, ctr, _ = await _guaranteed(peer)
        await asyncio.sleep(0.2)
        assert all(_on(d) == cpuset.parse(ALL) for d in dirs)
        assert plugin.decisions["c100"].window_s is None
        await peer.post_start_container(g, ctr)
        await plugin.settle()
        assert plugin.decisions["c100"].window_s is not None
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="written") == 0


async def test_a_cgroup_the_kernel_refuses_waits_for_the_runtime_alone(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        (dirs[0] / "cpuset.cpus").unlink()
        (dirs[0] / "cpuset.cpus").mkdir()  # any write fails (EISDIR), the directory is there
        await plugin.settle()
        g, ctr, _ = await _guaranteed(peer)
        await _until(
            lambda: (
                _sample(plugin, "nri_topology_cgroup_writes_total", outcome="written") == SHARED - 1
            )
        )
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="refused") == 1
        assert plugin.decisions["c100"].window_s is None  # c0 may still run on the CPU
        await peer.post_start_container(g, ctr)
        await plugin.settle()
        assert plugin.decisions["c100"].window_s is not None
        assert "c0" in {u.container_id for u in peer.unsolicited_updates}


async def test_a_cgroups_path_leaving_the_root_is_never_written(tmp_path: Path) -> None:
    """A runtime reporting a path that climbs out of the cgroup root gets that container left
    to the runtime and counted `outside`; the other cgroups are written as before."""
    root = tmp_path / "cgroup"
    victim = _cgroup(tmp_path, 0)  # beside the root, where `/../` leads
    plugin = _plugin(root)
    async with connected(plugin) as (peer, _):
        for i in range(SHARED):
            if i:
                _cgroup(root, i)
            pod = new_pod(i, "besteffort/")
            path = "/../kubepods/besteffort/podu0/c0" if i == 0 else None
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, _container(i, path=path))
        await plugin.settle()
        await _guaranteed(peer)
        await _until(
            lambda: (
                _sample(plugin, "nri_topology_cgroup_writes_total", outcome="written") == SHARED - 1
            )
        )
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="outside") == 1
        assert _on(victim) == cpuset.parse(ALL)
        assert plugin.updates.writes_cgroups()
