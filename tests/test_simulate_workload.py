"""Workload files: what the runtime would report for them, and errors that name the step and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nri_topology.config.validate import convert
from nri_topology.policy.types import HintSource, QoS, Resources, TopologyHint
from nri_topology.simulate.workload import (
    ContainerSpec,
    WorkloadError,
    bundled_workload_names,
    create_containers,
    load_bundled_workload,
    load_workload,
    parse_workload,
    qos_class,
    resized,
)


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([{}], QoS.BEST_EFFORT),
        ([{"limits": {"cpu": 1, "memory": "1Gi"}}], QoS.GUARANTEED),
        (
            [{"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}}],
            QoS.GUARANTEED,
        ),
        ([{"limits": {"cpu": 1}}], QoS.BURSTABLE),
        ([{"requests": {"cpu": "500m"}, "limits": {"cpu": 1, "memory": "1Gi"}}], QoS.BURSTABLE),
        ([{"limits": {"cpu": 1, "memory": "1Gi"}}, {}], QoS.BURSTABLE),
        ([{"requests": {"memory": "1Gi"}}], QoS.BURSTABLE),
    ],
)
def test_qos_class_as_kubernetes(containers: list[dict[str, Any]], qos: QoS) -> None:
    specs = [convert(ContainerSpec, {"name": f"c{i}", **c}) for i, c in enumerate(containers)]
    assert qos_class(specs) is qos


def _one(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "t", "steps": steps}


GUARANTEED_POD = {
    "create": {
        "pod": "db",
        "containers": [
            {"name": "pg", "limits": {"cpu": 2, "memory": "1Gi"}, "annotations": {"a": "b"}}
        ],
        "annotations": {"memory-type.resource-policy.nri.io/pod": "pmem"},
        "labels": {"app": "db"},
    }
}


def test_create_becomes_what_the_runtime_reports() -> None:
    wl = parse_workload(_one([GUARANTEED_POD]))
    spec = wl.steps[0].create
    assert spec is not None
    (rc,) = create_containers(spec, step=3, memory_capacity=64 << 30)
    assert rc.qos is QoS.GUARANTEED
    assert rc.pod.id == "default/db" and rc.pod.namespace == "default"
    assert rc.pod.cgroup_parent == f"/kubepods/pod{rc.pod.uid}"
    assert rc.pod.annotations == {"memory-type.resource-policy.nri.io/pod": "pmem"}
    assert rc.pod.labels == {"app": "db"}
    assert rc.info.id == "default/db/pg" and rc.info.pod_id == "default/db"
    assert rc.info.annotations == {"a": "b"}
    assert rc.info.resources == Resources(
        cpu_shares=2048, cpu_quota=200000, cpu_period=100000, memory_limit=1 << 30
    )
    assert rc.info.oom_score_adj == -997


def test_best_effort_has_no_limits() -> None:
    wl = parse_workload(_one([{"create": {"pod": "b", "containers": [{"name": "c"}]}}]))
    assert wl.steps[0].create is not None
    (rc,) = create_containers(wl.steps[0].create, step=1, memory_capacity=1 << 30)
    assert rc.pod.cgroup_parent.startswith("/kubepods/besteffort/")
    assert rc.info.resources == Resources(cpu_shares=2, cpu_period=100000)  # the kubelet's period
    assert rc.info.oom_score_adj == 1000


def test_burstable_without_a_memory_request_ranks_below_best_effort() -> None:
    step = {"create": {"pod": "b", "containers": [{"name": "c", "requests": {"cpu": "250m"}}]}}
    wl = parse_workload(_one([step]))
    assert wl.steps[0].create is not None
    (rc,) = create_containers(wl.steps[0].create, step=1, memory_capacity=1 << 30)
    assert rc.qos is QoS.BURSTABLE and rc.info.oom_score_adj == 999


def test_resize_replaces_only_the_given_values() -> None:
    pod = {
        "create": {
            "pod": "w",
            "containers": [
                {"name": "c", "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 2}}
            ],
        }
    }
    resize = {"resize": {"pod": "w", "container": "c", "limits": {"cpu": 3}}}
    wl = parse_workload(_one([pod, resize]))
    assert wl.steps[0].create is not None and wl.steps[1].resize is not None
    (rc,) = create_containers(wl.steps[0].create, step=1, memory_capacity=8 << 30)
    after = resized(rc, wl.steps[1].resize)
    assert after.info.resources == Resources(cpu_shares=512, cpu_quota=300000, cpu_period=100000)
    assert after.info.id == rc.info.id and after.pod == rc.pod


def _create(pod: str = "p", **extra: Any) -> dict[str, Any]:
    return {"create": {"pod": pod, "containers": [{"name": "c"}], **extra}}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "steps: expected at least one item"),
        (
            [{"note": "nothing"}],
            "step 1: give exactly one of create, remove, resize, wait (got none)",
        ),
        ([{"wait": "soon"}], "step 1: wait: expected a positive duration such as '60s'"),
        ([{"wait": "0s"}], "step 1: wait: expected a positive duration"),
        ([{"wait": "-1m"}], "step 1: wait: expected a positive duration"),
        ([{"wait": 60}], "step 1: wait: expected a positive duration"),
        ([{**_create(), "remove": {"pod": "p"}}], "step 1: give exactly one of"),
        (
            [{"create": {"pod": "p", "containers": [{"name": "c", "limits": {"cpu": "lots"}}]}}],
            "step 1: create.containers[0].limits.cpu: 'lots' is not a Kubernetes quantity",
        ),
        (
            [{"create": {"pod": "p", "containers": [{"name": "c", "limit": {}}]}}],
            "step 1: create.containers[0].limit: unknown key; allowed: name, requests, limits,",
        ),
        (
            [{"create": {"pod": "p", "containers": []}}],
            "step 1: create.containers: expected at least one item",
        ),
        ([{"create": {"pod": "Bad_Name", "containers": [{"name": "c"}]}}], "step 1: create.pod"),
        (
            [_create(qos="Guaranteed")],
            "qos: says Guaranteed but the requests and limits make the pod BestEffort",
        ),
        ([_create(qos="Platinum")], "step 1: create.qos"),
        (
            [{"create": {"pod": "p", "containers": [{"name": "c"}, {"name": "c"}]}}],
            "containers: duplicate names ['c']",
        ),
        (
            [
                {
                    "create": {
                        "pod": "p",
                        "containers": [{"name": "c", "requests": {"cpu": 2}, "limits": {"cpu": 1}}],
                    }
                }
            ],
            "requests.cpu is larger than limits.cpu",
        ),
        (
            [_create(), _create()],
            "step 2: create.pod: pod default/p already exists (created in step 1)",
        ),
        (
            [_create(), {"remove": {"pod": "q"}}],
            "step 2: remove.pod: no pod default/q at this step",
        ),
        ([_create(), {"remove": {"pod": "p", "namespace": "other"}}], "no pod other/p"),
        (
            [_create(), {"remove": {"pod": "p", "container": "x"}}],
            "step 2: remove.container: pod default/p has no running container 'x' (running: c)",
        ),
        ([_create(), {"remove": {"pod": "p"}}, {"remove": {"pod": "p"}}], "step 3: remove.pod"),
        (
            [
                _create(),
                {"remove": {"pod": "p", "container": "c"}},
                {"resize": {"pod": "p", "container": "c"}},
            ],
            "step 3: resize.pod: no pod default/p",
        ),
        (
            [
                {
                    "create": {
                        "pod": "p",
                        "containers": [{"name": "c", "limits": {"cpu": 1, "memory": 1}}],
                    }
                },
                {"resize": {"pod": "p", "container": "c", "limits": {"cpu": 2}}},
            ],
            "step 2: resize: would change the pod's QoS class from Guaranteed to Burstable",
        ),
        ([{**_create(), "expect_error": "maybe"}], "step 1: expect_error"),
    ],
)
def test_bad_workloads_name_the_step_and_key(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(WorkloadError) as err:
        parse_workload(_one(steps), origin="w.yaml")
    assert str(err.value).startswith("w.yaml: ")
    assert message in str(err.value)


def test_wait_steps_measure_time() -> None:
    wl = parse_workload(_one([{"wait": "1m30s"}, {"wait": "250ms"}]))
    assert [s.wait_ns for s in wl.steps] == [90 * 10**9, 250 * 10**6]
    assert [(s.action, s.target) for s in wl.steps] == [("wait", "1m30s"), ("wait", "250ms")]


def test_remove_one_container_then_the_pod_is_fine() -> None:
    pod = {"create": {"pod": "p", "containers": [{"name": "a"}, {"name": "b"}]}}
    steps = [pod, {"remove": {"pod": "p", "container": "a"}}, {"remove": {"pod": "p"}}, pod]
    assert len(parse_workload(_one(steps)).steps) == 4


@pytest.mark.parametrize("text", ["- just a list\n", "steps: [unclosed\n", ""])
def test_unreadable_workload_file_names_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=r"w\.yaml"):
        load_workload(path)


def test_missing_workload_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"nope\.yaml"):
        load_workload(tmp_path / "nope.yaml")


def test_bundled_default_workload_is_valid_and_tells_the_story() -> None:
    assert "default" in bundled_workload_names()
    wl = load_bundled_workload("default")
    assert wl.machine == "server"
    actions = [s.action for s in wl.steps]
    assert {"create", "remove", "resize", "wait"} <= set(actions)
    assert any(s.expect_error for s in wl.steps)
    annotations = {k for s in wl.steps if s.create for k in s.create.annotations}
    assert any(k.startswith("memory-type.") for k in annotations)
    assert any(k.startswith("prefer-isolated-cpus.") for k in annotations)
    namespaces = {s.create.namespace for s in wl.steps if s.create}
    assert "kube-system" in namespaces
    qos = {qos_class(s.create.containers) for s in wl.steps if s.create}
    assert qos == set(QoS)


def test_devices_become_topology_hints() -> None:
    device = {"name": "/dev/nvidia1", "numa": [3]}
    mount = {"name": "/dev/vfio/7", "numa": [0, 1], "source": "mounts"}
    pod = {"create": {"pod": "t", "containers": [{"name": "c", "devices": [device, mount]}]}}
    spec = parse_workload(_one([pod])).steps[0].create
    assert spec is not None
    (rc,) = create_containers(spec, step=1, memory_capacity=64 << 30)
    assert rc.info.hints == (
        TopologyHint(HintSource.DEVICES, "/dev/nvidia1", frozenset({3})),
        TopologyHint(HintSource.MOUNTS, "/dev/vfio/7", frozenset({0, 1})),
    )
    bad = {"create": {"pod": "t", "containers": [{"name": "c", "devices": [{"name": "x"}]}]}}
    with pytest.raises(WorkloadError, match="devices"):
        parse_workload(_one([bad]))
