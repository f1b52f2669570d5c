"""The written-first path kept in order, through the daemon with the real policy over real unix
sockets and real files standing for the cgroups (the 20-CPU desktop of
tests/test_daemon_cgroup_first.py): a late write never undoes a newer decision, a granted
container starts only once the shared cgroups gave up its CPUs, a written cpuset set back by
another writer is written again, and a cgroup root holding none of the runtime's containers is
noticed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
import structlog

from nri_topology.daemon.cgroupfs import CgroupFS, Result
from nri_topology.daemon.status import StatusPages
from nri_topology.daemon.updates.schedule import Pacing, Schedule
from nri_topology.nri import api_pb2
from nri_topology.nri.mux import Mux
from nri_topology.policy.types import Placement
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from tests.pods import new_pod
from tests.test_daemon_cgroup_first import (
    ALL,
    DESKTOP,
    SHARED,
    _container,
    _on,
    _plugin,
    _sample,
    _shared,
    _until,
)

# The runtime's record lags far behind (it waits for the start), as on a busy node.
LAGGING = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.2, start_wait_s=30.0, recheck_s=0.05)
# The runtime's record follows soon: the tests that wait for every re-pin to be done.
FOLLOWING = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.05, start_wait_s=0.05)


@pytest.fixture
def slow_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every cgroup write takes 3 ms (a busy writer); the names of the threads that wrote."""
    threads: list[str] = []
    real = CgroupFS.write

    def slow(self: CgroupFS, path: str, placement: Placement) -> Result:
        threads.append(threading.current_thread().name)
        time.sleep(0.003)
        return real(self, path, placement)

    monkeypatch.setattr(CgroupFS, "write", slow)
    return threads


async def _grant(
    peer: RuntimePeer, i: int
) -> tuple[api_pb2.PodSandbox, api_pb2.Container, frozenset[int]]:
    pod, ctr = new_pod(i, ""), _container(i, cpus=1, qos="")
    await peer.run_pod_sandbox(pod)
    reply = await peer.create_container(pod, ctr)
    return pod, ctr, cpuset.parse(reply.adjust.linux.resources.cpu.cpus)


@pytest.mark.parametrize("gap_ms", [0, 0.5, 1, 2])
async def test_a_release_then_a_grant_leave_no_shared_cgroup_on_the_granted_cpu(
    tmp_path: Path, slow_writes: list[str], gap_ms: float
) -> None:
    """The release's growth is still being written when the next grant takes the CPU again:
    the growth lands late, the grant's shrink is written right behind it, and the granted
    container starts only after that, so its window is 0 and really so."""
    plugin = _plugin(tmp_path, pacing=LAGGING)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        for rnd in range(3):
            first, ctr1, _ = await _grant(peer, 100 + 2 * rnd)
            await plugin.settle()
            await peer.stop_container(first, ctr1)
            await peer.remove_container(first, ctr1)
            await peer.remove_pod_sandbox(first)
            await asyncio.sleep(gap_ms / 1000)
            pod, ctr, exclusive = await _grant(peer, 101 + 2 * rnd)
            await peer.start_container(pod, ctr)  # answered once the shared cgroups let go
            assert all(not (_on(d) & exclusive) for d in dirs), [_on(d) for d in dirs]
            await plugin.settle()
            assert all(not (_on(d) & exclusive) for d in dirs)
            assert plugin.decisions[ctr.id].window_s == 0.0
            await peer.stop_container(pod, ctr)
            await peer.remove_container(pod, ctr)
            await peer.remove_pod_sandbox(pod)
            await plugin.settle()
    assert set(slow_writes) == {"nri-topology-cgroups_0"}  # a writer thread of their own


async def test_a_grants_re_pins_reach_the_schedule_once_its_reply_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime's NRI lock waits for the reply, not for the hand-over of hundreds of re-pins
    on a full node; the writes still land before the start."""
    order: list[str] = []
    real_change, real_send = Schedule.change, Mux.send

    def change(self: Schedule, updates, now: float) -> None:  # type: ignore[no-untyped-def]
        if updates:
            order.append("schedule")
        real_change(self, updates, now)

    async def send(self: Mux, conn_id: int, message: bytes) -> None:
        await real_send(self, conn_id, message)
        if message[8] == 2:  # a ttrpc response: the plugin's reply
            order.append("reply")

    monkeypatch.setattr(Schedule, "change", change)
    monkeypatch.setattr(Mux, "send", send)
    plugin = _plugin(tmp_path, pacing=LAGGING)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        pod, ctr = new_pod(100, ""), _container(100, cpus=1, qos="")
        await peer.run_pod_sandbox(pod)
        order.clear()
        reply = await peer.create_container(pod, ctr)
        assert order == ["reply", "schedule"]
        exclusive = cpuset.parse(reply.adjust.linux.resources.cpu.cpus)
        await peer.start_container(pod, ctr)
        assert all(not (_on(d) & exclusive) for d in dirs)
        assert plugin.decisions[ctr.id].window_s == 0.0


async def test_whatever_asks_the_schedule_next_finds_the_grant_handed_over(
    tmp_path: Path,
) -> None:
    """Even with no turn of the event loop between the reply and the next question."""
    plugin = _plugin(tmp_path, pacing=LAGGING)
    async with connected(plugin) as (peer, _):
        await _shared(peer, tmp_path)
        await plugin.settle()
        pod, ctr = new_pod(100, ""), _container(100, cpus=1, qos="")
        await plugin.create_container(pod, ctr)  # never suspends: no turn since
        assert plugin.updates.schedule.writes_due(ctr.id)
        await plugin.settle()


async def test_the_start_waits_no_longer_than_its_bound_and_counts_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that hang: the container starts after `write_wait_s`, and its window runs from
    that start until the writes land."""
    gate = threading.Event()
    real = CgroupFS.write

    def stuck(self: CgroupFS, path: str, placement: Placement) -> Result:
        gate.wait(5)
        return real(self, path, placement)

    monkeypatch.setattr(CgroupFS, "write", stuck)
    pacing = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.2, start_wait_s=30.0, write_wait_s=0.1)
    plugin = _plugin(tmp_path, pacing=pacing)
    async with connected(plugin) as (peer, _):
        await _shared(peer, tmp_path)
        gate.set()
        await plugin.settle()
        gate.clear()
        pod, ctr, _ = await _grant(peer, 100)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await peer.start_container(pod, ctr)
        waited = loop.time() - began
        assert 0.09 <= waited < 2.0
        await asyncio.sleep(0.05)
        gate.set()
        await _until(lambda: plugin.decisions[ctr.id].window_s is not None)
        assert plugin.decisions[ctr.id].window_s > 0.04


