"""The policy-backed plugin over a real unix socket with the runtime-side test peer.

A small scripted policy stands in for the real one here, so each daemon rule (what goes in which
reply, what goes through UpdateContainers, what is checkpointed, what reaches the runtime on
error) is tested on its own. What a restore or reload adopts, re-places and keeps in cold start
is the policy's to say: tests/test_daemon_restart.py runs those with the real policy.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
import yaml

from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.metrics import Metrics
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.reload import Reloader
from nri_topology.daemon.settings import Settings
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.types import (
    ColdStart,
    ContainerInfo,
    CpuKind,
    Decision,
    Placement,
    PodInfo,
    PolicyError,
    QoS,
    Resources,
    Update,
)
from nri_topology.policy.views import Assignment, Changes, PoolView, TierMemory
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology.model import MemoryTier


@dataclass
class Report:
    adopted: list[str] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    updates: list[Update] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)  # of the re-placed ones
    cold_starts: dict[str, ColdStart] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)


def scripted_state(cpus: dict[str, int]) -> dict[str, Any]:
    """What a ScriptedPolicy with these CPUs and no cold start saves."""
    return {"cpus": cpus, "containers": {}}


class ScriptedPolicy:
    """One CPU per container, in order; annotations script refusals, side effects, cold starts."""

    def __init__(self) -> None:
        self.cpus: dict[str, int] = {}
        self.cold: dict[str, ColdStart] = {}
        self.options = Options()
        self.calls: list[str] = []
        self.infos: dict[str, tuple[PodInfo, ContainerInfo]] = {}

    def _free(self) -> int:
        return min(set(range(64)) - set(self.cpus.values()))

    def _decision(self, cid: str, ctr: ContainerInfo | None = None, **kw: Any) -> Decision:
        placement = Placement(frozenset({self.cpus[cid]}), frozenset({0}))
        return Decision(cid, "node0", CpuKind.EXCLUSIVE, placement, reason="scripted", **kw)

    def create(self, pod: PodInfo, container: ContainerInfo) -> Decision:
        self.calls.append(f"create {container.id}")
        note = container.annotations
        if "refuse" in note:
            raise PolicyError(note["refuse"])
        self.cpus[container.id] = self._free()
        updates = tuple(
            Update(other, Placement(frozenset({40}), None))
            for other in note.get("bump", "").split(",")
            if other
        )
        cold = (
            ColdStart(int(float(note["cold"]) * 1e9), frozenset({0, 1})) if "cold" in note else None
        )
        if cold is not None:
            self.cold[container.id] = cold
        self.infos[container.id] = (pod, container)
        return self._decision(container.id, updates=updates, cold_start=cold)

    def resize(self, pod: PodInfo, container: ContainerInfo, resources: Resources) -> Decision:
        self.calls.append(f"resize {container.id}")
        if resources.cpu_shares == 13:
            raise PolicyError("cannot resize to 13 shares")
        self.infos[container.id] = (pod, replace(container, resources=resources))
        d = self._decision(container.id)
        return replace(d, placement=replace(d.placement, cpu_shares=resources.cpu_shares))

    def release(self, container_id: str) -> tuple[Update, ...]:
        self.calls.append(f"release {container_id}")
        del self.cpus[container_id]
        self.cold.pop(container_id, None)
        self.infos.pop(container_id, None)
        return tuple(Update(o, Placement(frozenset({41}), None)) for o in self.cpus)

    def hold(self, container_id: str) -> bool:
        return False  # the real policy's holds: tests/test_daemon_restarts.py

    def restore(
        self,
        pods: Sequence[PodInfo],
        containers: Sequence[ContainerInfo],
        saved: Mapping[str, Any] | None,
    ) -> Report:
        self.calls.append(f"restore {'saved' if saved else 'fresh'}")
        report = Report()
        kept = dict((saved or {}).get("cpus", {}))
        cold = {
            cid: ColdStart(ns, frozenset({0, 1}))
            for cid, ns in (saved or {}).get("cold", {}).items()
        }
        self.cpus, self.cold = {}, {}
        for c in containers:
            if c.id in kept:
                self.cpus[c.id] = kept[c.id]
                report.adopted.append(c.id)
                if c.id in cold:
                    self.cold[c.id] = report.cold_starts[c.id] = cold[c.id]
        for c in containers:
            if c.id not in self.cpus:
                self.cpus[c.id] = self._free()
                report.replaced[c.id] = "not in the checkpoint"
                d = self._decision(c.id)
                report.decisions[c.id] = d
                report.updates.append(Update(c.id, d.placement))
        by_id = {p.id: p for p in pods}
        self.infos = {c.id: (by_id[c.pod_id], c) for c in containers if c.pod_id in by_id}
        return report

    def container(self, container_id: str) -> tuple[PodInfo, ContainerInfo] | None:
        return self.infos.get(container_id)

    def pod_containers(self, pod_id: str) -> tuple[str, ...]:
        return tuple(sorted(cid for cid, (p, _) in self.infos.items() if p.id == pod_id))

    def cold_start_done(self, container_id: str) -> tuple[Update, ...]:
        self.calls.append(f"cold {container_id}")
        self.cold.pop(container_id, None)
        return (Update(container_id, Placement(None, frozenset({0, 1}))),)

    def reconfigure(self, options: Options) -> Report:
        """Every container moves one CPU up (re-placed), so each reaches the runtime."""
        if not options.pin_memory:
            raise PolicyError("pin_memory cannot be turned off on this machine")
        self.options = options
        report = Report(cold_starts=dict(self.cold))
        for c, cpu in self.cpus.items():
            self.cpus[c] = cpu + 1
            d = self._decision(c)
            report.replaced[c] = "scripted move"
            report.decisions[c] = d
            report.updates.append(Update(c, d.placement))
        return report

    def snapshot(self, entries: bool = True) -> dict[str, Any]:
        cold = {c: x.delay_ns for c, x in self.cold.items()}
        # its state is all outside the per-container map, which the daemon splices in
        return {"cpus": dict(self.cpus), **({"cold": cold} if cold else {}), "containers": {}}

    def changes(self, everything: bool = False) -> Changes:
        return Changes({}, complete=True)

    def pools(self) -> list[PoolView]:
        used = len(self.cpus)
        dram = TierMemory(capacity=1 << 30, assigned=used << 20, free=(1 << 30) - (used << 20),
                          nodes=frozenset({0}))  # fmt: skip
        return [
            PoolView(
                name="node0", kind="numa node", depth=0, parent=None,
                cpus=frozenset(range(64)), isolated=frozenset(), reserved=frozenset(),
                shared=frozenset(range(64)) - set(self.cpus.values()),
                capacity_milli=64000, assigned_milli=1000 * used, free_milli=64000 - 1000 * used,
                containers=used, memory={MemoryTier.DRAM: dram}, nodes=frozenset({0}),
            )
        ]  # fmt: skip

    def assignments(self) -> dict[str, Assignment]:
        return {
            cid: Assignment(
                container_id=cid, pod_id="pod-web", pod_name="web", name=f"n-{cid}",
                namespace="default", qos=QoS.GUARANTEED, pool="node0", kind=CpuKind.EXCLUSIVE,
                cpus=frozenset({cpu}), mems=frozenset({0}), exclusive=frozenset({cpu}), shared=0,
                memory=1 << 20, memory_nodes=frozenset({0}), memory_relaxed=False,
            )
            for cid, cpu in self.cpus.items()
        }  # fmt: skip


def pod(name: str = "web") -> api_pb2.PodSandbox:
    p = api_pb2.PodSandbox(id=f"pod-{name}", name=name, namespace="default", uid=f"uid-{name}")
    p.linux.cgroup_parent = "/kubepods/podx"
    return p


def ctr(cid: str, p: api_pb2.PodSandbox | None = None, **annotations: str) -> api_pb2.Container:
    p = p or pod()
    return api_pb2.Container(
        id=cid,
        pod_sandbox_id=p.id,
        name=f"n-{cid}",
        state=api_pb2.CONTAINER_RUNNING,
        annotations=annotations,
    )


def make_plugin(tmp_path: Path, policy: ScriptedPolicy | None = None, **kw: Any) -> TopologyPlugin:
    return TopologyPlugin(
        policy or ScriptedPolicy(), checkpoint=Checkpoint(tmp_path / "state.json"), **kw
    )


def counter(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_create_adjusts_the_container_and_updates_others_in_the_reply(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, settings=Settings(pacing=None))
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        p = pod()
        await peer.run_pod_sandbox(p)
        await peer.create_container(p, ctr("a"))
        reply = await peer.create_container(p, ctr("b", bump="a"))
        assert reply.adjust.linux.resources.cpu.cpus == "1"
        assert reply.adjust.linux.resources.cpu.mems == "0"
        env = {kv.key: kv.value for kv in reply.adjust.env}
        assert env["NRI_TOPOLOGY_CPUS"] == "1" and env["NRI_TOPOLOGY_POOL"] == "node0"
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in reply.update] == [("a", "40")]
        assert peer.containers["a"].linux.resources.cpu.cpus == "40"  # applied by the runtime
        assert peer.unsolicited_updates == []
    assert counter(plugin.metrics, "nri_topology_nri_requests_total", method="CreateContainer") == 2


async def test_env_exposure_can_be_turned_off(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, settings=Settings(expose_env=False))
    async with connected(plugin) as (peer, _):
        reply = await peer.create_container(pod(), ctr("a"))
        assert list(reply.adjust.env) == []
        assert reply.adjust.linux.resources.cpu.cpus == "0"


async def test_refused_creation_reaches_the_runtime_with_the_policy_reason(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, _):
        with pytest.raises(PluginError, match="nri-topology: no room on node0"):
            await peer.create_container(pod(), ctr("x", refuse="no room on node0"))
        assert "x" not in plugin.policy.cpus
        await peer.create_container(pod(), ctr("y"))  # the plugin stays connected and works
        assert peer.plugin is not None and peer.plugin.active
    assert counter(plugin.metrics, "nri_topology_errors_total", reason="policy") == 1


async def test_update_container_replies_with_own_entry_last(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, _):
        p = pod()
        await peer.create_container(p, ctr("a"))
        resources = api_pb2.LinuxResources()
        resources.cpu.shares.value = 512
        reply = await peer.update_container(p, ctr("a"), resources)
        assert reply.update[-1].container_id == "a"
        assert reply.update[-1].linux.resources.cpu.shares.value == 512
        assert peer.containers["a"].linux.resources.cpu.cpus == "0"
        resources.cpu.shares.value = 13
        with pytest.raises(PluginError, match="cannot resize to 13 shares"):
            await peer.update_container(p, ctr("a"), resources)


async def test_stop_releases_and_updates_others_in_the_reply(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path, settings=Settings(pacing=None))
    async with connected(plugin) as (peer, _):
        p = pod()
        for cid in "abc":
            await peer.create_container(p, ctr(cid))
        reply = await peer.stop_container(p, ctr("b"))
        assert sorted(u.container_id for u in reply.update) == ["a", "c"]
        await peer.remove_container(p, ctr("b"))  # already released: nothing happens twice
        assert plugin.policy.calls.count("release b") == 1
        await plugin.settle()
        assert peer.unsolicited_updates == []


async def test_remove_without_stop_releases_and_sends_updates_separately(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        p = pod()
        await peer.create_container(p, ctr("a"))
        await peer.create_container(p, ctr("b"))
        await peer.remove_container(p, ctr("b"))
        await plugin.settle()
        assert [u.container_id for u in peer.unsolicited_updates] == ["a"]


@pytest.mark.looptime
async def test_cold_start_widening_arrives_through_update_containers(tmp_path: Path) -> None:
    """On the loop's virtual clock: the timer starts at StartContainer and fires at its delay."""
    plugin = make_plugin(tmp_path)
    loop = asyncio.get_running_loop()
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        p = pod()
        await peer.create_container(p, ctr("a", cold="30"))
        await asyncio.sleep(60)
        assert plugin.policy.calls[-1] == "create a"  # no timer before StartContainer
        await peer.start_container(p, ctr("a"))
        started = loop.time()
        await plugin.flush()
        body = Checkpoint(tmp_path / "state.json").load().body
        assert body is not None and "a" in body["cold_starts"]["deadline_ns"]
        await asyncio.sleep(29.9)
        assert "cold a" not in plugin.policy.calls and peer.unsolicited_updates == []
        while not peer.unsolicited_updates:
            await asyncio.sleep(0.01)
        assert 30 <= loop.time() - started < 30.5
        await plugin.settle()
        assert [(u.container_id, u.linux.resources.cpu.mems) for u in peer.unsolicited_updates] == [
            ("a", "0-1")
        ]
        assert peer.containers["a"].linux.resources.cpu.mems == "0-1"
        await plugin.flush()
        body = Checkpoint(tmp_path / "state.json").load().body
        assert body is not None and body["cold_starts"]["deadline_ns"] == {}


