"""The plugin stub against the Go-behaving test runtime, over real unix sockets."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterable
from unittest import mock

import pytest
import structlog.testing
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from nri_topology.nri import api_pb2, stub
from nri_topology.nri.mux import HEADER, Mux
from nri_topology.nri.stub import (
    NotConnectedError,
    Plugin,
    Stub,
    StubError,
    UpdateFailedError,
    overridden_events,
)
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.ttrpc.codec import HEADER_SIZE, Code, TtrpcError, encode_response
from nri_topology.ttrpc.server import CallContext


def pod(i: int = 0) -> api_pb2.PodSandbox:
    return api_pb2.PodSandbox(id=f"pod{i}", name=f"web-{i}", uid=f"uid-{i}", namespace="default")


def ctr(i: int = 0, pod_id: str = "pod0", filler: int = 0) -> api_pb2.Container:
    c = api_pb2.Container(id=f"ctr{i}", pod_sandbox_id=pod_id, name=f"app-{i}")
    c.linux.resources.cpu.cpus = "0-3"
    if filler:
        c.annotations["filler"] = "x" * filler
    return c


def cpus_update(container_id: str, cpus: str) -> api_pb2.ContainerUpdate:
    update = api_pb2.ContainerUpdate(container_id=container_id)
    update.linux.resources.cpu.cpus = cpus
    return update


class Recorder(Plugin):
    """Subscribes to a few events and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.synced: list[tuple[int, int]] = []

    async def synchronize(self, pods, containers):  # type: ignore[no-untyped-def]
        self.synced.append((len(pods), len(containers)))
        return [cpus_update(c.id, "4-5") for c in containers[:2]]

    async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
        self.seen.append(f"create {ctr.id}")
        adjust = api_pb2.ContainerAdjustment()
        adjust.linux.resources.cpu.cpus = "6-7"
        return adjust, []

    async def start_container(self, pod, ctr):  # type: ignore[no-untyped-def]
        self.seen.append(f"start {ctr.id}")

    async def remove_pod_sandbox(self, pod):  # type: ignore[no-untyped-def]
        self.seen.append(f"remove {pod.id}")

    async def update_pod_sandbox(self, pod, overhead, resources):  # type: ignore[no-untyped-def]
        self.seen.append(f"update-pod {pod.id}")


RECORDER_EVENTS = 0x8 | 0x20 | 0x4 | 0x800


async def test_handshake_subscribes_overridden_handlers() -> None:
    plugin = Recorder()
    async with connected(plugin, name="topology", idx="42") as (peer, s):
        await asyncio.wait_for(s.wait_ready(), 5)
        assert s.registered and s.ready
        assert s.events == RECORDER_EVENTS == overridden_events(plugin)
        assert s.request_timeout == 2.0
        reg = peer.registrations[0]
        assert (reg.plugin_name, reg.plugin_idx, reg.NRI_version) == ("topology", "42", "v0.12.2")
        assert [c.method for c in peer.calls] == ["Configure", "Synchronize"]
        await peer.run_pod_sandbox(pod())  # not subscribed: never sent
        await peer.create_container(pod(), ctr())
        await peer.start_container(pod(), ctr())
        await peer.update_pod_sandbox(pod())
        await peer.remove_pod_sandbox(pod())
        assert plugin.seen == ["create ctr0", "start ctr0", "update-pod pod0", "remove pod0"]
        assert peer.containers["ctr0"].linux.resources.cpu.cpus == "6-7"
        assert not peer.errors


async def test_configure_overtakes_register_reply() -> None:
    class Watcher(Plugin):
        registered_during_configure: bool | None = None
        stub: Stub

        async def configure(self, req):  # type: ignore[no-untyped-def]
            self.registered_during_configure = self.stub.registered
            return None

    plugin = Watcher()
    peer = RuntimePeer(configure_before_register_reply=True)

    class Capturing(Stub):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            plugin.stub = self

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("nri_topology.testing.harness.Stub", Capturing)
        async with connected(plugin, peer) as (_, s):
            await _until(lambda: s.registered)
    # Configure was answered while RegisterPlugin was still waiting for its reply.
    assert plugin.registered_during_configure is False


