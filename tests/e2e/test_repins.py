"""Re-pins on the real runtimes. By default they go through the runtime's CRI after the reply
(UpdateContainerResources with only the cpusets, as the kubelet's CPU manager sends them): the
runtime relays each to the plugin as an NRI UpdateContainer, which the plugin recognises as its
own and answers with the container's cpusets, and applies it outside its NRI lock. That is safe
where the runtime's NRI (older than v0.12.1: containerd 1.7 to 2.3, CRI-O 1.36) could deadlock on
UpdateContainers. Without a transport that is safe, re-pins travel in the reply, each ignoring
failure: no exclusivity window, and a shared container that has just exited fails nobody's
creation. (The schedule's rules are tested through the daemon, tests/test_daemon_schedule.py and
tests/test_daemon_cri.py.)"""

from __future__ import annotations

import json
import os
import signal

import pytest

from nri_topology.cri import api_pb2 as cri
from nri_topology.nri.versions import parse_version
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


def _safe_nri(run: Run) -> bool:
    """Whether the runtime embeds NRI v0.12.1 or later (containerd from 2.4), where `auto`
    takes NRI UpdateContainers."""
    version = parse_version(run.tools.version) or (0, 0, 0)
    return run.tools.kind == "containerd" and version >= (2, 4, 0)


def test_auto_takes_nri_where_it_is_safe_and_the_cri_elsewhere(run: Run) -> None:
    run.start_plugin()
    want = "nri" if _safe_nri(run) else "cri"
    assert run.metric("nri_topology_update_transport", transport=want) == 1
    _, text = run.plugin_http("/status?format=json")
    assert json.loads(text)["updates"]["transport"] == want
    # Chosen by the NRI version the runtime reports in Configure, which the log gives: none
    # before NRI v0.12.0, v0.12.0 on containerd 2.3 (still the CRI), v0.12.1 on 2.4.
    events = run.plugin_events()
    (configured,) = [e for e in events if e["event"] == "configured by the NRI runtime"]
    reported = parse_version(configured["nri_version"] or "")
    assert (reported is not None and reported >= (0, 12, 1)) == (want == "nri"), configured
    (chosen,) = [e for e in events if e["event"] == "updates apart from a reply"]
    assert chosen["transport"] == want, chosen


def test_writes_come_before_the_start_and_the_cri_re_pins_follow(run: Run, cpus: set[int]) -> None:
    run.write_plugin_config("updates:\n  transport: cri\n")
    run.start_plugin()
    assert run.metric("nri_topology_update_transport", transport="cri") == 1
    shared = _shared(run)
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpuset(g.containers[0]).cpus)
    assert len(exclusive) == 1
    # StartContainer has returned: the reply to it waited for the writes into the shared
    # containers' cgroups, so none holds the CPU and the workload's window is 0.
    assert _holding(run, shared, exclusive) == []
    assert run.metric("nri_topology_cgroup_writes_total", outcome="written") == SHARED
    assert run.metric("nri_topology_exclusive_window_seconds_count") == 1
    assert run.metric("nri_topology_exclusive_window_seconds_sum") == 0
    _, text = run.plugin_http("/explain?container=e2e/g/c0&format=json")
    (explained,) = json.loads(text)["containers"]
    assert explained["decision"]["exclusive_window_seconds"] == 0
    # The runtime's record follows after the reply, each re-pin through the CRI, and each
    # relayed back to the plugin as an UpdateContainer that it answered without a resize.
    wait_for(
        "the runtime's re-pins sent",
        lambda: run.metric("nri_topology_repins_total", outcome="sent") == SHARED,
        10,
    )
    assert run.metric("nri_topology_own_repins_answered_total") == SHARED
    assert run.metric("nri_topology_decision_duration_seconds_count", operation="resize") == 0
    assert run.metric("nri_topology_errors_total", reason="update_failed") == 0
    assert run.metric("nri_topology_update_batch_seconds_count") > 0
    # decided == applied: every container's cgroup holds its placement
    _, text = run.plugin_http("/status?format=json")
    status = json.loads(text)
    assert status["updates"]["transport"] == "cri"
    placed = {c["container_id"]: parse_cpus(c["cpus"]) for c in status["containers"]}
    for pod in (*shared, g):
        ctr = pod.containers[0]
        assert parse_cpus(run.cpuset(ctr).cpus) == placed[ctr.id]
    run.remove_pod(g)
    wait_for(
        "shared cpusets grown back",
        lambda: all(parse_cpus(run.cpuset(p.containers[0]).cpus) == cpus for p in shared),
        10,
    )
    assert run.metric("nri_topology_cgroup_drift_total", check="post_start") == 0


