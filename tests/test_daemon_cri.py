"""Re-pins through the runtime's CRI, through the daemon with the real policy over real sockets.

The test runtime serves NRI and, beside it, a CRI that relays UpdateContainerResources to the
plugin as an NRI UpdateContainer, as containerd does (tests/e2e/test_repins.py checks that on the
real runtimes). Its NRI is older than v0.12.1, so NRI UpdateContainers are never safe here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator

import pytest
import structlog.testing

from nri_topology.daemon.plugin import Settings, TopologyPlugin, Transport, _cpusets_only
from nri_topology.daemon.schedule import Pacing
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import Placement
from nri_topology.testing.cri_server import CriServer
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from tests.pods import new_container, new_pod
from tests.test_daemon_schedule import DESKTOP, SHARED, _cpus, _sample, _shared

PACING = Pacing(batch=3, gap_s=0.005, grow_delay_s=0.2)


def _old_runtime() -> RuntimePeer:
    """containerd 1.7: reports no NRI version; UpdateContainers may deadlock it."""
    return RuntimePeer(runtime_name="containerd", nri_version="v0.9.0", report_nri_version=False)


@contextlib.asynccontextmanager
async def _with_cri(
    settings: Settings, peer: RuntimePeer, serve: bool = True
) -> AsyncIterator[tuple[TopologyPlugin, RuntimePeer, CriServer]]:
    with tempfile.TemporaryDirectory(prefix="cri-") as tmp:
        path = os.path.join(tmp, "cri.sock")
        server = CriServer(peer)
        if serve:
            await server.listen(path)
        s = Settings(
            pacing=settings.pacing,
            transport=settings.transport,
            cri_socket=path,
            pace_old_runtimes=settings.pace_old_runtimes,
            restart_hold_s=settings.restart_hold_s,
        )
        plugin = TopologyPlugin(Policy(DESKTOP, Options()), settings=s)
        try:
            async with connected(plugin, peer):
                yield plugin, peer, server
        finally:
            await server.close()


async def test_on_an_old_nri_re_pins_go_through_the_cri_after_the_reply() -> None:
    async with _with_cri(Settings(pacing=PACING), _old_runtime()) as (plugin, peer, server):
        assert plugin.transport == Transport.CRI and plugin.paced
        await _shared(peer)
        await plugin.settle()
        g = new_pod(100, "")
        await peer.run_pod_sandbox(g)
        reply = await peer.create_container(g, new_container(100, cpus=1))
        assert list(reply.update) == []  # nothing for the runtime to apply before it returns
        exclusive = cpuset.parse(reply.adjust.linux.resources.cpu.cpus)
        await asyncio.sleep(0.1)
        assert server.calls == []  # not while the container starts
        await peer.post_start_container(g, peer.containers["c100"])
        await plugin.settle()
        assert all(not (_cpus(peer, f"c{i}") & exclusive) for i in range(SHARED))
        assert peer.unsolicited_updates == []  # never an NRI UpdateContainers
        assert sorted({c.container_id for c in server.calls}) == [f"c{i}" for i in range(SHARED)]
        assert 1 < server.most_concurrent <= PACING.batch
        # each relayed UpdateContainer was recognised: answered, no resize decided
        assert _sample(plugin, "nri_topology_own_repins_answered_total") == len(server.calls)
        resized = _sample(
            plugin, "nri_topology_decision_duration_seconds_count", operation="resize"
        )
        assert resized == 0
        assert _sample(plugin, "nri_topology_update_transport", transport="cri") == 1
        assert plugin.decisions["c100"].window_s is not None
        # decided == applied: every container holds what the policy says
        for cid, p in plugin.policy.placements().items():
            assert _cpus(peer, cid) == p.cpus


async def test_a_relayed_re_pin_is_answered_with_the_current_placement_not_the_one_sent() -> None:
    async with _with_cri(Settings(pacing=PACING), _old_runtime()) as (plugin, peer, server):
        await _shared(peer, 2)
        await plugin.settle()
        now = plugin.policy.placements(["c0"])["c0"]
        stale = Placement(frozenset({0}), now.mems)
        assert stale != now
        await plugin._through_cri({"c0": stale}, "test")
        assert server.calls[-1].asked[0] == "0"
        assert _cpus(peer, "c0") == now.cpus


async def test_an_update_that_is_not_our_re_pin_is_a_resize() -> None:
    """A kubelet's resize of a container whose re-pin is awaited still goes to the policy."""
    async with _with_cri(Settings(pacing=PACING), _old_runtime()) as (plugin, peer, _):
        await _shared(peer, 1)
        g = new_pod(100, "")
        await peer.create_container(g, new_container(100, cpus=1))
        await plugin.settle()
        plugin._awaiting["c100"] = 1  # as if a re-pin of it were on its way
        answered = _sample(plugin, "nri_topology_own_repins_answered_total")
        res = api_pb2.LinuxResources()
        res.CopyFrom(new_container(100, cpus=2).linux.resources)
        reply = await peer.update_container(g, peer.containers["c100"], res)
        assert len(cpuset.parse(reply.update[-1].linux.resources.cpu.cpus)) == 2
        resized = _sample(
            plugin, "nri_topology_decision_duration_seconds_count", operation="resize"
        )
        assert resized == 1
        assert _sample(plugin, "nri_topology_own_repins_answered_total") == answered