@pytest.mark.parametrize(
    ("peer_options", "expected"),
    [
        ({"nri_version": "v0.12.2"}, RECORDER_EVENTS),
        ({"nri_version": "v0.10.0", "report_nri_version": True}, RECORDER_EVENTS),
        # runtimes before NRI v0.12 do not report it: inferred from the runtime's version,
        # and bit 0x800 is dropped where the runtime would reject it
        ({"nri_version": "v0.10.0"}, RECORDER_EVENTS & 0x7FF),
        (
            {"nri_version": "v0.6.1", "runtime_name": "containerd", "runtime_version": "1.7.16"},
            RECORDER_EVENTS & 0x7FF,
        ),
        (
            {"nri_version": "v0.11.0", "runtime_name": "containerd", "runtime_version": "2.2.1"},
            RECORDER_EVENTS,
        ),
        (
            {"nri_version": "v0.9.0", "runtime_name": "cri-o", "runtime_version": "v1.32.4"},
            RECORDER_EVENTS & 0x7FF,
        ),
    ],
)
async def test_event_mask_follows_runtime_version(peer_options: dict, expected: int) -> None:
    async with connected(Recorder(), RuntimePeer(**peer_options)) as (peer, s):
        assert s.events == expected
        assert peer.plugin is not None and peer.plugin.events == expected


async def test_zero_mask_means_every_event() -> None:
    async with connected(Plugin()) as (peer, s):
        assert s.events == 0
        assert peer.plugin is not None and peer.plugin.events == 0x3FFF


async def _until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


@pytest.mark.looptime
async def test_runtime_rejects_unknown_event_bits() -> None:
    class Greedy(Plugin):
        async def configure(self, req):  # type: ignore[no-untyped-def]
            return 0x4000

    peer = RuntimePeer()
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await peer.listen(path)
        s = Stub(Greedy(), "greedy", "10", path, environ={}, backoff_initial=5)
        task = asyncio.create_task(s.run())
        await _until(lambda: peer.errors)
        await s.stop()
        await asyncio.wait_for(task, 5)
        await peer.close()
    assert peer.errors[0] == "invalid plugin events: 0x4000"
    assert peer.plugin is None


@pytest.mark.parametrize(("n_pods", "n_ctrs", "filler"), [(3, 10, 500), (40, 200, 6000)])
async def test_synchronize_large_state_in_one_message(
    n_pods: int, n_ctrs: int, filler: int
) -> None:
    pods = [pod(i) for i in range(n_pods)]
    ctrs = [ctr(i, f"pod{i % n_pods}", filler) for i in range(n_ctrs)]
    size = sum(c.ByteSize() for c in ctrs)
    assert size > (4096 if n_ctrs < 100 else 1 << 20)
    plugin = Recorder()
    async with connected(plugin, RuntimePeer(pods=pods, containers=ctrs)) as (peer, _):
        assert plugin.synced == [(n_pods, n_ctrs)]
        assert peer.sync_chunks == [(n_pods, n_ctrs, False)]
        assert [u.container_id for u in peer.applied_updates] == ["ctr0", "ctr1"]
        assert peer.containers["ctr1"].linux.resources.cpu.cpus == "4-5"


async def test_synchronize_in_forced_chunks() -> None:
    pods = [pod(i) for i in range(30)]
    ctrs = [ctr(i, f"pod{i % 30}", 4000) for i in range(250)]  # ~1 MiB
    peer = RuntimePeer(pods=pods, containers=ctrs, sync_message_limit=64 << 10)
    plugin = Recorder()
    async with connected(plugin, peer) as (peer, _):
        assert plugin.synced == [(30, 250)]
        assert len(peer.sync_chunks) > 10
        assert all(more for *_, more in peer.sync_chunks[:-1])
        assert not peer.sync_chunks[-1][2]
        assert sum(p for p, _, _ in peer.sync_chunks) == 30
        assert sum(c for _, c, _ in peer.sync_chunks) == 250
        assert len(peer.applied_updates) == 2