@pytest.mark.looptime
async def test_cold_start_of_a_stopped_container_never_fires(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        p = pod()
        await peer.create_container(p, ctr("a", cold="30"))
        await peer.start_container(p, ctr("a"))
        await asyncio.sleep(10)
        await peer.stop_container(p, ctr("a"))
        await asyncio.sleep(60)  # well past the deadline the stop cancelled
        await plugin.settle()
        assert "cold a" not in plugin.policy.calls and peer.unsolicited_updates == []


async def test_checkpoint_follows_every_change(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    cp = Checkpoint(tmp_path / "state.json")
    async with connected(plugin) as (peer, _):
        p = pod()
        await peer.create_container(p, ctr("a"))
        await peer.create_container(p, ctr("b"))
        await plugin.flush()
        assert cp.load().body["policy"] == scripted_state({"a": 0, "b": 1})  # type: ignore[index]
        await peer.stop_container(p, ctr("a"))
        await plugin.flush()
        assert cp.load().body["policy"] == scripted_state({"b": 1})  # type: ignore[index]


async def test_restart_adopts_checkpointed_placements(tmp_path: Path) -> None:
    first = make_plugin(tmp_path)
    p = pod()
    async with connected(first) as (peer, _):
        for cid in "abc":
            await peer.create_container(p, ctr(cid))
        await peer.stop_container(p, ctr("a"))
        await first.flush()
        survivors = [peer.containers["b"], peer.containers["c"]]
    # A new process: fresh policy, the runtime reports the containers that still run.
    second = make_plugin(tmp_path)
    peer = RuntimePeer(pods=[p], containers=survivors)
    async with connected(second, peer):
        assert second.policy.calls == ["restore saved"]
        assert second.policy.cpus == {"b": 1, "c": 2}
        assert peer.applied_updates == []  # nothing moved


@pytest.mark.parametrize("damage", ["missing", "corrupt", "directory"])
async def test_missing_or_corrupt_checkpoint_rebuilds_from_synchronize(
    tmp_path: Path, damage: str
) -> None:
    state = tmp_path / "state.json"
    if damage == "corrupt":
        state.write_text('{"format": "nri-topology-checkpoint", "version": 1, "body": {}')
    elif damage == "directory":
        state.mkdir()
    plugin = make_plugin(tmp_path)
    peer = RuntimePeer(pods=[pod()], containers=[ctr("a"), ctr("b")])
    async with connected(plugin, peer):
        assert plugin.policy.calls == ["restore fresh"]
        assert sorted(u.container_id for u in peer.applied_updates) == ["a", "b"]


async def test_stopped_containers_in_synchronize_hold_nothing(tmp_path: Path) -> None:
    stopped = ctr("gone")
    stopped.state = api_pb2.CONTAINER_STOPPED
    plugin = make_plugin(tmp_path)
    async with connected(plugin, RuntimePeer(pods=[pod()], containers=[ctr("a"), stopped])):
        assert plugin.policy.cpus == {"a": 0}


async def test_unwritable_state_keeps_serving_and_recovers(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    blocker.write_text("")  # the state directory is a file: every write fails
    plugin = TopologyPlugin(
        ScriptedPolicy(), checkpoint=Checkpoint(blocker / "state.json"), checkpoint_retry_s=60
    )
    async with connected(plugin) as (peer, _):
        await peer.create_container(pod(), ctr("a"))
        await plugin.flush()
        assert counter(plugin.metrics, "nri_topology_errors_total", reason="checkpoint_write") >= 1
        blocker.unlink()
        await peer.create_container(pod(), ctr("b"))
        await plugin.flush()
        body = Checkpoint(blocker / "state.json").load().body
        assert body is not None and body["policy"] == scripted_state({"a": 0, "b": 1})


async def test_reconfigure_sends_updates_through_update_containers(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        await peer.create_container(pod(), ctr("a"))
        await plugin.reconfigure(Options(prefer_shared_cpus=True))
        await plugin.settle()
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in peer.unsolicited_updates] == [
            ("a", "1")
        ]
        with pytest.raises(PolicyError):
            await plugin.reconfigure(Options(pin_memory=False))
        assert plugin.policy.options == Options(prefer_shared_cpus=True)


async def test_readiness_follows_registration_and_shutdown_checkpoints(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    assert plugin.ready() == (False, "not started")
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        assert plugin.ready() == (True, "")
        assert counter(plugin.metrics, "nri_topology_registered") == 1
        await peer.create_container(pod(), ctr("a", cold="30"))
        await peer.start_container(pod(), ctr("a"))
        await plugin.shutdown()
        await peer.wait_disconnected()
        assert plugin.ready()[0] is False
    body = Checkpoint(tmp_path / "state.json").load().body
    assert body is not None and list(body["cold_starts"]["deadline_ns"]) == ["a"]


async def test_runtime_config_from_configure_is_handed_over(tmp_path: Path) -> None:
    seen: list[str] = []

    async def apply(text: str) -> None:
        seen.append(text)

    plugin = make_plugin(tmp_path, runtime_config=apply)
    async with connected(plugin, RuntimePeer(config="policy: {}\n")):
        assert seen == ["policy: {}\n"]


def _parse_options(data: bytes) -> Options:
    """A stand-in for the config loader: YAML mapping of Options fields."""
    raw = yaml.safe_load(data) or {}
    if not isinstance(raw, dict):
        raise ValueError("configuration must be a mapping")
    return Options(**raw)


@pytest.mark.looptime
async def test_config_reload_good_then_bad_keeps_the_good_one(tmp_path: Path) -> None:
    """On the loop's virtual clock: the file is looked at every 2 s (the default)."""
    plugin = make_plugin(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("prefer_shared_cpus: false\n")
    refusals = (ValueError, TypeError, yaml.YAMLError, PolicyError)
    reloader = Reloader(config, _parse_options, plugin.reconfigure, refusals, plugin.metrics)
    reloader.mark_current()
    loop = asyncio.get_running_loop()
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        await peer.create_container(pod(), ctr("a"))
        watcher = loop.create_task(reloader.watch())
        try:
            await asyncio.sleep(5)
            assert plugin.policy.options == Options()  # unchanged content: nothing applied
            config.write_text("prefer_shared_cpus: true\n")
            written = loop.time()
            while plugin.policy.options != Options(prefer_shared_cpus=True):
                await asyncio.sleep(0.01)
            assert loop.time() - written <= 2.1  # within one interval
            await plugin.settle()
            assert [u.container_id for u in peer.unsolicited_updates] == ["a"]
            for bad in ("[not, a, mapping]\n", "no_such_option: 1\n", "pin_memory: false\n", "{"):
                config.write_text(bad)
                assert not await reloader.reload("test")
            assert plugin.policy.options == Options(prefer_shared_cpus=True)
            config.unlink()
            assert not await reloader.reload("test")
        finally:
            watcher.cancel()
    assert counter(plugin.metrics, "nri_topology_config_reloads_total", result="applied") == 1
    assert counter(plugin.metrics, "nri_topology_config_reloads_total", result="rejected") == 5


@pytest.mark.looptime
async def test_sighup_reloads(tmp_path: Path) -> None:
    applied: list[Options] = []

    async def apply(options: Options) -> None:
        applied.append(options)

    config = tmp_path / "config.yaml"
    config.write_text("colocate_pods: true\n")
    reloader = Reloader(config, _parse_options, apply, (ValueError,), Metrics())
    loop = asyncio.get_running_loop()
    reloader.install_sighup(loop)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        async with asyncio.timeout(2):
            while not applied:
                await asyncio.sleep(0.01)
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
    assert applied == [Options(colocate_pods=True)]


async def test_checkpoint_the_policy_cannot_use_is_ignored(tmp_path: Path) -> None:
    Checkpoint(tmp_path / "state.json").save({"policy": {"cpus": "not a mapping"}})
    plugin = make_plugin(tmp_path)
    peer = RuntimePeer(pods=[pod()], containers=[ctr("a")])
    async with connected(plugin, peer):
        assert plugin.policy.calls == ["restore saved", "restore fresh"]
        assert plugin.policy.cpus == {"a": 0}
    assert counter(plugin.metrics, "nri_topology_errors_total", reason="restore") == 1


@pytest.mark.looptime
async def test_failed_checkpoint_is_retried_without_a_new_change(tmp_path: Path) -> None:
    """At the default retry delay, on the loop's virtual clock."""
    blocker = tmp_path / "blocked"
    blocker.write_text("")
    plugin = TopologyPlugin(ScriptedPolicy(), checkpoint=Checkpoint(blocker / "state.json"))
    saved = Checkpoint(blocker / "state.json")
    async with connected(plugin) as (peer, _):
        await peer.create_container(pod(), ctr("a"))
        await plugin.flush()
        blocker.unlink()  # the operator fixes the directory; no container event follows
        await asyncio.sleep(9.5)
        assert not saved.path.exists()
        await asyncio.sleep(1)
        await plugin.flush()
        body = saved.load().body
        assert body is not None and body["policy"] == scripted_state({"a": 0})


@pytest.mark.looptime
async def test_shutdown_answers_the_request_in_flight_first(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        await plugin._lock.acquire()  # a decision in progress
        create = asyncio.get_running_loop().create_task(peer.create_container(pod(), ctr("a")))
        await asyncio.sleep(0.05)
        stopping = asyncio.get_running_loop().create_task(plugin.shutdown())
        await asyncio.sleep(0.05)
        plugin._lock.release()
        reply = await asyncio.wait_for(create, 5)
        await asyncio.wait_for(stopping, 5)
        assert reply.adjust.linux.resources.cpu.cpus == "0"
    body = Checkpoint(tmp_path / "state.json").load().body
    assert body is not None and body["policy"] == scripted_state({"a": 0})


async def test_a_decision_is_logged_after_its_reply_under_the_names_it_had(tmp_path: Path) -> None:
    plugin = make_plugin(tmp_path)
    async with connected(plugin) as (peer, _):
        with structlog.testing.capture_logs() as logged:
            await peer.create_container(pod(), ctr("a", bump="b"))
            await peer.remove_container(pod(), ctr("a"))  # gone before the line is written
            await asyncio.sleep(0)
    (created,) = [e for e in logged if e["event"] == "container created"]
    assert created["container"] == "default/web/n-a" and created["pod"] == "default/web"
    assert created["cpus"] == "0" and created["updated_ids"] == ["b"]
