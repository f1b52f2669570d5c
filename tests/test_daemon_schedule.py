"""Re-pins after the reply, through the daemon with the real policy over real unix sockets.

The 20-CPU desktop: BestEffort containers share the pool, then a 1-CPU Guaranteed container takes
one CPU from them. Its reply carries only its own adjustment; the shared containers' re-pins
follow as UpdateContainers batches of the pacing's size. Other containers' failures fail nobody's
creation, and what a pod's containers still hold is released when its sandbox goes.
"""

from __future__ import annotations

import math

import pytest
import yaml

from nri_topology.config.load import ConfigError, config_from
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.settings import Settings, settings_of
from nri_topology.daemon.updates.schedule import Pacing
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.simulate import machine_spec
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology import cpuset
from tests.pods import new_container, new_pod

DESKTOP = machine_spec.load_bundled("desktop")[1]
PACING = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.2)
SHARED = 7


def _plugin(pacing: Pacing | None = PACING) -> TopologyPlugin:
    return TopologyPlugin(Policy(DESKTOP, Options()), settings=Settings(pacing=pacing))


def _sample(plugin: TopologyPlugin, name: str, **labels: str) -> float:
    return plugin.metrics.registry.get_sample_value(name, labels) or 0.0


async def _shared(peer: RuntimePeer, n: int = SHARED) -> None:
    for i in range(n):
        await peer.run_pod_sandbox(new_pod(i, "besteffort/"))
        await peer.create_container(new_pod(i, "besteffort/"), new_container(i))


def _cpus(peer: RuntimePeer, cid: str) -> frozenset[int]:
    return cpuset.parse(peer.containers[cid].linux.resources.cpu.cpus)


async def test_a_guaranteed_reply_carries_only_its_own_adjustment_re_pins_follow() -> None:
    plugin = _plugin()
    async with connected(plugin) as (peer, _):
        await _shared(peer)
        await plugin.settle()
        peer.unsolicited_updates.clear()
        g = new_pod(100, "")
        await peer.run_pod_sandbox(g)
        reply = await peer.create_container(g, new_container(100, cpus=1))
        assert list(reply.update) == []
        exclusive = cpuset.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 1
        # no cgroups to write: its workload starts beside them, and its window counts from then
        await peer.start_container(g, new_container(100, cpus=1))
        await plugin.settle()
        assert all(not (_cpus(peer, f"c{i}") & exclusive) for i in range(SHARED))
        assert sorted(u.container_id for u in peer.unsolicited_updates) == [
            f"c{i}" for i in range(SHARED)
        ]
        calls = _sample(plugin, "nri_topology_update_batch_seconds_count")
        assert calls == math.ceil(SHARED / PACING.batch)
        assert _sample(plugin, "nri_topology_exclusive_window_seconds_count") == 1
        assert _sample(plugin, "nri_topology_repins_total", outcome="sent") == SHARED
        window = plugin.decisions["c100"].window_s
        assert window is not None and window > 0


async def test_in_reply_mode_keeps_every_re_pin_in_the_reply_and_no_window() -> None:
    plugin = _plugin(None)
    async with connected(plugin) as (peer, _):
        await _shared(peer)
        g = new_pod(100, "")
        reply = await peer.create_container(g, new_container(100, cpus=1))
        assert sorted(u.container_id for u in reply.update) == [f"c{i}" for i in range(SHARED)]
        assert all(u.ignore_failure for u in reply.update)
        await plugin.settle()
        assert peer.unsolicited_updates == []
        assert plugin.decisions["c100"].window_s == 0.0


@pytest.mark.parametrize("pacing", [PACING, None], ids=["after-reply", "in-reply"])
async def test_a_failing_re_pin_of_another_container_fails_no_creation(
    pacing: Pacing | None,
) -> None:
    plugin = _plugin(pacing)
    # c0 exited as the grant was made; CRI-O fails a creation whose reply's update fails
    peer = RuntimePeer(failing_containers=["c0"], reply_failures_fail=True)
    async with connected(plugin, peer):
        await _shared(peer, 3)
        g = new_pod(100, "")
        await peer.create_container(g, new_container(100, cpus=1))  # raises if the update failed
        await plugin.settle()
        assert "c100" in plugin.policy.assignments()
        assert _sample(plugin, "nri_topology_errors_total", reason="update_failed") == 0


