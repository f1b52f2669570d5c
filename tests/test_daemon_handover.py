"""Hand-over on upgrade, with the real policy over real sockets: a second instance on the same
state file stands by (ready, saying so, once it has shown it could take over) until the first
stops, then adopts every placement without moving anything; a standby that could not take over
is not ready and says why; a standby that waits too long gives up with exit status 2."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from nri_topology.daemon import takeover
from nri_topology.daemon.lock import InstanceLock
from nri_topology.daemon.service import Daemon
from nri_topology.daemon.settings import Overrides
from nri_topology.nri import api_pb2
from nri_topology.testing.cri_server import CriServer
from nri_topology.testing.runtime import RuntimePeer
from tests import machines
from tests.pods import running_pair
from tests.sockets import free_port

pytestmark = pytest.mark.usefixtures("restore_logging")


async def _http(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def _daemon(tmp_path: Path, sock: Path, config: str = "") -> tuple[Daemon, io.StringIO]:
    """A daemon with the real policy on a synthetic machine with a cgroup v2 hierarchy holding
    the kubelet's pods, set up (standing by or not)."""
    sys_root = tmp_path / "sys"
    if not sys_root.exists():
        machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=4))
        cgroup = sys_root / "fs" / "cgroup"
        (cgroup / "kubepods.slice").mkdir(parents=True)
        (cgroup / "cgroup.controllers").write_text("cpuset cpu memory\n")
    path = tmp_path / "config.yaml"
    path.write_text(config)
    overrides = Overrides(
        socket=str(sock),
        sysfs=str(sys_root),
        state=str(tmp_path / "state" / "state.json"),
        metrics_port=free_port(),
        log_format="json",
    )
    log = io.StringIO()
    daemon = Daemon(path, overrides, log_stream=log, environ={})
    daemon.setup()
    return daemon, log


def _events(log: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in log.getvalue().splitlines()]


def _pod(i: int, guaranteed: bool) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    return running_pair(str(i), guaranteed)


async def test_a_second_instance_stands_by_then_adopts_everything_unmoved(
    tmp_path: Path, short_dir: Path
) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    first, _ = _daemon(tmp_path, sock)
    old = asyncio.get_running_loop().create_task(first.serve())
    await peer.wait_plugin()
    for i in range(8):
        await peer.run_pod_sandbox(_pod(i, i % 3 == 0)[0])
        await peer.create_container(*_pod(i, i % 3 == 0))
    assert first.plugin is not None
    await first.plugin.settle()  # the re-pins that follow the replies have landed
    before = {c: (a.cpus, a.mems) for c, a in first.plugin.policy.assignments().items()}
    assert len(before) == 8
    cpusets = {cid: c.linux.resources.cpu.cpus for cid, c in peer.containers.items()}

    second, log = _daemon(tmp_path, sock)  # the new pod of a surge update: no exit 2
    assert second.standby is not None and f"pid {os.getpid()}" in second.standby.holder
    new = asyncio.get_running_loop().create_task(second.serve())
    await asyncio.sleep(0.3)
    assert second.status is not None
    status, body = await _http(second.status.port, "/readyz")
    assert status == 200 and body.startswith("ready: standby, waiting for the state file:")
    _, metrics = await _http(second.status.port, "/metrics")
    assert "nri_topology_standby 1.0" in metrics
    assert not new.done()
    # It connected to prove the socket, and closed without registering: the first one serves.
    assert len(peer.connections) >= 2
    assert [c for c in peer.connections if c.registered.is_set()] == [peer.connections[0]]

    first.stop()  # the old pod goes: the second takes over
    assert await asyncio.wait_for(old, 5) == 0
    await peer.wait_plugin()
    for _ in range(100):
        if second.plugin is not None and second.plugin.ready()[0]:
            break
        await asyncio.sleep(0.05)
    assert second.plugin is not None and second.plugin.ready() == (True, "")
    after = {c: (a.cpus, a.mems) for c, a in second.plugin.policy.assignments().items()}
    assert after == before
    assert {cid: c.linux.resources.cpu.cpus for cid, c in peer.containers.items()} == cpusets
    assert [e["event"] for e in _events(log) if e["event"] == "took over the state file"]
    status, body = await _http(second.status.port, "/readyz")
    assert (status, body) == (200, "ready\n")
    await peer.run_pod_sandbox(_pod(9, True)[0])
    await peer.create_container(*_pod(9, True))  # the new instance places new pods
    assert "c9" in second.plugin.policy.assignments()
    second.stop()
    assert await asyncio.wait_for(new, 5) == 0
    await peer.close()


