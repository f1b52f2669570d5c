"""The plugin and the runtime coming and going on each runtime: nothing moves that should
not, reconnection resynchronizes, reloads and stalls are survived."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.harness import Quirk, Run, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30


def snapshot(run: Run) -> dict[str, str]:
    """Every container's cpuset (cgroup) by container id."""
    return {c.id: run.cpus(c) for pod in run.pods.values() for c in pod.containers}


def placed_kind(run: Run, container_id: str) -> str:
    return run.placed(container_id)["kind"]


def mixed_pods(run: Run) -> None:
    run.run_pod("be", "besteffort")
    run.run_pod("bu", "burstable", cpu_milli=200)
    run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_plugin_stop_moves_nothing(run: Run, sig: int) -> None:
    run.start_plugin()
    mixed_pods(run)
    run.settled()
    before = snapshot(run)
    run.stop_plugin(sig)
    time.sleep(1)
    assert snapshot(run) == before
    run.start_plugin()  # Synchronize adopts what the runtime reports
    time.sleep(1)
    assert snapshot(run) == before
    synced = [e for e in run.plugin_events() if e.get("event") == "synchronized with the runtime"]
    assert synced[-1]["containers"] == 3 and synced[-1]["adopted"] == 3


def test_lost_checkpoint_moves_nothing(run: Run) -> None:
    run.start_plugin()
    mixed_pods(run)
    run.settled()
    before = snapshot(run)
    run.stop_plugin(signal.SIGKILL)
    run.state.unlink()
    run.start_plugin()
    time.sleep(1)
    assert snapshot(run) == before
    # The state rebuilt from the runtime alone holds the same placements.
    wait_for("checkpoint rewritten", lambda: run.checkpoint().keys() == before.keys(), 10)
    placed = run.checkpoint()
    for cid, cpus in before.items():
        if placed[cid]["kind"] == "exclusive":
            assert parse_cpus(placed[cid]["exclusive"]) == parse_cpus(cpus)


def test_containerd_restart_reconnects_and_resyncs(run: Run) -> None:
    run.start_plugin()
    mixed_pods(run)
    run.settled()
    before = snapshot(run)
    plugin_pid = run.plugin.pid if run.plugin else 0
    run.stop_containerd()
    run.start_containerd()
    wait_for(
        "plugin synchronized again",
        lambda: (
            len(
                [
                    e
                    for e in run.plugin_events()
                    if e.get("event") == "synchronized with the runtime"
                ]
            )
            >= 2
        ),
        30,
    )
    run.wait_plugin_ready()
    assert run.plugin is not None and run.plugin.pid == plugin_pid  # the same process reconnected
    assert snapshot(run) == before
    # and places new containers as before
    be = run.run_pod("be2", "besteffort")
    exclusive = [parse_cpus(c) for cid, c in before.items() if placed_kind(run, cid) == "exclusive"]
    assert exclusive and all(not parse_cpus(run.cpus(be.containers[0])) & e for e in exclusive)


def test_config_reload_moves_containers_with_unsolicited_updates(run: Run) -> None:
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    run.start_plugin()
    pods = [run.run_pod(f"be{i}", "besteffort") for i in range(2)]
    assert all(parse_cpus(run.cpus(p.containers[0])) == cpus for p in pods)
    first = min(cpus)
    # A whole reserved CPU is not shared with ordinary containers (750m of one CPU is).
    run.plugin_config.write_text(f"policy:\n  reserved_resources:\n    cpu: cpuset:{first}\n")
    assert run.plugin is not None
    os.kill(run.plugin.pid, signal.SIGHUP)
    for p in pods:  # nothing of theirs changed in the runtime: the plugin had to push updates
        wait_for(
            "moved by reload", lambda p=p: parse_cpus(run.cpus(p.containers[0])) == cpus - {first}
        )
    run.plugin_config.write_text("")
    os.kill(run.plugin.pid, signal.SIGHUP)
    for p in pods:
        wait_for("back after reload", lambda p=p: parse_cpus(run.cpus(p.containers[0])) == cpus)
    assert run.metric("nri_topology_errors_total", reason="update_failed") == 0


def test_invalid_reload_is_refused_and_changes_nothing(run: Run) -> None:
    run.start_plugin()
    mixed_pods(run)
    run.settled()
    before = snapshot(run)
    run.plugin_config.write_text("policy:\n  pin_cpu: perhaps\n")
    assert run.plugin is not None
    os.kill(run.plugin.pid, signal.SIGHUP)
    wait_for(
        "reload refused",
        lambda: any("refused" in str(e.get("event", "")) for e in run.plugin_events()),
        10,
    )
    assert run.plugin.poll() is None
    assert snapshot(run) == before