async def test_large_create_reply_is_framed_for_go() -> None:
    class Big(Plugin):
        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            adjust = api_pb2.ContainerAdjustment()
            adjust.annotations["big"] = "y" * 20000
            return adjust, []

    async with connected(Big()) as (peer, _):
        await peer.create_container(pod(), ctr())
        assert len(peer.containers["ctr0"].annotations["big"]) == 20000
        assert not peer.errors
        assert peer.plugin is not None
        payload = peer.calls[-1].response.SerializeToString()
        size = HEADER_SIZE + len(encode_response(payload))  # the whole ttrpc message
        assert peer.plugin.trunk.frames[-2:] == [(1, 4096), (1, size - 4096)]


def _one_frame(conn_id: int, message: bytes) -> Iterable[bytes]:
    return [HEADER.pack(conn_id, len(message)) + message]


async def test_go_reader_rejects_one_big_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    class Big(Plugin):
        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            adjust = api_pb2.ContainerAdjustment()
            adjust.annotations["big"] = "y" * 20000
            return adjust, []

    monkeypatch.setattr(stub, "Mux", functools.partial(Mux, framer=_one_frame))
    async with connected(Big(), backoff_initial=5) as (peer, _):
        with pytest.raises(PluginError):
            await peer.create_container(pod(), ctr())
        assert any("cannot allocate memory" in e for e in peer.errors)
        assert peer.plugin is None or not peer.plugin.active


def _tiny_frames(conn_id: int, message: bytes) -> Iterable[bytes]:
    return [
        HEADER.pack(conn_id, len(message[i : i + 16])) + message[i : i + 16]
        for i in range(0, len(message), 16)
    ]


async def test_go_reader_queue_overflows_on_a_flood_of_tiny_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Big(Plugin):
        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            adjust = api_pb2.ContainerAdjustment()
            adjust.annotations["big"] = "y" * 20000
            return adjust, []

    monkeypatch.setattr(stub, "Mux", functools.partial(Mux, framer=_tiny_frames))
    async with connected(Big(), backoff_initial=5) as (peer, _):
        with pytest.raises(PluginError):
            await peer.create_container(pod(), ctr())
        assert "failed to queue payload for reading" in peer.errors


@pytest.mark.looptime
async def test_64_concurrent_requests() -> None:
    class Jittery(Plugin):
        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            n = int(ctr.id[3:])
            await asyncio.sleep((n * 7 % 13) / 1000)
            adjust = api_pb2.ContainerAdjustment()
            adjust.annotations["n"] = str(n) * (n * 100)  # some replies exceed 4096 bytes
            return adjust, []

    async with connected(Jittery()) as (peer, _):
        conn = peer.plugin
        assert conn is not None

        async def one(i: int) -> None:
            req = api_pb2.CreateContainerRequest(pod=pod(), container=ctr(i))
            reply = await conn.call("CreateContainer", req, api_pb2.CreateContainerResponse)
            assert reply.adjust.annotations["n"] == str(i) * (i * 100)

        await asyncio.gather(*(one(i) for i in range(64)))
        assert not peer.errors


@pytest.mark.looptime
async def test_request_timeout_drops_the_plugin_which_reconnects() -> None:
    """On the loop's virtual clock: the runtime's 2 s deadline against a handler taking 3 s."""

    class Slow(Plugin):
        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            if ctr.id == "ctr0":
                await asyncio.sleep(3)
            return None, []

    loop = asyncio.get_running_loop()
    peer = RuntimePeer(request_timeout=2.0)
    async with connected(Slow(), peer) as (peer, s):
        assert s.request_timeout == 2.0
        first = peer.plugin
        asked = loop.time()
        with pytest.raises(PluginError, match="DEADLINE_EXCEEDED"):
            await peer.create_container(pod(), ctr(0))
        assert 2.0 <= loop.time() - asked < 2.1
        assert first is not None and first.closed
        second = await peer.wait_plugin()
        assert second is not first
        await peer.create_container(pod(), ctr(1))
        assert s.connections == 2


async def test_handler_error_becomes_status_and_connection_survives() -> None:
    class Failing(Plugin):
        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            raise ValueError("no CPUs left")

    async with connected(Failing()) as (peer, s):
        with pytest.raises(PluginError, match="no CPUs left"):
            await peer.create_container(pod(), ctr())
        assert peer.plugin is not None and peer.plugin.active
        assert s.connections == 1


