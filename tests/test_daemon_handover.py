"""Hand-over on upgrade, with the real policy over real sockets: a second instance on the same
state file stands by (ready, saying so) until the first stops, then adopts every placement
without moving anything; a standby that waits too long gives up with exit status 2."""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path

import pytest

from nri_topology.daemon.service import Daemon, Overrides
from nri_topology.nri import api_pb2
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
    """A daemon with the real policy on a synthetic machine, set up (standing by or not)."""
    sys_root = tmp_path / "sys"
    if not sys_root.exists():
        machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=4))
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
    assert second.standby is not None and f"pid {os.getpid()}" in second.standby
    new = asyncio.get_running_loop().create_task(second.serve())
    await asyncio.sleep(0.3)
    assert second.status is not None
    status, body = await _http(second.status.port, "/readyz")
    assert status == 200 and body.startswith("ready: standby, waiting for the state file:")
    _, metrics = await _http(second.status.port, "/metrics")
    assert "nri_topology_standby 1.0" in metrics
    assert not new.done() and len(peer.connections) == 1  # not connected while the first is

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