async def test_a_written_cgroup_set_back_by_another_writer_is_written_again(
    tmp_path: Path,
) -> None:
    """systemd re-applies a scope's `AllowedCPUs` from the runtime's record while that record
    still lags: the plugin reads the written cgroups back and writes them again."""
    plugin = _plugin(tmp_path, pacing=LAGGING)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        pod, ctr, exclusive = await _grant(peer, 100)
        await peer.start_container(pod, ctr)
        assert not (_on(dirs[3]) & exclusive)
        (dirs[3] / "cpuset.cpus").write_text(ALL)  # the record's set, put back
        await _until(lambda: not (_on(dirs[3]) & exclusive), timeout_s=2.0)
        assert _sample(plugin, "nri_topology_cgroup_drift_total", check="revert") == 1
        assert peer.unsolicited_updates == []  # the runtime's record still waits


async def test_memory_nodes_the_writes_leave_alone_are_not_taken_for_a_revert(
    tmp_path: Path,
) -> None:
    """A re-pin writes CPUs only. A cgroup whose memory nodes are not those of the runtime's
    record (set by another writer, or by a runtime that set them otherwise) was taken for one
    set back: its CPUs were written again at every read-back, each write postponed the
    record's re-pin, and the runtime's record never followed."""
    pacing = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.05, start_wait_s=0.05, recheck_s=0.02)
    plugin = _plugin(tmp_path, pacing=pacing)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        await plugin.settle()
        (dirs[3] / "cpuset.mems").write_text("0-1\n")
        pod, ctr, exclusive = await _grant(peer, 100)
        await peer.start_container(pod, ctr)
        assert not (_on(dirs[3]) & exclusive)
        shared = _container(3).id
        await _until(lambda: any(u.container_id == shared for u in peer.unsolicited_updates), 2.0)
        assert _sample(plugin, "nri_topology_cgroup_drift_total", check="revert") == 0


@pytest.mark.parametrize("read_only", [False, True])
async def test_a_cgroup_root_holding_none_of_the_runtimes_containers_is_said_and_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    """The plugin's view of the cgroups is not the host's (a pod's own cgroup namespace): the
    running containers the runtime reports are nowhere under the root. Said, counted, and
    nothing is written. A pod's own cgroups are read-only too: that is not what is said, since
    mounting them read-write would not help."""
    monkeypatch.setattr(CgroupFS, "read_only", property(lambda _: read_only))
    pods, containers = [], []
    for i in range(SHARED):
        pods.append(new_pod(i, "besteffort/"))
        containers.append(_container(i))
        containers[-1].state = api_pb2.CONTAINER_RUNNING
    plugin = _plugin(tmp_path, pacing=FOLLOWING)
    with structlog.testing.capture_logs() as logs:
        async with connected(plugin, RuntimePeer(pods=pods, containers=containers)) as (peer, _):
            assert not plugin.updates.writes_cgroups()
            assert _sample(plugin, "nri_topology_cgroup_writes_enabled") == 0
            assert _sample(plugin, "nri_topology_errors_total", reason="cgroup_root") == 1
            pages = StatusPages(plugin, DESKTOP, "node-a")
            updates = json.loads(pages.status("json")[2])["updates"]
            assert updates["cgroup_writes_off"].startswith("the cgroup root holds none")
            assert "not written to the cgroups first: the cgroup root holds none" in (
                pages.status("text")[2].decode()
            )
            await _grant(peer, 100)
            await plugin.settle()
            assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="gone") == 0
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert len(warned) == 1 and "cgroup root" in warned[0]["event"], warned
    assert warned[0]["cgroup_root"] == str(tmp_path)


async def test_a_container_with_no_cgroup_is_tried_once_not_at_every_grant(
    tmp_path: Path,
) -> None:
    plugin = _plugin(tmp_path, pacing=FOLLOWING)
    async with connected(plugin) as (peer, _):
        dirs = await _shared(peer, tmp_path)
        for d in dirs[:2]:  # exited meanwhile
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
        await plugin.settle()
        for i in range(3):
            await _grant(peer, 100 + i)
            await plugin.settle()
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="gone") == 2
        assert _sample(plugin, "nri_topology_cgroup_writes_total", outcome="written") == 3 * (
            SHARED - 2
        )