def launched(run: Run) -> None:
    """Install the shipped launcher and restart containerd, which launches it at start-up."""
    run.install_plugin()
    run.stop_containerd()
    run.start_containerd()
    wait_for(
        "launched plugin configured",
        lambda: any(e.get("event") == "configured by the NRI runtime" for e in run.plugin_events()),
        60,
    )
    assert run.launched_plugin_pid() is not None


def test_preinstalled_plugin_takes_its_settings_from_the_conf_d_file(run: Run) -> None:
    """The runtime never restarts a launched plugin with its conf.d file: the state path and
    metrics port written there are the ones in force from the start, over the --config file's."""
    decoy = run.dir / "decoy"
    run.write_plugin_config(f"state:\n  path: {decoy / 'state.json'}\nmetrics:\n  enabled: false\n")
    run.install_plugin(conf_d=f"state:\n  path: {run.state}\nmetrics:\n  port: {run.plugin_port}\n")
    run.stop_containerd()
    run.start_containerd()
    wait_for(
        "launched plugin configured",
        lambda: any(e.get("event") == "configured by the NRI runtime" for e in run.plugin_events()),
        30,
    )
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    wait_for("checkpoint at the conf.d path", lambda: g.containers[0].id in _text(run.state), 10)
    status, body = run.plugin_http("/metrics")
    assert status == 200 and "nri_topology" in body
    assert not decoy.exists()
    assert not [
        e
        for e in run.plugin_events()
        if e.get("event") == "changed settings take effect on restart"
    ]


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_preinstalled_plugin_launched_by_containerd(run: Run) -> None:
    launched(run)
    be = run.run_pod("be", "besteffort")
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpus(g.containers[0]))
    assert len(exclusive) == 1
    run.settled()  # the re-pin of `be` follows the reply
    assert parse_cpus(run.cpus(be.containers[0])) == online_cpus() - exclusive
    run.remove_pod(g)
    wait_for("grown back", lambda: parse_cpus(run.cpus(be.containers[0])) == online_cpus(), 10)


def test_preinstalled_plugin_relaunched_keeps_placements(
    run: Run, request: pytest.FixtureRequest
) -> None:
    """After a runtime restart the relaunched plugin must know the running containers."""
    launched(run)
    if run.has(Quirk.NO_SYNC_ON_RELAUNCH):
        request.applymarker(pytest.mark.xfail(strict=True, reason=Quirk.NO_SYNC_ON_RELAUNCH.value))
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    run.settled()
    before = snapshot(run)
    run.stop_containerd()
    wait_for("launched plugin exits with its runtime", lambda: run.launched_plugin_pid() is None)
    run.start_containerd()
    wait_for(
        "relaunched plugin configured",
        lambda: (
            sum(e.get("event") == "configured by the NRI runtime" for e in run.plugin_events()) == 2
        ),
        60,
    )
    assert snapshot(run) == before
    be = run.run_pod("be", "besteffort")
    assert not parse_cpus(run.cpus(be.containers[0])) & parse_cpus(run.cpus(g.containers[0]))


def test_stalled_plugin_times_out_and_pods_still_start(make_run) -> None:
    run: Run = make_run(nri_timeout="2s")
    run.start_plugin()
    assert run.plugin is not None
    os.kill(run.plugin.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        be = run.run_pod("be", "besteffort")
        took = time.monotonic() - started
        assert run.cpus(be.containers[0])  # started without the plugin's answer
        assert took >= 1.5  # the runtime waited for its request timeout
        fast = time.monotonic()
        run.run_pod("be2", "besteffort")  # the runtime closed the plugin: no more waiting
        assert time.monotonic() - fast < took
    finally:
        os.kill(run.plugin.pid, signal.SIGCONT)
    # Woken up, the plugin finds its connection closed, reconnects and learns both pods.
    wait_for(
        "plugin resynchronized",
        lambda: any(
            e.get("event") == "synchronized with the runtime" and e.get("containers") == 2
            for e in run.plugin_events()
        ),
        30,
    )
    run.wait_plugin_ready()
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpus(g.containers[0]))
    assert len(exclusive) == 1
    run.settled()  # the re-pin of `be` follows the reply
    assert parse_cpus(run.cpus(be.containers[0])) == online_cpus() - exclusive