def _res(**fields: object) -> api_pb2.LinuxResources:
    r = api_pb2.LinuxResources()
    r.cpu.cpus = str(fields.get("cpus", "0-3"))
    for name in ("shares", "quota", "period"):
        getattr(r.cpu, name).value = int(fields.get(name, 0))  # type: ignore[call-overload]
    r.memory.limit.value = int(fields.get("limit", 0))  # type: ignore[call-overload]
    if "hugepages" in fields:
        r.hugepage_limits.add(page_size="2MB", limit=int(fields["hugepages"]))  # type: ignore[call-overload]
    if "unified" in fields:
        r.unified["memory.high"] = str(fields["unified"])
    return r


@pytest.mark.parametrize(
    ("res", "ours"),
    [
        (_res(), True),
        (_res(hugepages=4 << 20, unified="max"), True),  # echoed by the runtime
        (_res(shares=1024), False),
        (_res(quota=100000, period=100000), False),
        (_res(limit=1 << 30), False),
        (_res(cpus=""), False),
    ],
)
def test_a_re_pin_carries_cpusets_and_nothing_a_resize_sets(
    res: api_pb2.LinuxResources, ours: bool
) -> None:
    assert _cpusets_only(res) is ours


@pytest.mark.parametrize(
    ("transport", "serve", "nri", "pace_old", "chosen", "paced"),
    [
        ("auto", True, "", False, Transport.CRI, True),
        ("auto", False, "", False, Transport.REPLY, False),  # no socket, old NRI
        ("auto", False, "v0.12.2", False, Transport.NRI, True),
        ("auto", True, "v0.12.2", False, Transport.NRI, True),  # a safe NRI before the CRI
        ("auto", False, "", True, Transport.NRI, True),  # in_reply: false forces NRI
        ("nri", True, "", False, Transport.REPLY, False),
        ("nri", True, "v0.12.2", False, Transport.NRI, True),
        ("cri", False, "v0.12.2", False, Transport.CRI, True),  # as configured
    ],
)
async def test_the_transport_is_chosen_at_configure(
    transport: str, serve: bool, nri: str, pace_old: bool, chosen: str, paced: bool
) -> None:
    peer = RuntimePeer(
        runtime_name="containerd", nri_version=nri or "v0.9.0", report_nri_version=bool(nri)
    )
    settings = Settings(pacing=PACING, transport=transport, pace_old_runtimes=pace_old)
    async with _with_cri(settings, peer, serve) as (plugin, _, _):
        assert (plugin.transport, plugin.paced) == (chosen, paced)


