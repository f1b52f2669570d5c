"""`nri-topology run` as a real process: launched by the runtime on fd 3 with the bare NRI
environment, and started externally and stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import sys
from pathlib import Path

import pytest

from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology.cpuset import parse as parse_cpus
from tests import machines
from tests.sockets import free_port, http_get
from tests.test_daemon_plugin import ctr, pod
from tests.test_daemon_restore import guaranteed

ROOT = Path(__file__).resolve().parents[1]


def _args(tmp_path: Path) -> list[str]:
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=4))
    (tmp_path / "config.yaml").write_text("policy:\n  reserved_resources:\n    cpu: 500m\n")
    return [
        "-m",
        "nri_topology.cli",
        "run",
        f"--config={tmp_path / 'config.yaml'}",
        f"--sysfs={sysfs}",
        f"--state={tmp_path / 'state.json'}",
        "--metrics-port=0",
        "--log-format=json",
        f"--log-file={tmp_path / 'log.jsonl'}",
    ]


def _log_events(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]


async def test_launched_by_the_runtime_on_fd_3(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    # The runtime gives the plugin only these three variables and the socket as fd 3.
    env = {"NRI_PLUGIN_NAME": "nri-topology", "NRI_PLUGIN_IDX": "90", "NRI_PLUGIN_SOCKET": "3"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_args(tmp_path),
        env=env,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        close_fds=False,  # fd 3 is made in the child, after the parent's descriptors are known
        preexec_fn=lambda: os.dup2(theirs.fileno(), 3),
    )
    theirs.close()
    peer = RuntimePeer(config="policy:\n  prefer_shared_cpus: false\n")
    try:
        try:
            conn = await asyncio.wait_for(peer.attach(ours), 30)
        except Exception:
            await peer.close()
            _, stderr = await asyncio.wait_for(proc.communicate(), 30)
            raise AssertionError(stderr.decode() + (tmp_path / "log.jsonl").read_text()) from None
        assert (conn.name, conn.idx) == ("nri-topology", "90")
        reply = await peer.create_container(pod(), ctr("a"))
        assert reply.adjust.linux.resources.cpu.cpus
    finally:
        await peer.close()  # the runtime goes away: a launched plugin ends with its socket
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    events = [e["event"] for e in _log_events(tmp_path)]
    assert "container created" in events and "shut down" in events
    assert Checkpoint(tmp_path / "state.json").load().body is not None


async def test_external_plugin_stops_cleanly_on_sigterm(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_args(tmp_path),
        f"--socket={sock}",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await peer.wait_plugin(timeout=30)
        await peer.create_container(pod(), ctr("a"))
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, stderr.decode()
        await peer.wait_disconnected()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await peer.close()
    body = Checkpoint(tmp_path / "state.json").load().body
    assert body is not None and "a" in json.dumps(body["policy"])


async def test_a_second_instance_stands_by_then_exits_naming_the_holder(
    tmp_path: Path, short_dir: Path
) -> None:
    """It waits `state.lock_wait_seconds` for the first to stop, connected to nothing."""
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = await asyncio.create_subprocess_exec(
        sys.executable, *_args(tmp_path), f"--socket={sock}", env=env, cwd=ROOT
    )
    try:
        await peer.wait_plugin(timeout=30)
        second_config = tmp_path / "second.yaml"
        second_config.write_text("state:\n  lock_wait_seconds: 0.5\n")
        args = [a for a in _args(tmp_path) if not a.startswith(("--log-file", "--config"))]
        args.append(f"--config={second_config}")
        second = await asyncio.create_subprocess_exec(
            sys.executable, *args, f"--socket={sock}", env=env, cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, stderr = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode == 2
        assert f"pid {first.pid} holds {tmp_path / 'state.json.lock'}" in stderr.decode()
        assert len(peer.registrations) == 1  # the second never connected
    finally:
        first.send_signal(signal.SIGTERM)
        await asyncio.wait_for(first.wait(), 30)
        await peer.close()
    assert first.returncode == 0


async def test_bad_configuration_exits_2_before_connecting(tmp_path: Path) -> None:
    args = _args(tmp_path)
    (tmp_path / "config.yaml").write_text("policy:\n  pin_cpu: maybe\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=ROOT, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    log = (tmp_path / "log.jsonl").read_text()
    assert "policy.pin_cpu" in log and "expected true or false" in log
    assert stderr == b""


def _launcher_args(log: Path) -> list[str]:
    """The shipped launcher's command after the interpreter, with `log` as its log file."""
    launcher = (ROOT / "packaging/nri/90-nri-topology").read_text()
    words = shlex.split(" ".join(x.rstrip("\\") for x in launcher.splitlines() if x[:1] != "#"))
    args = words[words.index("exec") + 2 :]
    args[args.index("--log-file") + 1] = str(log)
    return args


