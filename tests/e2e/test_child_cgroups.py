"""A shared container with child cgroups of its own (Docker in Docker, a kind node) on cgroup v1:
a child holding all the container's CPUs makes the kernel refuse (EBUSY) any cpuset that takes
one of them from the container's cgroup, the plugin's write and `runc update` alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import Run, Spec, cgroup_dir, cgroup_v2, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

GIB = 1 << 30

# Mounts the cpuset hierarchy, makes a child of its own cgroup with all its CPUs and moves in.
NESTED = """set -e
mkdir -p /cg
mount -t cgroup -o cpuset cpuset /cg
own=/cg$(sed -n 's/^[0-9]*:cpuset://p' /proc/self/cgroup)
mkdir "$own/child"
cat "$own/cpuset.cpus" > "$own/child/cpuset.cpus"
cat "$own/cpuset.mems" > "$own/child/cpuset.mems"
echo $$ > "$own/child/cgroup.procs"
exec sleep 1000000
"""


def test_a_container_whose_child_cgroup_holds_its_cpus_keeps_them_and_says_so(run: Run) -> None:
    if cgroup_v2():
        pytest.skip("a child cgroup holds its CPUs against a shrink on cgroup v1 (v2 lets it go)")
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs")
    run.write_plugin_config("verify:\n  interval_seconds: 1\n")
    run.start_plugin()
    shared = run.run_pod("be", "besteffort")
    nested = run.run_pod(
        "nested",
        "besteffort",
        spec=Spec(command=("/bin/sh", "-c", NESTED), capabilities=("SYS_ADMIN",)),
    )
    ctr = nested.containers[0]

    def in_child() -> Path | None:
        d = cgroup_dir(run.pid(ctr.id))
        return d if d.name == "child" else None

    child = wait_for("the container in its child cgroup", in_child, 10)
    assert isinstance(child, Path)
    own = child.parent
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpuset(g.containers[0]).cpus)
    assert len(exclusive) == 1
    # The plain shared container gave the CPU up before the start; the nested one could not.
    assert not parse_cpus(run.cpuset(shared.containers[0]).cpus) & exclusive
    assert parse_cpus((own / "cpuset.cpus").read_text()) == cpus
    assert run.metric("nri_topology_cgroup_writes_total", outcome="written") == 1
    assert run.metric("nri_topology_cgroup_writes_total", outcome="busy") >= 1
    (said,) = [e for e in run.plugin_events() if e["event"].startswith("cgroup not written")]
    assert said["container_id"] == ctr.id and said["outcome"] == "busy", said
    assert said["file"] == "cpuset.cpus" and said["errno"] == "EBUSY", said
    # The window stays open while the runtime's re-pin is tried: runc writes the same file and
    # meets the same EBUSY; once its retries are given up the window closes, said as unfreed.
    wait_for(
        "the runtime's re-pin given up",
        lambda: run.metric("nri_topology_repins_total", outcome="given_up") == 1,
        20,
    )
    assert run.metric("nri_topology_exclusive_window_seconds_count") == 1
    window = run.metric("nri_topology_exclusive_window_seconds_sum")
    assert window > 0
    assert run.metric("nri_topology_errors_total", reason="window_unfreed") == 1
    warned = [e for e in run.plugin_events() if e["event"].startswith("exclusive CPUs may")]
    assert [w["container_id"] for w in warned] == [g.containers[0].id]
    _, text = run.plugin_http("/explain?container=e2e/g/c0&format=json")
    (explained,) = json.loads(text)["containers"]
    assert explained["decision"]["exclusive_window_seconds"] > 0
    assert parse_cpus((own / "cpuset.cpus").read_text()) == cpus  # runc could not either
    # Each of the runtime's tries was preceded by one of the plugin's: the first and 2 retries.
    assert run.metric("nri_topology_cgroup_writes_total", outcome="busy") == 3
    failed = [e["error"] for e in run.plugin_events() if e["event"] == "CRI update failed"]
    print(f"{run.tools.runtime}: window {window:.2f}s, runtime's re-pin failed {len(failed)}x")
    print(failed[0])
    assert failed and all("device or resource busy" in f for f in failed)
    # The periodic check finds it and tries again, in vain while the child holds the CPU.
    wait_for(
        "the periodic check tried again",
        lambda: run.metric("nri_topology_cgroup_drift_total", check="periodic") >= 1,
        5,
    )
    drifted = [e for e in run.plugin_events() if e["event"].startswith("cgroup differs")]
    assert {e["container_id"] for e in drifted} == {ctr.id}
    # Nothing else breaks: the written-once log holds, the others follow their placements, and
    # the CPU given back returns to the shared container.
    assert len([e for e in run.plugin_events() if e["event"].startswith("cgroup not")]) == 1
    run.remove_pod(g)
    wait_for(
        "the CPU given back",
        lambda: parse_cpus(run.cpuset(shared.containers[0]).cpus) == cpus,
        10,
    )
    assert parse_cpus((own / "cpuset.cpus").read_text()) == cpus