async def test_a_release_then_a_grant_of_the_same_cpu_re_pins_nobody_twice() -> None:
    # A growth delay no loaded machine outlasts between the release and the grant.
    plugin = _plugin(Pacing(batch=3, gap_s=0.005, grow_delay_s=60))
    async with connected(plugin) as (peer, _):
        await _shared(peer)
        first = new_pod(100, "")
        await peer.create_container(first, new_container(100, cpus=1))
        await plugin.settle()
        granted = _cpus(peer, "c100")
        peer.unsolicited_updates.clear()
        await peer.stop_container(first, peer.containers["c100"])  # growth: waits
        await peer.remove_container(first, peer.containers["c100"])
        second = new_pod(101, "")
        reply = await peer.create_container(second, new_container(101, cpus=1))
        assert cpuset.parse(reply.adjust.linux.resources.cpu.cpus) == granted
        await plugin.settle()
        assert peer.unsolicited_updates == []  # the shared set grew and shrank back unsent


async def test_removing_a_pod_releases_what_its_containers_still_hold() -> None:
    """A creation the runtime abandoned after the reply (CRI-O tells plugins late, if at all)
    leaves a placement; the pod's removal frees it."""
    plugin = _plugin()
    async with connected(plugin) as (peer, _):
        g = new_pod(100, "")
        await peer.run_pod_sandbox(g)
        await peer.create_container(g, new_container(100, cpus=19))
        with pytest.raises(PluginError):  # no room left for another 19 CPUs
            await peer.create_container(new_pod(101, ""), new_container(101, cpus=19))
        await peer.stop_pod_sandbox(g)  # no StopContainer nor RemoveContainer came
        assert "c100" not in plugin.policy.assignments()
        assert (
            _sample(plugin, "nri_topology_orphaned_placements_released_total", reason="pod_stopped")
            == 1
        )
        await peer.remove_pod_sandbox(g)  # nothing left to release
        assert (
            _sample(plugin, "nri_topology_orphaned_placements_released_total", reason="pod_removed")
            == 0
        )
        await peer.create_container(new_pod(101, ""), new_container(101, cpus=19))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", (Pacing(), False)),
        ("updates: {in_reply: auto}", (Pacing(), False)),
        ("updates: {in_reply: false}", (Pacing(), True)),
        ("updates: {in_reply: true}", (None, False)),
        (
            "updates: {batch: 5, gap_seconds: 0.02, grow_delay_seconds: 0}",
            (Pacing(batch=5, gap_s=0.02, grow_delay_s=0.0), False),
        ),
    ],
)
def test_the_updates_section_chooses_where_re_pins_travel(
    text: str, expected: tuple[Pacing | None, bool]
) -> None:
    settings = settings_of(config_from(yaml.safe_load(text) or {}))
    assert (settings.pacing, settings.pace_old_runtimes) == expected


@pytest.mark.parametrize(
    "text",
    [
        "updates: {batch: 0}",
        "updates: {gap_seconds: -1}",
        "updates: {in_reply: 1}",
        "updates: {in_reply: maybe}",
    ],
)
def test_the_updates_section_refuses_what_cannot_pace(text: str) -> None:
    with pytest.raises(ConfigError):
        config_from(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("nri_version", "pace_old", "paced"),
    [
        ("v0.12.2", False, True),  # serves UpdateContainers apart from its events
        ("v0.12.0", False, False),  # takes its event lock for them: deadlock-prone
        ("", False, False),  # too old to report a version (containerd 1.7, 2.1)
        ("v0.11.0", True, True),  # paced there all the same when configured so
    ],
)
async def test_re_pins_follow_the_reply_only_where_the_runtime_serves_updates_apart(
    nri_version: str, pace_old: bool, paced: bool
) -> None:
    plugin = TopologyPlugin(
        Policy(DESKTOP, Options()), settings=Settings(pacing=PACING, pace_old_runtimes=pace_old)
    )
    peer = RuntimePeer(nri_version=nri_version or "v0.9.0", report_nri_version=bool(nri_version))
    async with connected(plugin, peer):
        await _shared(peer, 3)
        reply = await peer.create_container(new_pod(100, ""), new_container(100, cpus=1))
        await plugin.settle()
        assert plugin.updates.paced is paced
        assert len(reply.update) == (0 if paced else 3)
        assert len(peer.unsolicited_updates) == (3 if paced else 0)


async def test_containers_missing_from_a_synchronize_after_a_reconnection_are_released() -> None:
    plugin = _plugin()
    async with connected(plugin) as (peer, _):
        await _shared(peer, 2)
        g = new_pod(100, "")
        await peer.run_pod_sandbox(g)
        await peer.create_container(g, new_container(100, cpus=1))
        pods = [p for pid, p in peer.pods.items() if pid != "p1"]
        kept = [c for cid, c in peer.containers.items() if cid != "c1"]
        for c in kept:
            c.state = api_pb2.CONTAINER_RUNNING
    # The runtime removed c1 while the plugin was away; it reports the others.
    async with connected(plugin, RuntimePeer(pods=pods, containers=kept)):
        assert sorted(plugin.policy.assignments()) == ["c0", "c100"]
        assert (
            _sample(
                plugin, "nri_topology_orphaned_placements_released_total", reason="not_reported"
            )
            == 1
        )
