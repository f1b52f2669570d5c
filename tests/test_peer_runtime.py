"""Rules the test runtime enforces on plugins, as the Go runtime does."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import struct
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin, Stub, _PluginService
from nri_topology.testing.go_reader import GoConnReader, GoReadError
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer, _shrink
from nri_topology.ttrpc.server import CallContext


def _ctr(i: int, filler: int) -> api_pb2.Container:
    c = api_pb2.Container(id=f"ctr{i}", pod_sandbox_id="pod0", name="app")
    c.annotations["filler"] = "f" * filler
    return c


async def test_sync_over_4_mib_is_split_by_the_real_algorithm() -> None:
    ctrs = [_ctr(i, 15_000) for i in range(300)]  # ~4.5 MB: one message would be refused

    class Counting(Plugin):
        seen = 0

        async def synchronize(self, pods, containers):  # type: ignore[no-untyped-def]
            Counting.seen = len(containers)
            return []

    async with connected(Counting(), RuntimePeer(containers=ctrs)) as (peer, _):
        assert Counting.seen == 300
        assert [c for _, c, _ in peer.sync_chunks] == [270, 30]  # shrunk by 10%, then the rest
        assert [more for *_, more in peer.sync_chunks] == [True, False]


async def test_updates_during_more_chunks_are_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    async def eager(
        self: _PluginService, req: api_pb2.SynchronizeRequest, ctx: CallContext
    ) -> api_pb2.SynchronizeResponse:
        update = api_pb2.ContainerUpdate(container_id="ctr0")
        return api_pb2.SynchronizeResponse(update=[update], more=True)

    monkeypatch.setattr(_PluginService, "synchronize", eager)
    peer = RuntimePeer(containers=[_ctr(i, 2000) for i in range(40)], sync_message_limit=16 << 10)
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await peer.listen(path)
        s = Stub(Plugin(), "eager", "10", path, environ={}, backoff_initial=5)
        task = asyncio.create_task(s.run())
        async with asyncio.timeout(5):
            while "plugin does not handle split sync requests" not in peer.errors:
                await asyncio.sleep(0.01)
        await s.stop()
        await asyncio.wait_for(task, 5)
        await peer.close()
    assert peer.plugin is None


@pytest.mark.looptime
async def test_silent_plugin_times_out_registration() -> None:
    """On the loop's virtual clock, at the runtime's default registration timeout (5 s)."""
    peer = RuntimePeer()
    loop = asyncio.get_running_loop()
    runtime_end, plugin_end = socket.socketpair()
    start = loop.time()
    with pytest.raises(PluginError, match="registration timed out"):
        await peer.attach(runtime_end)
    assert 5.0 <= loop.time() - start < 5.1
    assert plugin_end.recv(16) == b""  # the runtime hung up
    plugin_end.close()


@pytest.mark.parametrize(
    ("pods", "ctrs", "rejected", "limit", "expected"),
    [
        (100, 300, 8_000_000, 4_000_000, (50, 150)),
        (100, 300, 4_100_000, 4_000_000, (90, 270)),  # never less than 10% smaller
        (2, 7, 1_000_000, 100_000, (4, 4)),  # not below 8 objects
    ],
)
def test_shrink(pods: int, ctrs: int, rejected: int, limit: int, expected: tuple) -> None:
    assert _shrink(pods, ctrs, rejected, limit) == expected


def test_shrink_gives_up_at_eight_objects() -> None:
    with pytest.raises(PluginError, match="split messages"):
        _shrink(4, 4, 10, 5)


def _messages(sizes: list[int]) -> list[bytes]:
    return [
        struct.pack(">IIBB", n, 2 * i + 1, 2, 0) + bytes([i % 256]) * n for i, n in enumerate(sizes)
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9000), min_size=1, max_size=5), st.data())
def test_go_reader_never_returns_wrong_messages(sizes: list[int], data: st.DataObject) -> None:
    """Any framing yields a prefix of the sent messages, or the Go failure; never garbage."""
    messages = _messages(sizes)
    stream = b"".join(messages)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=8)))
    bounds = [0, *cuts, len(stream)]
    reader = GoConnReader()
    got: list[bytes] = []
    try:
        for start, end in itertools.pairwise(bounds):
            reader.push_frame(stream[start:end])
            while (msg := reader.next_message()) is not None:
                got.append(msg)
    except GoReadError:
        pass
    else:
        assert got == messages
    assert got == messages[: len(got)]


def _update(
    cid: str, cpus: str = "", mems: str = "", may_fail: bool = False
) -> api_pb2.ContainerUpdate:
    update = api_pb2.ContainerUpdate(container_id=cid, ignore_failure=may_fail)
    update.linux.resources.cpu.cpus = cpus
    update.linux.resources.cpu.mems = mems
    return update


class _Replying(Plugin):
    """Answers every CreateContainer and StopContainer with the same updates."""

    def __init__(self, updates: list[api_pb2.ContainerUpdate]) -> None:
        self.updates = updates

    async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
        return None, self.updates

    async def stop_container(self, pod, ctr):  # type: ignore[no-untyped-def]
        return self.updates


def _running() -> list[api_pb2.Container]:
    """A node with one container, a; the runtime changes it as updates come."""
    return [api_pb2.Container(id="a", pod_sandbox_id="pod0", name="a")]


async def test_a_field_set_twice_in_one_reply_fails_the_request() -> None:
    """As the Go adaptation: the second update of a's cpuset is a second owner of it."""
    plugin = _Replying([_update("a", cpus="1"), _update("a", cpus="2")])
    async with connected(plugin, RuntimePeer(containers=_running())) as (peer, _):
        new = api_pb2.Container(id="new", pod_sandbox_id="pod0", name="new")
        with pytest.raises(PluginError, match=r'both tried to set cpu\.cpus of "a"'):
            await peer.create_container(api_pb2.PodSandbox(id="pod0"), new)
        with pytest.raises(PluginError, match=r"both tried to set cpu\.cpus"):
            await peer.stop_container(api_pb2.PodSandbox(id="pod0"), peer.containers["a"])
        assert "new" not in peer.containers and peer.applied_updates == []