def test_with_no_safe_transport_re_pins_travel_in_the_reply_and_leave_no_window(
    run: Run, cpus: set[int]
) -> None:
    run.write_plugin_config("updates:\n  transport: nri\n")
    run.start_plugin()
    if run.metric("nri_topology_update_transport", transport="nri") == 1:
        pytest.skip("this runtime's NRI serves UpdateContainers apart from its events")
    assert run.metric("nri_topology_update_transport", transport="reply") == 1
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
    warned = [e for e in run.plugin_events() if "no safe transport" in e["event"]]
    assert len(warned) == 1
    run.remove_pod(g)  # the CPU given back has no reply to ride: it waits for the next one
    wait_for(
        "the re-pins held for a reply",
        lambda: run.metric("nri_topology_repins_total", outcome="held_for_reply") >= SHARED,
        10,
    )
    assert all(parse_cpus(run.cpuset(p.containers[0]).cpus) != cpus for p in shared)
    shared.append(run.run_pod("next", "besteffort"))
    assert all(parse_cpus(run.cpuset(p.containers[0]).cpus) == cpus for p in shared)
    assert run.metric("nri_topology_repins_total", outcome="rode_reply") == SHARED


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


def _spec_cpus(run: Run, container_id: str) -> set[int]:
    """The cpuset in the runtime's own record of the container (its OCI spec)."""
    assert run.cri is not None
    status = run.cri.runtime(
        "ContainerStatus", cri.ContainerStatusRequest(container_id=container_id, verbose=True)
    )
    spec = json.loads(status.info["info"])["runtimeSpec"]
    return parse_cpus(spec["linux"]["resources"]["cpu"]["cpus"])


def test_shrinks_reach_the_cgroups_before_the_runtime_re_pins_them(
    run: Run, cpus: set[int]
) -> None:
    """With cgroups first (the default) the shared containers' cgroups give up the granted CPU
    right after the reply, while the runtime's re-pins still wait for the container's start
    (held back here by not starting it); they follow once it starts, so the runtime's own record
    of each shared container agrees with its cgroup."""
    run.write_plugin_config("updates:\n  transport: cri\n  start_wait_seconds: 10\n")
    run.start_plugin()
    shared = _shared(run)
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4, start=False)
    ctr = g.containers[0]
    _, text = run.plugin_http("/status?format=json")
    placed = {c["container_id"]: c["cpus"] for c in json.loads(text)["containers"]}
    exclusive = parse_cpus(placed[ctr.id])
    assert len(exclusive) == 1
    wait_for("shared cgroups written", lambda: not _holding(run, shared, exclusive), 5)
    assert run.metric("nri_topology_cgroup_writes_total", outcome="written") == SHARED
    assert run.metric("nri_topology_exclusive_window_seconds_count") == 1
    assert run.metric("nri_topology_repins_total", outcome="sent") == 0  # waiting for the start
    assert all(_spec_cpus(run, p.containers[0].id) == cpus for p in shared)
    run.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=ctr.id))
    wait_for(
        "the runtime's re-pins sent",
        lambda: run.metric("nri_topology_repins_total", outcome="sent") == SHARED,
        10,
    )
    run.settled()
    for p in shared:
        cid = p.containers[0].id
        assert _spec_cpus(run, cid) == parse_cpus(run.cpuset(cid).cpus) == cpus - exclusive
    assert run.metric("nri_topology_repins_total", outcome="retried") == 0
    assert run.metric("nri_topology_cgroup_drift_total", check="post_start") == 0