async def test_update_containers_while_events_flow() -> None:
    plugin = Recorder()
    peer = RuntimePeer(containers=[ctr(i) for i in range(20)], failing_containers=["ctr19"])
    async with connected(plugin, peer) as (peer, s):

        async def events() -> None:
            for i in range(20, 40):
                await peer.create_container(pod(), ctr(i))

        async def updates() -> None:
            for i in range(18):
                await s.update_containers([cpus_update(f"ctr{i}", "9"), cpus_update("gone", "1")])

        await asyncio.gather(events(), updates())
        assert len(peer.unsolicited_updates) == 36
        assert peer.containers["ctr17"].linux.resources.cpu.cpus == "9"
        assert len(plugin.seen) == 20
        with pytest.raises(UpdateFailedError, match="some containers failed"):
            await s.update_containers([cpus_update("ctr19", "1")])
        ignored = cpus_update("ctr19", "1")
        ignored.ignore_failure = True
        await s.update_containers([ignored])
    with pytest.raises(NotConnectedError):
        await s.update_containers([cpus_update("ctr0", "1")])


@pytest.mark.looptime
async def test_runtime_restart_reconnects_and_resyncs() -> None:
    """On the loop's virtual clock, at the stub's real backoff (0.5 s doubling; no jitter here)."""
    plugin = Recorder()
    loop = asyncio.get_running_loop()
    delays: list[str] = []
    down: list[float] = []
    first = RuntimePeer(containers=[ctr(0)])
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await first.listen(path)
        s = Stub(
            plugin,
            "topology",
            "42",
            path,
            environ={},
            jitter=lambda: 0.0,
            on_connect=lambda: delays.append("up"),
            on_disconnect=lambda error: (delays.append("down"), down.append(loop.time())),
        )
        task = asyncio.create_task(s.run())
        await first.wait_plugin()
        assert s.backoff(0) == 0.25 and s.backoff(3) == 2.0  # jitter 0: half the base
        with structlog.testing.capture_logs() as logged:
            await first.close()  # runtime goes away; its socket file stays behind
            await asyncio.sleep(3)
        retries = [e["retry_in"] for e in logged if e["event"] == "NRI runtime not reachable"]
        assert retries == [0.25, 0.5, 1.0, 2.0]  # tried at 0.25, 0.5, 1 and 2 s after the loss
        second = RuntimePeer(containers=[ctr(0), ctr(1), ctr(2)])
        await second.listen(path)
        await second.wait_plugin()
        assert 4.0 <= loop.time() - down[0] < 4.1  # the next attempt, 2 s after the last
        assert plugin.synced == [(0, 1), (0, 3)]
        assert len(second.registrations) == 1
        await second.create_container(pod(), ctr(3))
        assert s.connections == 2
        await s.stop()
        await asyncio.wait_for(task, 5)
        await second.close()
    assert delays == ["up", "down", "up", "down"]


@pytest.mark.parametrize("via_env", [True, False])
async def test_launched_plugin_exits_when_socket_closes(via_env: bool) -> None:
    runtime_end, plugin_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    plugin = Recorder()
    peer = RuntimePeer()
    if via_env:
        env = {
            "NRI_PLUGIN_SOCKET": str(plugin_end.fileno()),
            "NRI_PLUGIN_NAME": "launched",
            "NRI_PLUGIN_IDX": "07",
        }
        s = Stub(plugin, "ignored", "99", environ=env)
        plugin_end.detach()  # the stub owns the fd now
    else:
        s = Stub(plugin, "launched", "07", sock=plugin_end, environ={})
    assert s.launched
    task = asyncio.create_task(s.run())
    conn = await peer.attach(runtime_end)
    assert (conn.name, conn.idx) == ("launched", "07")
    await peer.create_container(pod(), ctr())
    await peer.close()
    await asyncio.wait_for(task, 5)  # run() returns instead of reconnecting
    assert plugin.seen == ["create ctr0"]
    assert not s.registered