async def test_updates_of_one_container_merge_unless_they_clash() -> None:
    plugin = _Replying(
        [
            _update("a", cpus="1"),
            _update("ghost", cpus="3"),  # not on the node: skipped
            _update("a", mems="0"),
            _update("a", cpus="2", may_fail=True),  # clashes, may fail: dropped
        ]
    )
    async with connected(plugin, RuntimePeer(containers=_running())) as (peer, _):
        new = api_pb2.Container(id="new", pod_sandbox_id="pod0", name="new")
        await peer.create_container(api_pb2.PodSandbox(id="pod0"), new)
        cpu = peer.containers["a"].linux.resources.cpu
        assert (cpu.cpus, cpu.mems) == ("1", "0")
        assert [u.container_id for u in peer.applied_updates] == ["a"]


async def test_an_update_of_the_container_being_created_fails_it() -> None:
    plugin = _Replying([_update("new", cpus="1")])
    async with connected(plugin, RuntimePeer(containers=_running())) as (peer, _):
        new = api_pb2.Container(id="new", pod_sandbox_id="pod0", name="new")
        with pytest.raises(PluginError, match='asked update of "new" during creation'):
            await peer.create_container(api_pb2.PodSandbox(id="pod0"), new)


async def test_without_records_the_node_still_changes() -> None:
    plugin = _Replying([_update("a", cpus="1")])
    peer = RuntimePeer(containers=_running(), record=False)
    async with connected(plugin, peer) as (peer, _):
        new = api_pb2.Container(id="new", pod_sandbox_id="pod0", name="new")
        await peer.create_container(api_pb2.PodSandbox(id="pod0"), new)
        assert peer.containers["a"].linux.resources.cpu.cpus == "1" and "new" in peer.containers
        assert peer.calls == [] and peer.applied_updates == []