async def test_a_standby_gives_up_when_the_wait_runs_out(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    first, _ = _daemon(tmp_path, sock)
    old = asyncio.get_running_loop().create_task(first.serve())
    await peer.wait_plugin()
    second, log = _daemon(tmp_path, sock, "state:\n  lock_wait_seconds: 0.3\n")
    assert await asyncio.wait_for(second.serve(), 5) == 2
    assert [e for e in _events(log) if e["event"] == "the state file stayed locked, giving up"]
    first.stop()
    assert await asyncio.wait_for(old, 5) == 0
    await peer.close()


async def test_a_standby_stops_on_a_signal(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    first, _ = _daemon(tmp_path, sock)
    old = asyncio.get_running_loop().create_task(first.serve())
    await peer.wait_plugin()
    second, _ = _daemon(tmp_path, sock)
    task = asyncio.get_running_loop().create_task(second.serve())
    await asyncio.sleep(0.2)
    second.stop()
    assert await asyncio.wait_for(task, 5) == 0
    first.stop()
    assert await asyncio.wait_for(old, 5) == 0
    await peer.close()


class Broken:
    """One thing a standby needs to take over, broken on the node, then repaired."""

    def __init__(self, tmp_path: Path, short_dir: Path) -> None:
        self.nri = short_dir / "nri.sock"
        self.cri = short_dir / "cri.sock"
        self.kubepods = tmp_path / "sys" / "fs" / "cgroup" / "kubepods.slice"
        self.peer = RuntimePeer()
        self.cri_server = CriServer(self.peer)
        self.silent: asyncio.Server | None = None
        self.held: socket.socket | None = None

    async def repair(self) -> None:
        if self.held is not None:  # the runtime is back: its socket made anew
            self.held.close()
            self.nri.unlink()
        if not self.nri.exists():
            await self.peer.listen(str(self.nri))
        self.kubepods.mkdir(exist_ok=True)
        if self.silent is not None:
            self.silent.close()
            await self.silent.wait_closed()
            self.cri.unlink(missing_ok=True)
        await self.cri_server.listen(str(self.cri))

    async def close(self) -> None:
        await self.cri_server.close()
        await self.peer.close()


async def _nri_absent(b: Broken) -> None:
    return None


async def _nri_refuses(b: Broken) -> None:
    b.held = socket.socket(socket.AF_UNIX)
    b.held.bind(str(b.nri))  # a socket file nothing listens on: its runtime is not running


async def _no_kubepods(b: Broken) -> None:
    await b.peer.listen(str(b.nri))
    b.kubepods.rmdir()


async def _cri_absent(b: Broken) -> None:
    await b.peer.listen(str(b.nri))


async def _cri_silent(b: Broken) -> None:
    await b.peer.listen(str(b.nri))

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers

    b.silent = await asyncio.start_unix_server(silent, str(b.cri))


CRI = "updates:\n  transport: cri\n  cri_socket: {cri}\n"
SAID = "not ready: standby, could not take over: "
NOT_READY = "standing by, but could not take over: not ready"


async def _readyz_until(daemon: Daemon, done: Callable[[int, str], bool]) -> tuple[int, str]:
    status, body = 0, ""
    for _ in range(200):
        await asyncio.sleep(0.02)
        if daemon.status is None or not daemon.status.listening:  # not listening yet
            continue
        status, body = await _http(daemon.status.port, "/readyz")
        if done(status, body):
            return status, body
    raise AssertionError(f"/readyz still {status} {body!r}")


@pytest.mark.parametrize(
    ("breaks", "config", "said"),
    [
        (_nri_absent, "", ["no NRI socket at {nri}", "packaging/runtime/"]),
        (_nri_refuses, "", ["nothing accepts connections on {nri}", "packaging/runtime/"]),
        (_no_kubepods, "", ["no kubepods cgroup under"]),
        (_cri_absent, CRI, ["the runtime's CRI does not answer", "no CRI socket at {cri}"]),
        (_cri_silent, CRI, ["the runtime's CRI does not answer", "at {cri}: DEADLINE_EXCEEDED"]),
    ],
    ids=["nri-absent", "nri-refuses", "no-kubepods", "cri-absent", "cri-silent"],
)
async def test_a_standby_that_could_not_take_over_is_not_ready_and_says_why(
    tmp_path: Path,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    breaks: Callable[[Broken], Awaitable[None]],
    config: str,
    said: list[str],
) -> None:
    """The old instance holds the state file; the new one finds something it would need broken:
    not ready (a surge rollout stalls, the old one serving on), the reason in `/readyz` and once
    in a warning however often it checks; repaired, it is ready, standing by, never registered."""
    monkeypatch.setattr(takeover, "CHECK_S", 0.05)
    b = Broken(tmp_path, short_dir)
    old = InstanceLock(tmp_path / "state" / "state.json")
    old.acquire()  # a lock of its own: this daemon cannot take it while the test holds it
    second, log = _daemon(tmp_path, b.nri, config.format(cri=b.cri))
    assert second.standby is not None
    await breaks(b)
    task = asyncio.get_running_loop().create_task(second.serve())
    try:
        status, body = await _readyz_until(second, lambda status, body: SAID in body)
        assert status == 503
        for words in said:
            assert words.format(nri=b.nri, cri=b.cri) in body
        await asyncio.sleep(0.3)  # several checks, one warning
        warned = [e for e in _events(log) if e["event"] == NOT_READY]
        assert len(warned) == 1 and warned[0]["level"] == "warning"
        assert warned[0]["reason"] == body.removeprefix(SAID).rstrip("\n")

        await b.repair()
        _, body = await _readyz_until(second, lambda status, body: status == 200)
        assert body.startswith("ready: standby, waiting for the state file:")
        assert not [c for c in b.peer.connections if c.registered.is_set()]
    finally:
        second.stop()
        assert await asyncio.wait_for(task, 5) == 0
        old.release()
        await b.close()