async def test_state_change_fallback_when_dedicated_rpcs_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a plugin built against NRI < v0.12 knows only StateChange for these events
    monkeypatch.setattr(stub, "_NOTIFICATIONS", {})
    plugin = Recorder()
    async with connected(plugin) as (peer, _):
        await peer.start_container(pod(), ctr())
        await peer.remove_pod_sandbox(pod())
        assert peer.state_change_fallbacks == ["StartContainer"]
        methods = [c.method for c in peer.calls[2:]]
        assert methods == ["StartContainer", "StateChange", "StateChange"]
        assert plugin.seen == ["start ctr0", "remove pod0"]


async def test_old_runtime_uses_state_change() -> None:
    plugin = Recorder()
    async with connected(plugin, RuntimePeer(nri_version="v0.11.0")) as (peer, _):
        await peer.start_container(pod(), ctr())
        await peer.remove_pod_sandbox(pod())
        await peer.create_container(pod(), ctr(1))
        assert [c.method for c in peer.calls[2:]] == [
            "StateChange",
            "StateChange",
            "CreateContainer",
        ]
        assert plugin.seen == ["start ctr0", "remove pod0", "create ctr1"]


async def test_validation_handler_rejects_with_reason() -> None:
    class Validator(Plugin):
        async def validate_container_adjustment(self, req):  # type: ignore[no-untyped-def]
            if req.adjust.linux.resources.cpu.cpus:
                raise ValueError("cpuset is ours")

    async with connected(Validator()) as (peer, s):
        assert s.events == 0x2000
        req = api_pb2.ValidateContainerAdjustmentRequest(pod=pod(), container=ctr())
        assert not (await peer.validate_container_adjustment(req)).reject
        req.adjust.linux.resources.cpu.cpus = "1"
        reply = await peer.validate_container_adjustment(req)
        assert reply.reject and reply.reason == "cpuset is ours"


@pytest.mark.parametrize(
    ("name", "idx", "env", "match"),
    [
        ("bad name", "10", {}, "invalid plugin name"),
        ("ok", "1", {}, "invalid plugin index"),
        ("ok", "10", {"NRI_PLUGIN_IDX": "x1"}, "invalid plugin index"),
        ("ok", "10", {"NRI_PLUGIN_SOCKET": "three"}, "not a file descriptor"),
        ("ok", "10", {"NRI_PLUGIN_SOCKET": "987654"}, "not a usable socket"),
    ],
)
def test_bad_identity_or_socket_is_a_clear_error(
    name: str, idx: str, env: dict[str, str], match: str
) -> None:
    with pytest.raises(StubError, match=match):
        Stub(Plugin(), name, idx, environ=env)


def test_backoff_doubles_caps_and_jitters() -> None:
    s = Stub(Plugin(), "p", "10", environ={}, backoff_initial=1, backoff_max=8, jitter=lambda: 1.0)
    assert [s.backoff(n) for n in range(6)] == [1, 2, 4, 8, 8, 8]
    s = Stub(Plugin(), "p", "10", environ={}, backoff_initial=1, backoff_max=8, jitter=lambda: 0.0)
    assert s.backoff(2) == 2.0
    assert s.socket_path == "/var/run/nri/nri.sock" and not s.launched


async def test_update_containers_inside_a_handler_deadlocks_like_containerd() -> None:
    class Impatient(Plugin):
        stub: Stub | None = None

        async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
            assert self.stub is not None
            await self.stub.update_containers([cpus_update("ctr9", "1")])
            return None, []

    plugin = Impatient()
    peer = RuntimePeer(request_timeout=0.2, containers=[ctr(9)])
    async with connected(plugin, peer, backoff_initial=5) as (peer, s):
        plugin.stub = s
        with pytest.raises(PluginError, match="DEADLINE_EXCEEDED"):
            await peer.create_container(pod(), ctr(0))


