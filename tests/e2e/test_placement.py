"""Placement on each runtime: what the plugin decides is what the containers' cgroups hold.

Pods are made as a kubelet makes them (QoS cgroup parents, kubelet's Linux resources, host
network); every check reads the container's own cgroup.
"""

from __future__ import annotations

import time

import grpc
import pytest

from tests.e2e.harness import Run, cgroup_dir, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30
ISOLATED = "isolated-cpus"


def cpus_of(run: Run, pod) -> set[int]:
    return parse_cpus(run.cpus(pod.containers[0]))


@pytest.fixture
def two_cpus() -> set[int]:
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("e2e placement needs at least 2 CPUs")
    return cpus


def test_exclusive_shrinks_shared_and_they_grow_back(run: Run, two_cpus: set[int]) -> None:
    run.start_plugin()
    be = run.run_pod("be", "besteffort")
    bu = run.run_pod("bu", "burstable", cpu_milli=200)
    assert cpus_of(run, be) == two_cpus
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = cpus_of(run, g)
    assert len(exclusive) == 1
    placed = run.placed(g.containers[0])
    assert (placed["kind"], parse_cpus(placed["exclusive"])) == ("exclusive", exclusive)
    for other in (be, bu):  # their re-pins follow the reply
        wait_for(
            "shared cpuset shrunk", lambda o=other: cpus_of(run, o) == two_cpus - exclusive, 10
        )
    assert run.cpuset(g.containers[0]).mems == "0"
    run.remove_pod(g)
    for other in (be, bu):
        wait_for("shared cpuset grown back", lambda o=other: cpus_of(run, o) == two_cpus, 10)
    # One pod at a time, every update reaches a running container: nothing to repair.
    assert run.metric("nri_topology_cgroup_drift_total", check="post_start") == 0


def test_isolated_cpu_for_small_guaranteed(run: Run, two_cpus: set[int]) -> None:
    """The kernel command line (a proc root of the test's own) isolates the last CPU.

    On 2 CPUs the only other CPU must be all reserved (a reserved quantity has to leave a
    non-isolated CPU over), so the shared pool is empty and a kube-system pod stands in for it.
    """
    last = max(two_cpus)
    small = len(two_cpus) == 2
    config = "policy:\n  reserved_resources:\n    cpu: cpuset:0\n" if small else ""
    run.write_plugin_config(config, proc_isolcpus=str(last))
    run.start_plugin()
    other = run.run_pod("sys", "burstable", 100, namespace="kube-system" if small else "e2e")
    assert last not in cpus_of(run, other)  # isolated CPUs are for exclusive use only
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    assert cpus_of(run, g) == {last}
    assert run.placed(g.containers[0])["isolated"] is True
    assert last not in cpus_of(run, other)


def test_shared_guaranteed_by_annotation(run: Run, two_cpus: set[int]) -> None:
    run.start_plugin()
    g = run.run_pod(
        "g",
        "guaranteed",
        cpu_milli=1000,
        memory=GIB // 4,
        annotations={"prefer-shared-cpus.resource-policy.nri.io": "true"},
    )
    assert cpus_of(run, g) == two_cpus
    assert run.placed(g.containers[0])["kind"] == "shared"


def test_annotation_error_reaches_the_create_call(run: Run) -> None:
    run.start_plugin()
    key = "prefer-isolated-cpus.resource-policy.nri.io"
    pod = run.run_pod(
        "bad", "guaranteed", 1000, annotations={f"{key}/container.c0": "maybe"}, containers=0
    )
    with pytest.raises(grpc.RpcError) as err:
        run.create_container(pod, "c0", 1000)
    message = err.value.details()
    assert "nri-topology: e2e/bad/c0: annotation" in message
    assert key in message and "'maybe'" in message
    # The refusal changed nothing: another container of the pod is placed.
    good = run.add_container(pod, "c1", 1000)
    assert len(parse_cpus(run.cpus(good))) == 1


def test_drift_is_repaired_by_the_periodic_check(run: Run, two_cpus: set[int]) -> None:
    """Someone else rewrites a container's cpuset: the plugin notices and puts it back."""
    run.write_plugin_config("verify:\n  interval_seconds: 0.5\n")
    run.start_plugin()
    be = run.run_pod("be", "besteffort")
    assert cpus_of(run, be) == two_cpus
    # The runtime relays PostStartContainer after the CRI call returned: let its check pass first.
    wait_for(
        "post-start check done",
        lambda: run.metric("nri_topology_nri_requests_total", method="PostStartContainer") == 1,
        10,
    )
    time.sleep(0.2)
    cgroup = cgroup_dir(run.pid(be.containers[0].id))
    (cgroup / "cpuset.cpus").write_text(str(min(two_cpus)))
    assert cpus_of(run, be) == {min(two_cpus)}
    wait_for("cpuset repaired", lambda: cpus_of(run, be) == two_cpus, 10)
    assert run.metric("nri_topology_cgroup_drift_total", check="periodic") == 1
    assert any(
        e.get("event") == "cgroup differs from the placement, updating" for e in run.plugin_events()
    )