async def test_with_no_safe_transport_an_update_waits_for_the_next_reply() -> None:
    """A removal without a stop gives the shared containers their CPU back; with no CRI and an
    old NRI that must not go out as UpdateContainers: the next creation's reply carries it."""
    settings = Settings(pacing=PACING, restart_hold_s=0)
    async with _with_cri(settings, _old_runtime(), serve=False) as (plugin, peer, _):
        assert plugin.transport == Transport.REPLY
        await _shared(peer, 3)
        g = new_pod(100, "")
        reply = await peer.create_container(g, new_container(100, cpus=1))
        assert len(reply.update) == 3  # re-pins in the reply
        await peer.remove_container(g, peer.containers["c100"])
        await plugin.settle()
        assert peer.unsolicited_updates == []
        assert _sample(plugin, "nri_topology_repins_total", outcome="held_for_reply") == 3
        nxt = await peer.create_container(new_pod(50, "besteffort/"), new_container(50))
        assert sorted(u.container_id for u in nxt.update) == ["c0", "c1", "c2"]
        assert _sample(plugin, "nri_topology_repins_total", outcome="rode_reply") == 3
        for cid, p in plugin.policy.placements().items():
            assert _cpus(peer, cid) == p.cpus


async def test_a_cri_that_answers_only_later_is_taken_once_it_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runtime starts the plugins it launches before its CRI serves: the plugin asks again,
    and sends what waited for a reply through the CRI once it answers."""
    monkeypatch.setattr("nri_topology.daemon.plugin._CRI_ASK_EVERY_S", 0.05)
    settings = Settings(pacing=PACING, restart_hold_s=0)
    async with _with_cri(settings, _old_runtime(), serve=False) as (plugin, peer, server):
        assert plugin.transport == Transport.REPLY
        await _shared(peer, 3)
        g = new_pod(100, "")
        await peer.create_container(g, new_container(100, cpus=1))
        await peer.remove_container(g, peer.containers["c100"])  # growth waits for a reply
        assert plugin.settings.cri_socket is not None
        await server.listen(plugin.settings.cri_socket)
        for _ in range(100):
            if plugin.transport == Transport.CRI and not plugin._riding:
                break
            await asyncio.sleep(0.05)
        assert (plugin.transport, plugin.paced) == (Transport.CRI, True)
        await plugin.settle()
        assert sorted({c.container_id for c in server.calls}) == ["c0", "c1", "c2"]
        for cid, p in plugin.policy.placements().items():
            assert _cpus(peer, cid) == p.cpus
        assert peer.unsolicited_updates == []


@pytest.mark.parametrize("transport", ["auto", "cri"])
async def test_a_cri_socket_that_is_not_there_is_a_warning_naming_it(transport: str) -> None:
    """The operator learns at Configure which CRI socket was tried and that nothing is there,
    whether the transport was chosen for it (`cri`) or might have been (`auto`)."""
    settings = Settings(pacing=PACING, transport=transport)
    with structlog.testing.capture_logs() as logs:
        async with _with_cri(settings, _old_runtime(), serve=False) as (plugin, _, _):
            socket = plugin.settings.cri_socket
    warned = [e for e in logs if e["event"].startswith("the runtime's CRI does not answer")]
    assert [(e["log_level"], e["cri_socket"]) for e in warned] == [("warning", socket)]
    assert "no socket there" in warned[0]["event"]


async def test_a_cri_socket_that_does_not_answer_is_a_warning_naming_it() -> None:
    with tempfile.TemporaryDirectory(prefix="cri-") as tmp:
        path = os.path.join(tmp, "cri.sock")

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # accepts, never answers

        server = await asyncio.start_unix_server(silent, path)
        plugin = TopologyPlugin(
            Policy(DESKTOP, Options()), settings=Settings(pacing=PACING, cri_socket=path)
        )
        try:
            with structlog.testing.capture_logs() as logs:
                async with connected(plugin, _old_runtime()):
                    assert plugin.transport == Transport.REPLY
        finally:
            server.close()
    warned = [e for e in logs if e["event"] == "the runtime's CRI does not answer"]
    assert [(e["log_level"], e["cri_socket"]) for e in warned] == [("warning", path)]
    assert f"at {path}: DEADLINE_EXCEEDED" in warned[0]["error"]
