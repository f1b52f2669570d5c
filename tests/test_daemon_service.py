"""The assembled daemon: start-up checks, socket, status endpoint, reload, SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import nri_topology
from nri_topology.config.load import ConfigError, config_from
from nri_topology.config.schema import Config
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.service import Daemon, StartupError
from nri_topology.daemon.settings import Overrides, effective
from nri_topology.policy.options import Options
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology.model import Machine
from tests import machines
from tests.sockets import free_port
from tests.test_daemon_plugin import ScriptedPolicy, ctr, pod, scripted_state

pytestmark = pytest.mark.usefixtures("restore_logging")


def make_daemon(tmp_path: Path, sock: Path, config: str = "", **kw: object) -> Daemon:
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=2))
    path = tmp_path / "config.yaml"
    path.write_text(config)
    overrides = Overrides(
        socket=str(sock),
        sysfs=str(sysfs),
        state=str(tmp_path / "state" / "state.json"),
        metrics_port=free_port(),
        log_format="json",
    )
    policies: list[ScriptedPolicy] = []

    def factory(machine: Machine, options: Options) -> ScriptedPolicy:
        policies.append(ScriptedPolicy())
        return policies[-1]

    daemon = Daemon(
        path,
        overrides,
        log_stream=kw.pop("log_stream", io.StringIO()),  # type: ignore[arg-type]
        policy_factory=factory,
        environ={},
        **kw,  # type: ignore[arg-type]
    )
    daemon.setup()
    return daemon


async def _http(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_start_up_log_names_the_version(tmp_path: Path, short_dir: Path) -> None:
    stream = io.StringIO()
    make_daemon(tmp_path, short_dir / "nri.sock", log_stream=stream)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    (starting,) = [line for line in lines if line["event"] == "starting"]
    assert starting["version"] == nri_topology.__version__


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, short_dir: Path) -> AsyncIterator[tuple[Daemon, RuntimePeer]]:
    """A daemon connected to a runtime peer; inside the test, so that timers it starts run on
    the test's clock (a looptime test's virtual one)."""
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    daemon = make_daemon(tmp_path, sock, "policy:\n  colocate_pods: false\n")
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    yield daemon, peer
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()


@pytest.fixture
async def running(tmp_path: Path, short_dir: Path) -> AsyncIterator[tuple[Daemon, RuntimePeer]]:
    async with serving(tmp_path, short_dir) as both:
        yield both


def reloads(daemon: Daemon, result: str) -> float:
    """How many reloads ended in `result` (applied, rejected): the event the tests wait for."""
    registry = daemon.plugin.metrics.registry  # type: ignore[union-attr]
    return registry.get_sample_value("nri_topology_config_reloads_total", {"result": result}) or 0


async def next_reload(daemon: Daemon, result: str) -> float:
    """Wait (on the virtual clock) for the next reload ending in `result`; its loop time."""
    before = reloads(daemon, result)
    while reloads(daemon, result) == before:
        await asyncio.sleep(0.01)
    return asyncio.get_running_loop().time()


async def test_serves_placements_status_and_stops_cleanly(running, tmp_path: Path) -> None:
    daemon, peer = running
    assert daemon.status is not None
    port = daemon.status.port
    assert await _http(port, "/readyz") == (200, "ready\n")
    reply = await peer.create_container(pod(), ctr("a"))
    assert reply.adjust.linux.resources.cpu.cpus == "0"
    status, body = await _http(port, "/metrics")
    assert status == 200
    assert 'nri_topology_nri_requests_total{method="CreateContainer"} 1.0' in body
    (view,) = daemon.plugin.policy.pools()  # type: ignore[union-attr]
    assert f'nri_topology_pool_cpu_free_cores{{pool="node0"}} {view.free_milli / 1000}' in body
    assert f'nri_topology_pool_containers{{pool="node0"}} {view.containers:.1f}' in body
    assert 'nri_topology_pool_memory_assigned_bytes{pool="node0",tier="dram"} 1.048576e+06' in body
    assert 'container_id="a"' in body and 'kind="exclusive"' in body
    await daemon.plugin.flush()  # type: ignore[union-attr]
    state = Checkpoint(tmp_path / "state" / "state.json").load().body
    assert state is not None and state["policy"] == scripted_state({"a": 0})


@pytest.mark.looptime
async def test_config_file_change_reconfigures_and_bad_change_is_refused(tmp_path, short_dir):
    """On the loop's virtual clock, at the reloader's real interval (2 s)."""
    async with serving(tmp_path, short_dir) as (daemon, _):
        policy = daemon.plugin.policy  # type: ignore[union-attr]
        loop = asyncio.get_running_loop()
        (tmp_path / "config.yaml").write_text("policy:\n  colocate_pods: true\n")
        written = loop.time()
        assert await next_reload(daemon, "applied") - written <= 2.01  # within one interval
        assert policy.options.colocate_pods and daemon.config.policy.colocate_pods
        (tmp_path / "config.yaml").write_text("policy:\n  colocate_podz: true\n")
        await next_reload(daemon, "rejected")
        assert policy.options.colocate_pods and daemon.config.policy.colocate_pods
        await asyncio.sleep(10)  # refused content is not looked at again
        assert reloads(daemon, "rejected") == 1 and reloads(daemon, "applied") == 1
        (tmp_path / "config.yaml").write_text("expose:\n  enabled: false\n")
        await next_reload(daemon, "applied")
        assert not daemon.plugin.settings.expose_env  # type: ignore[union-attr]
        assert not policy.options.colocate_pods  # back to the default


async def test_sigterm_drains_and_exits_zero(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    daemon = make_daemon(tmp_path, sock)
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    await peer.create_container(pod(), ctr("a", cold="60"))
    await peer.start_container(pod(), ctr("a"))
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(task, 5) == 0
    await peer.wait_disconnected()
    state = Checkpoint(tmp_path / "state" / "state.json").load().body
    assert state is not None and list(state["cold_starts"]["deadline_ns"]) == ["a"]
    await peer.close()


@pytest.mark.looptime
async def test_unreachable_runtime_is_retried_until_stopped(tmp_path, short_dir) -> None:
    """On the loop's virtual clock: a minute of the stub's real backoff (0.5 s doubling). The
    operator is warned once, with the path tried and where NRI is enabled; the retries are
    info lines, and `/readyz` says why."""
    stream = io.StringIO()
    absent = short_dir / "absent.sock"
    daemon = make_daemon(tmp_path, absent, log_stream=stream)
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await asyncio.sleep(60)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    tries = [line for line in lines if line["event"] == "NRI runtime not reachable"]
    assert len(tries) >= 5
    assert [t["level"] for t in tries] == ["warning"] + ["info"] * (len(tries) - 1)
    why = f"no NRI socket at {absent}: NRI is off in the runtime"
    assert tries[0]["why"].startswith(why) and "packaging/runtime/" in tries[0]["why"]
    assert tries[0]["path"] == str(absent)
    assert daemon.status is not None
    status, body = await _http(daemon.status.port, "/readyz")
    assert status == 503
    assert body.startswith(f"not ready: not registered with the runtime: {why}")
    assert await _http(daemon.status.port, "/healthz") == (200, "ok\n")
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_runtime_supplied_config_applies_and_bad_one_keeps_defaults(tmp_path, short_dir):
    for text, colocate in (("policy:\n  colocate_pods: true\n", True), ("bogus: 1\n", False)):
        sock = short_dir / "nri.sock"
        peer = RuntimePeer(config=text)
        await peer.listen(str(sock))
        daemon = make_daemon(tmp_path, sock)
        task = asyncio.get_running_loop().create_task(daemon.serve())
        await peer.wait_plugin()
        assert daemon.plugin.policy.options.colocate_pods is colocate  # type: ignore[union-attr]
        daemon.stop()
        assert await asyncio.wait_for(task, 5) == 0
        await peer.close()


@pytest.mark.parametrize(
    ("config", "sysfs", "message"),
    [
        ("policy: [1]\n", None, "invalid configuration"),
        ("", "missing", "cannot read the machine topology"),
    ],
)
def test_startup_problems_are_clear_errors(tmp_path, config, sysfs, message) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    overrides = Overrides(sysfs=str(tmp_path / sysfs) if sysfs else None)
    daemon = Daemon(path, overrides, log_stream=io.StringIO(), policy_factory=lambda m, c: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(StartupError, match=message):
        daemon.setup()


def test_command_line_overrides_win_over_the_file() -> None:
    base = config_from({"metrics": {"port": 9000}, "nri": {"socket": "/a"}})
    out = effective(base, Overrides(socket="/b", metrics_port=0, log_level="debug"))
    assert out.nri.socket == "/b" and not out.metrics.enabled and out.metrics.port == 9000
    assert out.logging.level == "debug"
    assert effective(base, Overrides()) == base


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {}, None),
        ([], {"NRI_TOPOLOGY_SYSFS": "/env/sys"}, "/env/sys"),
        (["--sysfs", "/cli/sys"], {"NRI_TOPOLOGY_SYSFS": "/env/sys"}, "/cli/sys"),
    ],
)
def test_sysfs_root_from_option_then_environment(argv, environ, expected) -> None:
    import argparse

    from nri_topology.commands import run

    parser = argparse.ArgumentParser()
    run.configure(parser)
    assert run.overrides_of(parser.parse_args(argv), environ).sysfs == expected


def test_command_line_overrides_are_validated_like_the_file() -> None:
    assert effective(Config(), Overrides(plugin_index="07")).nri.plugin_index == "07"
    with pytest.raises(ConfigError, match=r"command line: nri\.plugin_index: expected two digits"):
        effective(Config(), Overrides(plugin_index="7"))


def test_invalid_command_line_option_stops_start_up(tmp_path) -> None:
    (tmp_path / "config.yaml").write_text("")
    daemon = Daemon(
        tmp_path / "config.yaml",
        Overrides(log_level="loud"),
        log_stream=io.StringIO(),
        policy_factory=lambda m, c: None,  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(StartupError, match="invalid command-line option"):
        daemon.setup()


async def test_one_instance_per_state_file(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    first = make_daemon(tmp_path, sock)
    with pytest.raises(StartupError, match=rf"pid {os.getpid()} holds .*state\.json\.lock"):
        make_daemon(tmp_path, sock, "state:\n  lock_wait_seconds: 0\n")
    task = asyncio.get_running_loop().create_task(first.serve())
    await peer.wait_plugin()
    first.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()
    make_daemon(tmp_path, sock).close()  # the lock went with the first daemon


async def test_failed_final_checkpoint_exits_non_zero(tmp_path: Path, short_dir: Path) -> None:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    daemon = make_daemon(tmp_path, sock)
    (tmp_path / "state" / "state.json").mkdir()  # every write fails: it cannot be replaced
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    await peer.create_container(pod(), ctr("a"))
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(task, 5) == 1
    await peer.close()


@pytest.mark.looptime
async def test_hostile_config_files_are_refused_and_the_old_one_kept(tmp_path, short_dir):
    hostile = [
        "policy: " + "[" * 30_000 + "]" * 30_000,
        "policy:\n  reserved_namespaces: [" + "9" * 5000 + "]\n",
        "a: &a [1]\nb: [*a, *a]\n",
        "# " + "x" * (2 << 20) + "\n",
    ]
    async with serving(tmp_path, short_dir) as (daemon, peer):
        policy = daemon.plugin.policy  # type: ignore[union-attr]
        for text in hostile:
            (tmp_path / "config.yaml").write_text(text)
            await next_reload(daemon, "rejected")
            assert not policy.options.colocate_pods and daemon.config.policy.colocate_pods is False
        assert reloads(daemon, "applied") == 0
        reply = await peer.create_container(pod(), ctr("a"))  # still serving
        assert reply.adjust.linux.resources.cpu.cpus == "0"