async def test_launched_plugin_takes_every_setting_from_its_first_configure(
    tmp_path: Path,
) -> None:
    """A launched plugin is never restarted with its conf.d file: the state path, metrics port,
    topology and log level that the first Configure carries are the ones in force, over the
    --config file's."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=4))
    decoy = tmp_path / "file.yaml"  # what the plugin would use without the runtime's text
    decoy.write_text(
        f"state:\n  path: {tmp_path / 'decoy' / 'state.json'}\nmetrics:\n  enabled: false\n"
    )
    port = free_port()
    conf_d = (
        f"state:\n  path: {tmp_path / 'conf' / 'state.json'}\n"
        f"metrics:\n  port: {port}\n"
        f"topology:\n  sysfs_root: {sysfs}\n"
        "logging:\n  level: debug\n"
    )
    env = {"NRI_PLUGIN_NAME": "nri-topology", "NRI_PLUGIN_IDX": "90", "NRI_PLUGIN_SOCKET": "3"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_launcher_args(tmp_path / "log.jsonl"),
        f"--config={decoy}",
        env=env,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        close_fds=False,
        preexec_fn=lambda: os.dup2(theirs.fileno(), 3),
    )
    theirs.close()
    peer = RuntimePeer(config=conf_d)
    try:
        try:
            await asyncio.wait_for(peer.attach(ours), 30)
        except Exception:
            await peer.close()
            _, stderr = await asyncio.wait_for(proc.communicate(), 30)
            raise AssertionError(stderr.decode() + (tmp_path / "log.jsonl").read_text()) from None
        p, c = guaranteed(1, 4)  # more CPUs than this host has; the conf.d machine has them
        reply = await peer.create_container(p, c)
        assert len(parse_cpus(reply.adjust.linux.resources.cpu.cpus)) == 4
        status, body = await asyncio.wait_for(
            asyncio.to_thread(http_get, "127.0.0.1", port, "/readyz"), 30
        )
        assert status == 200, body
    finally:
        await peer.close()
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    assert Checkpoint(tmp_path / "conf" / "state.json").load().body is not None
    assert not (tmp_path / "decoy").exists()
    events = _log_events(tmp_path)
    assert not [e for e in events if e["event"] == "changed settings take effect on restart"]
    assert any(e["level"] == "debug" for e in events)


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        ("topology:\n  sysfs_root: {tmp}/absent\n", "cannot read the machine"),
        # found once the plugin is built: it must not write its state all the same
        (
            "topology:\n  sysfs_root: {sysfs}\nnrt:\n  publish: true\n  kubeconfig: {tmp}/absent\n",
            "cannot publish",
        ),
    ],
    ids=["topology", "nrt"],
)
async def test_launched_plugin_that_cannot_start_with_its_configure_fails_it_and_exits_2(
    tmp_path: Path, problem: str, message: str
) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=4))
    env = {"NRI_PLUGIN_NAME": "nri-topology", "NRI_PLUGIN_IDX": "90", "NRI_PLUGIN_SOCKET": "3"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_launcher_args(tmp_path / "log.jsonl"),
        env=env,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        close_fds=False,
        preexec_fn=lambda: os.dup2(theirs.fileno(), 3),
    )
    theirs.close()
    peer = RuntimePeer(
        config=f"state:\n  path: {tmp_path / 'state.json'}\nmetrics:\n  enabled: false\n"
        + problem.format(tmp=tmp_path, sysfs=sysfs)
    )
    try:
        with pytest.raises(PluginError, match=f"Configure failed.*{message}"):
            await asyncio.wait_for(peer.attach(ours), 30)
    finally:
        await peer.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 2
    assert "cannot start with the runtime's configuration" in (tmp_path / "log.jsonl").read_text()
    assert not (tmp_path / "state.json").exists()
