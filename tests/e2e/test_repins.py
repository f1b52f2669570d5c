"""Re-pins on a real containerd 1.7: its NRI (older than v0.12.1) may deadlock on a plugin's
UpdateContainers that meets an event, so by default (`updates.in_reply: auto`) the re-pins of
other containers travel in the reply, each ignoring failure: no exclusivity window, and a shared
container that has just exited fails nobody's creation. (Paced re-pins after the reply are
tested through the daemon against the test runtime, tests/test_daemon_schedule.py.)"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.e2e.harness import Run, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30
SHARED = 7


@pytest.fixture
def cpus() -> set[int]:
    found = online_cpus()
    if len(found) < 2:
        pytest.skip("e2e re-pins need at least 2 CPUs")
    return found


def _shared(run: Run, n: int = SHARED) -> list:
    return [run.run_pod(f"be{i}", "besteffort") for i in range(n)]


def _holding(run: Run, pods: list, exclusive: set[int]) -> list[str]:
    """The pods whose container's cgroup still holds some of `exclusive`."""
    return [p.name for p in pods if parse_cpus(run.cpuset(p.containers[0]).cpus) & exclusive]


def test_on_an_old_nri_re_pins_travel_in_the_reply_and_leave_no_window(
    run: Run, cpus: set[int]
) -> None:
    run.start_plugin()
    shared = _shared(run)
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpuset(g.containers[0]).cpus)
    assert len(exclusive) == 1
    assert _holding(run, shared, exclusive) == []  # applied before the reply's container ran
    assert run.metric("nri_topology_update_batch_seconds_count") == 0  # no UpdateContainers
    assert run.metric("nri_topology_exclusive_window_seconds_count") == 1
    assert run.metric("nri_topology_exclusive_window_seconds_sum") == 0
    _, text = run.plugin_http("/explain?container=e2e/g/c0&format=json")
    (explained,) = json.loads(text)["containers"]
    assert explained["decision"]["exclusive_window_seconds"] == 0
    warned = [e for e in run.plugin_events() if "may deadlock on UpdateContainers" in e["event"]]
    assert len(warned) == 1
    run.remove_pod(g)
    wait_for(
        "shared cpusets grown back",
        lambda: all(parse_cpus(run.cpuset(p.containers[0]).cpus) == cpus for p in shared),
        10,
    )


def test_a_killed_shared_container_fails_no_creation(run: Run, cpus: set[int]) -> None:
    run.start_plugin()
    shared = _shared(run, 3)
    victim = shared[1].containers[0]
    os.kill(run.pid(victim.id), signal.SIGKILL)  # exits; the plugin learns it only later
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)  # raises if it failed
    exclusive = parse_cpus(run.cpuset(g.containers[0]).cpus)
    live = [shared[0], shared[2]]
    wait_for("live shared containers re-pinned", lambda: not _holding(run, live, exclusive), 10)
    run.remove_pod(g)
    wait_for(
        "the exclusive CPU given back",
        lambda: all(parse_cpus(run.cpuset(p.containers[0]).cpus) == cpus for p in live),
        10,
    )
