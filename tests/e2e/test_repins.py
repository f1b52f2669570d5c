"""Re-pins after the reply on a real containerd: the new container does not wait for them, the
shared containers' real cgroups lose its CPU within the window, and a shared container that has
just exited fails nobody's creation."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.e2e.harness import Run, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30
SHARED = 7
BATCH = 3


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


def test_re_pins_follow_the_reply_in_batches_and_land_before_the_window_closes(
    run: Run, cpus: set[int]
) -> None:
    run.write_plugin_config(f"updates:\n  batch: {BATCH}\n  grow_delay_seconds: 0.2\n")
    run.start_plugin()
    shared = _shared(run)
    calls = run.metric("nri_topology_update_batch_seconds_count")
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpuset(g.containers[0]).cpus)
    assert len(exclusive) == 1
    wait_for(
        "the exclusivity window closed",
        lambda: run.metric("nri_topology_exclusive_window_seconds_count") == 1,
        10,
    )
    # Closed: every shared container's real cgroup has lost the CPU.
    assert _holding(run, shared, exclusive) == []
    assert run.metric("nri_topology_update_batch_seconds_count") - calls == -(-SHARED // BATCH)
    assert run.metric("nri_topology_repins_total", outcome="sent") == SHARED
    assert run.metric("nri_topology_exclusive_window_seconds_sum") <= 2.0
    _, text = run.plugin_http("/explain?container=e2e/g/c0&format=json")
    (explained,) = json.loads(text)["containers"]
    assert 0 < explained["decision"]["exclusive_window_seconds"] <= 2.0
    run.remove_pod(g)
    wait_for(
        "shared cpusets grown back",
        lambda: all(parse_cpus(run.cpuset(p.containers[0]).cpus) == cpus for p in shared),
        10,
    )


def test_in_reply_mode_applies_every_re_pin_before_the_container_exists(
    run: Run, cpus: set[int]
) -> None:
    run.write_plugin_config("updates:\n  in_reply: true\n")
    run.start_plugin()
    shared = _shared(run, 3)
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpuset(g.containers[0]).cpus)
    assert _holding(run, shared, exclusive) == []  # no window: done before the reply returned
    assert run.metric("nri_topology_update_batch_seconds_count") == 0
    assert run.metric("nri_topology_exclusive_window_seconds_sum") == 0


@pytest.mark.parametrize("in_reply", [False, True], ids=["after-reply", "in-reply"])
def test_a_killed_shared_container_fails_no_creation(
    run: Run, cpus: set[int], in_reply: bool
) -> None:
    run.write_plugin_config(f"updates:\n  in_reply: {str(in_reply).lower()}\n")
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
