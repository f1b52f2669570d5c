"""The runner's picture of the node stays the policy's, whatever the workload (property test)."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.simulate import machine_spec
from nri_topology.simulate.runner import Runner
from nri_topology.simulate.workload import parse_workload

MACHINE = machine_spec.to_machine(
    machine_spec.parse_spec(
        {
            "name": "two-node",
            "isolated": "3",
            "packages": [
                {"id": 0, "cores": ["0,8", "1,9", "2,10", "3,11"]},
                {"id": 1, "cores": ["4,12", "5,13", "6,14", "7,15"]},
            ],
            "nodes": [
                {"id": 0, "cpus": "0-3,8-11", "memory": "8Gi"},
                {"id": 1, "cpus": "4-7,12-15", "memory": "8Gi"},
                {"id": 2, "memory": "32Gi", "tier": "pmem"},
            ],
            "distances": [[10, 21, 17], [21, 10, 28], [17, 28, 10]],
        }
    )
)

CONTAINER = st.one_of(
    st.just({}),  # BestEffort
    st.builds(lambda m: {"requests": {"cpu": f"{m}m"}}, st.integers(1, 3000)),
    st.builds(
        lambda c: {"limits": {"cpu": c, "memory": "256Mi"}}, st.sampled_from([1, 2, 3, 6, 20])
    ),
    st.builds(lambda m: {"limits": {"cpu": f"{m}m", "memory": "1Gi"}}, st.integers(100, 2500)),
)
ANNOTATIONS = st.sampled_from(
    [
        {},
        {"prefer-isolated-cpus.resource-policy.nri.io/pod": "true"},
        {"memory-type.resource-policy.nri.io/pod": "pmem"},
        {"cold-start.resource-policy.nri.io/pod": "duration: 10s"},
        {"prefer-shared-cpus.resource-policy.nri.io/pod": "false"},
    ]
)


def _resize(spec: dict[str, Any], cpu: int) -> dict[str, Any] | None:
    """New CPU amounts for a container that keep its QoS class, or None (BestEffort)."""
    if "limits" in spec:
        return {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    if "requests" in spec:
        return {"requests": {"cpu": cpu}}
    return None


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    alive: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # (ns, pod) -> name -> spec
    for n in range(draw(st.integers(1, 14))):
        choice = draw(st.sampled_from(["create", "create", "remove", "resize", "wait"]))
        if choice == "wait":
            steps.append({"wait": draw(st.sampled_from(["5s", "10s"]))})
        elif choice == "create" or not alive:
            ns = draw(st.sampled_from(["default", "kube-system"]))
            containers = {f"c{i}": draw(CONTAINER) for i in range(draw(st.integers(1, 2)))}
            create = {"pod": f"p{n}", "namespace": ns, "annotations": draw(ANNOTATIONS)}
            create["containers"] = [{"name": c, **spec} for c, spec in containers.items()]
            steps.append({"create": create})
            alive[(ns, f"p{n}")] = containers
        elif choice == "remove":
            ns, pod = draw(st.sampled_from(sorted(alive)))
            steps.append({"remove": {"pod": pod, "namespace": ns}})
            del alive[(ns, pod)]
        else:
            ns, pod = draw(st.sampled_from(sorted(alive)))
            name = draw(st.sampled_from(sorted(alive[(ns, pod)])))
            new = _resize(alive[(ns, pod)][name], draw(st.sampled_from([1, 2, 4])))
            if new is not None:
                steps.append({"resize": {"pod": pod, "namespace": ns, "container": name, **new}})
    return {"steps": steps}


def _picture(a: Any) -> tuple[object, ...]:
    return (a.pool, a.kind, a.cpus, a.mems, a.exclusive)


# A kept example: the last create moves a shared container to the reserved CPUs to make room.
MOVED_TO_MAKE_ROOM = {
    "steps": [
        {
            "create": {
                "pod": "p0",
                "namespace": "default",
                "annotations": {},
                "containers": [{"name": "c0"}],
            }
        },
        {"remove": {"pod": "p0", "namespace": "default"}},
        {
            "create": {
                "pod": "p2",
                "namespace": "default",
                "annotations": {},
                "containers": [{"name": "c0", "requests": {"cpu": "1m"}}],
            }
        },
        {
            "resize": {
                "pod": "p2",
                "namespace": "default",
                "container": "c0",
                "requests": {"cpu": 1},
            }
        },
        {
            "resize": {
                "pod": "p2",
                "namespace": "default",
                "container": "c0",
                "requests": {"cpu": 1},
            }
        },
        {
            "create": {
                "pod": "p5",
                "namespace": "default",
                "annotations": {},
                "containers": [{"name": "c0", "requests": {"cpu": "1m"}}],
            }
        },
        {
            "create": {
                "pod": "p6",
                "namespace": "kube-system",
                "annotations": {},
                "containers": [{"name": "c0", "requests": {"cpu": "130m"}}],
            }
        },
        {
            "resize": {
                "pod": "p5",
                "namespace": "default",
                "container": "c0",
                "requests": {"cpu": 2},
            }
        },
        {
            "create": {
                "pod": "p8",
                "namespace": "kube-system",
                "annotations": {},
                "containers": [
                    {"name": "c0", "requests": {"cpu": "621m"}},
                    {"name": "c1", "requests": {"cpu": "630m"}},
                ],
            }
        },
        {
            "create": {
                "pod": "p9",
                "namespace": "kube-system",
                "annotations": {},
                "containers": [{"name": "c0", "limits": {"cpu": 6, "memory": "256Mi"}}],
            }
        },
        {
            "resize": {
                "pod": "p6",
                "namespace": "kube-system",
                "container": "c0",
                "requests": {"cpu": 4},
            }
        },
    ]
}


@settings(max_examples=30, deadline=None)
@given(workloads())
@example(MOVED_TO_MAKE_ROOM)
def test_runner_picture_is_the_policy_state_after_every_step(doc: dict[str, Any]) -> None:
    workload = parse_workload(doc)
    policy = Policy(MACHINE, Options())
    runner = Runner(policy, MACHINE)
    for number, step in enumerate(workload.steps, start=1):
        result = runner.step(number, step)
        assert not any(e.internal for e in result.errors), result.errors
        held = policy.assignments()
        assert set(held) == set(runner.assignments), f"step {number}"
        for cid, a in runner.assignments.items():
            assert _picture(a) == _picture(held[cid]), f"step {number}: {cid}"
        owners: dict[int, str] = {}
        for cid, a in runner.assignments.items():
            for cpu in a.exclusive:
                assert cpu not in owners, f"step {number}: CPU {cpu} to {owners[cpu]} and {cid}"
                owners[cpu] = cid


def test_a_device_steers_a_simulated_container_to_its_socket() -> None:
    _, machine = machine_spec.load_bundled("4-socket")
    container = {"name": "main", "limits": {"cpu": 4, "memory": "4Gi"}}
    gpu = {**container, "devices": [{"name": "/dev/nvidia1", "numa": [3]}]}
    steps = [
        {"create": {"pod": "gpu", "containers": [gpu]}},
        {"create": {"pod": "plain", "containers": [container]}},
    ]
    results = Runner(Policy(machine, Options()), machine).run(parse_workload({"steps": steps}))
    (with_gpu,), (plain,) = (r.placed for r in results)
    assert with_gpu.assignment.pool == "socket #3"
    assert "devices on NUMA 3 (/dev/nvidia1): covered" in with_gpu.reason
    assert plain.assignment.pool != "socket #3"
