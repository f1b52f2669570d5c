"""A container that exits and is created again in the same pod, as the kubelet restarts it, on a
real containerd: its next attempt runs on the CPUs the exited one had, and no other container's
cpuset changed at any step."""

from __future__ import annotations

import os
import signal

import pytest

from nri_topology.cri import api_pb2 as cri
from tests.e2e.harness import Run, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _exited(run: Run, container_id: str) -> bool:
    assert run.cri is not None
    resp = run.cri.runtime("ContainerStatus", cri.ContainerStatusRequest(container_id=container_id))
    return resp.status.state == cri.CONTAINER_EXITED


def _events(run: Run, name: str) -> list[dict]:
    return [e for e in run.plugin_events() if e.get("event") == name]


def test_next_attempt_keeps_the_cpus_and_moves_nobody(run: Run) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: one exclusive, one shared")
    run.start_plugin()
    shared = [run.run_pod(f"bu{i}", "burstable", cpu_milli=100) for i in range(2)]
    pod = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=64 << 20)
    first = pod.containers[0]
    held = run.cpus(first)
    run.settled()  # the shared containers' re-pins follow the reply
    others = {c.id: run.cpus(c) for p in shared for c in p.containers}
    assert all(held not in cpus.split(",") for cpus in others.values())

    os.kill(run.pid(first.id), signal.SIGKILL)  # the container crashes
    wait_for("the container exited", lambda: _exited(run, first.id))
    wait_for("its CPUs held", lambda: _events(run, "stopped, CPUs held for its next attempt"))
    assert {c.id: run.cpus(c) for p in shared for c in p.containers} == others

    # The kubelet creates attempt 1 beside the exited attempt 0, then removes attempt 0 later.
    second = run.add_container(pod, first.name, 1000, 64 << 20, attempt=1)
    assert run.cpus(second) == held
    assert {c.id: run.cpus(c) for p in shared for c in p.containers} == others
    created = [e for e in _events(run, "container created") if e["container_id"] == second.id]
    assert created and "updated" not in created[-1]
    assert [e for e in _events(run, "released") if e["container_id"] == first.id] == []