async def test_on_connect_may_update_containers() -> None:
    done: list[str] = []
    holder: list[Stub] = []

    async def push() -> None:
        await holder[0].update_containers([cpus_update("ctr9", "7")])
        done.append("updated")

    class Capturing(Stub):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs, on_connect=push)
            holder.append(self)

    peer = RuntimePeer(containers=[ctr(9)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("nri_topology.testing.harness.Stub", Capturing)
        async with connected(Recorder(), peer) as (peer, _):
            await _until(lambda: done)
            assert peer.containers["ctr9"].linux.resources.cpu.cpus == "7"


async def test_unanswered_registration_times_out_and_retries() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        server = await asyncio.start_unix_server(silent, path)
        s = Stub(
            Plugin(), "p", "10", path, environ={}, registration_timeout=0.05, backoff_initial=0.01
        )
        task = asyncio.create_task(s.run())
        await _until(lambda: len(accepted) >= 2)
        assert not s.registered and s.connections == 0
        await s.stop()
        await asyncio.wait_for(task, 5)
        server.close()
        for writer in accepted:
            writer.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("name", "idx", "nri_version", "error"),
    [
        ("bad name", "10", "v0.12.2", "invalid plugin name: 'bad name'"),
        ("", "10", "v0.11.0", "invalid plugin name: ''"),
        ("ok", "1x", "v0.12.2", "invalid plugin index: '1x'"),
    ],
)
async def test_runtime_refuses_bad_identity(
    name: str, idx: str, nri_version: str, error: str
) -> None:
    peer = RuntimePeer(nri_version=nri_version)
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await peer.listen(path)
        s = Stub(Plugin(), "ok", "10", path, environ={}, backoff_initial=5)
        s.name, s.idx = name, idx  # past the stub's own check, as a foreign plugin would be
        task = asyncio.create_task(s.run())
        await _until(lambda: peer.errors)
        await s.stop()
        await asyncio.wait_for(task, 5)
        await peer.close()
    assert peer.errors == [error]
    assert s.connections == 0


async def test_old_runtime_accepts_any_nonempty_name() -> None:
    peer = RuntimePeer(nri_version="v0.11.0")
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await peer.listen(path)
        s = Stub(Plugin(), "ok", "10", path, environ={})
        s.name = "free form!"
        task = asyncio.create_task(s.run())
        conn = await peer.wait_plugin()
        await s.stop()
        await asyncio.wait_for(task, 5)
        await peer.close()
    assert conn.name == "free form!"


async def test_unknown_methods_and_events_get_the_codes_runtimes_expect() -> None:
    async with connected(Recorder()) as (peer, _):
        conn = peer.plugin
        assert conn is not None
        with pytest.raises(PluginError, match="UNIMPLEMENTED: method Shutdown"):
            await conn.call("Shutdown", api_pb2.Empty(), api_pb2.Empty)
        odd = api_pb2.StateChangeEvent(event=api_pb2.CREATE_CONTAINER)
        with pytest.raises(PluginError, match="INVALID_ARGUMENT"):
            await conn.call("StateChange", odd, api_pb2.Empty)
        assert conn.active  # error statuses do not cost the connection


@pytest.mark.parametrize("yields", [0, 1, 2, 5, 20])
async def test_stop_at_any_moment_of_connecting_ends_run(yields: int) -> None:
    peer = RuntimePeer()
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await peer.listen(path)
        s = Stub(Plugin(), "p", "10", path, environ={})
        task = asyncio.create_task(s.run())
        for _ in range(yields):
            await asyncio.sleep(0)
        await s.stop()
        await asyncio.wait_for(task, 2)
        await peer.close()
    assert not s.registered


@pytest.mark.parametrize(("offset", "warned"), [(-1.0, True), (5.0, False), (None, False)])
async def test_late_answers_are_logged(offset: float | None, warned: bool) -> None:
    async def handler(req: api_pb2.Empty, ctx: CallContext) -> api_pb2.Empty:
        return api_pb2.Empty()

    deadline = None if offset is None else time.monotonic() + offset
    ctx = CallContext(stub.PLUGIN_SERVICE, "RunPodSandbox", 1, deadline)
    with structlog.testing.capture_logs() as logs:
        assert await stub._endpoint(api_pb2.Empty, handler)(b"", ctx) == b""
    assert any("deadline" in entry["event"] for entry in logs) is warned


@pytest.mark.usefixtures("restore_logging")
async def test_event_lines_cost_nothing_when_debug_is_off() -> None:
    """Filtered out, the per-event line is not even bound (checked before the logger is)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    async with connected(Recorder()) as (peer, _):
        with mock.patch.object(stub, "log") as log:
            await peer.create_container(pod(), ctr(1))
    assert not log.mock_calls


@pytest.mark.parametrize("nri_version", ["v0.12.2", "v0.11.0"])
async def test_every_event_is_logged(nri_version: str) -> None:
    """Dedicated RPCs and StateChange alike: one debug line per event, naming pod and container."""
    plugin = Recorder()
    async with connected(plugin, RuntimePeer(nri_version=nri_version)) as (peer, _):
        with structlog.testing.capture_logs() as logs:
            await peer.start_container(pod(), ctr())
            await peer.create_container(pod(), ctr(1))
            await peer.remove_pod_sandbox(pod())
    seen = [e for e in logs if e["event"] == "NRI event"]
    assert [e.get("container") for e in seen] == [ctr().name, ctr(1).name, None]
    assert {e["pod"] for e in seen} == {f"{pod().namespace}/{pod().name}"}
    if nri_version == "v0.11.0":  # notifications arrive as StateChange, named by their event
        assert [e["method"] for e in seen] == [
            "START_CONTAINER",
            "CreateContainer",
            "REMOVE_POD_SANDBOX",
        ]
    else:
        assert [e["method"] for e in seen] == [
            "StartContainer",
            "CreateContainer",
            "RemovePodSandbox",
        ]


def test_method_tables_come_from_the_service_descriptor() -> None:
    """Every Plugin RPC but Shutdown is served; every event has a handler of its name."""
    service = stub._PluginService(stub.Stub(Plugin(), "p", "10", environ={}), None)  # type: ignore[arg-type]
    rpcs = {m.name for m in api_pb2.DESCRIPTOR.services_by_name["Plugin"].methods}
    assert set(service.methods) == rpcs - {"Shutdown"}
    events = set(api_pb2.Event.keys()) - {"UNKNOWN", "LAST"}
    assert {name.upper() for name in stub.HANDLER_EVENTS} == events
    assert all(callable(getattr(Plugin, name)) for name in stub.HANDLER_EVENTS)
    assert stub.STATE_CHANGE_EVENTS[api_pb2.POST_CREATE_CONTAINER] == (
        "post_create_container",
        True,
    )
    assert stub.STATE_CHANGE_EVENTS[api_pb2.STOP_POD_SANDBOX] == ("stop_pod_sandbox", False)
    # answered with data, so never a plain notification
    for special in ("create_container", "update_container", "stop_container", "update_pod_sandbox"):
        assert all(handler != special for handler, _ in stub.STATE_CHANGE_EVENTS.values())


async def test_refused_becomes_an_unknown_status_with_the_message_as_is() -> None:
    async def handler(req: api_pb2.Empty, ctx: CallContext) -> api_pb2.Empty:
        raise stub.Refused("no room")

    ctx = CallContext(stub.PLUGIN_SERVICE, "CreateContainer", 1, None)
    with pytest.raises(TtrpcError) as err:
        await stub._endpoint(api_pb2.Empty, handler)(b"", ctx)
    assert (err.value.code, err.value.message) == (Code.UNKNOWN, "no room")


def _update(i: int, id_size: int = 8) -> api_pb2.ContainerUpdate:
    update = api_pb2.ContainerUpdate(container_id=f"{i}".rjust(id_size, "c"))
    update.linux.resources.cpu.cpus = f"0-{i}"
    update.linux.resources.cpu.shares.value = 2 + i
    return update


@given(
    st.lists(st.integers(0, 300), max_size=20),
    st.sampled_from([1, 100, 130, 20000]),
    st.sampled_from(
        [
            api_pb2.CreateContainerResponse,
            api_pb2.UpdateContainerResponse,
            api_pb2.StopContainerResponse,
            api_pb2.SynchronizeResponse,
            api_pb2.UpdateContainersRequest,
        ]
    ),
)
def test_encoded_updates_give_the_bytes_of_copied_ones(
    ids: list[int], id_size: int, reply_type: type[Message]
) -> None:
    updates = [_update(i, id_size) for i in ids]
    copied = reply_type()
    if reply_type is api_pb2.CreateContainerResponse:
        copied.adjust.linux.resources.cpu.cpus = "3"  # type: ignore[attr-defined]
    encoded = reply_type()
    encoded.CopyFrom(copied)
    batch = stub.EncodedUpdates((u, stub.delimited(u)) for u in updates)
    assert list(batch) == updates
    plain = stub.with_updates(copied, updates)
    assert isinstance(plain, Message)
    fast = stub.with_updates(encoded, batch)
    assert (fast if isinstance(fast, bytes) else fast.SerializeToString()) == (
        plain.SerializeToString()
    )


@given(
    st.lists(st.integers(0, 300), max_size=20),
    st.booleans(),
    st.lists(st.text("abz=/ é0", max_size=30), max_size=4),
    st.sampled_from(["", "0-3", "0-143"]),
)
def test_create_reply_encoded_directly_is_the_copied_one(
    ids: list[int], adjusted: bool, env: list[str], cpus: str
) -> None:
    """The adjustment written into the reply's bytes gives what copying it into the message
    gives, with and without updates, and for an empty adjustment."""
    updates = [_update(i) for i in ids]
    adjust = None
    if adjusted:
        adjust = api_pb2.ContainerAdjustment()
        if cpus:
            adjust.linux.resources.cpu.cpus = cpus
        for value in env:
            adjust.env.add(key="K", value=value)
    reference = api_pb2.CreateContainerResponse()
    if adjust is not None:
        reference.adjust.CopyFrom(adjust)
    reference.update.extend(updates)
    batch = stub.EncodedUpdates((u, stub.delimited(u)) for u in updates)
    for given_updates in (batch, updates):
        got = stub.create_reply(adjust, given_updates)
        data = got if isinstance(got, bytes) else got.SerializeToString()
        assert data == reference.SerializeToString()


async def test_unreachable_runtime_is_logged_with_its_errno_and_a_short_delay() -> None:
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "absent.sock")
        s = Stub(Plugin(), "p", "10", path, environ={}, backoff_initial=0.0123456789)
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(s.run())
            await _until(lambda: any(e["event"] == "NRI runtime not reachable" for e in logs))
            await s.stop()
            await asyncio.wait_for(task, 5)
    entry = next(e for e in logs if e["event"] == "NRI runtime not reachable")
    assert entry["errno"] == "ENOENT" and entry["error"] == "No such file or directory"
    assert entry["retry_in"] == round(entry["retry_in"], 2)


async def test_unreachable_runtime_warns_once_per_reason_with_the_path_and_the_snippets() -> None:
    """No socket, then a socket nobody listens on (the runtime stopped): a warning each time
    the reason changes, naming the path and where NRI is enabled; the retries between at info."""
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        s = Stub(Plugin(), "p", "10", path, environ={}, backoff_initial=0.001, backoff_max=0.01)
        with structlog.testing.capture_logs() as logs, socket.socket(socket.AF_UNIX) as dead:
            task = asyncio.create_task(s.run())
            await _until(lambda: len(logs) >= 3)
            dead.bind(path)  # a socket file that takes no connection
            n = len(logs)
            await _until(lambda: len(logs) >= n + 3)
            await s.stop()
            await asyncio.wait_for(task, 5)
        tries = [(e["log_level"], e["why"]) for e in logs if "why" in e]
    absent = f"no NRI socket at {path}: NRI is off in the runtime (containerd 1.7's default)"
    refused = f"nothing accepts connections on {path}: the runtime that made it is not running"
    warned = [why for level, why in tries if level == "warning"]
    assert [w.split(": ")[0] for w in warned] == [absent.split(": ")[0], refused.split(": ")[0]]
    assert warned[0].startswith(absent) and warned[1].startswith(refused)
    assert all("packaging/runtime/" in why for why in warned)
    assert {why for level, why in tries if level == "info"} <= set(warned)
    assert len(tries) >= 5 and s.unreachable == warned[1]


async def test_one_synchronized_line_at_info_level() -> None:
    with structlog.testing.capture_logs() as logs:
        async with connected(Recorder()):
            pass
    synced = [e for e in logs if e["event"] == "synchronized"]
    assert synced and all(e["log_level"] == "debug" for e in synced)
