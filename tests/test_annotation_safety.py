"""Annotations are untrusted input (issue 10): every hostile case of the issue through the real
policy, the limits, the trust policy and the bounds on `noderesource.dev/resources`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from nri_topology.policy.intake.annotations import DOMAIN, RESOURCES_KEY, key_problems
from nri_topology.policy.intake.request import build_request
from nri_topology.policy.options import AnnotationLimits, Options, Trust
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    AnnotationError,
    ContainerInfo,
    CpuKind,
    PodInfo,
    QoS,
)
from nri_topology.testing import hostile
from nri_topology.topology.model import Machine
from tests import machines

GiB = 1 << 30


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    """112 CPUs as in the issue: 2 sockets of 28 cores with 2 threads, 2 isolated CPUs."""
    spec = machines.SyntheticSpec(
        sockets=2, nodes=1, cores=28, threads=2, memory=64 * GiB, isolated="54-55"
    )
    return machines.synthetic(Path(tmp_path_factory.mktemp("m")), spec)


def pair(
    n: int,
    qos: QoS = QoS.BURSTABLE,
    *,
    milli: int = 100,
    limit: int | None = None,
    memory: int | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "tenant",
    oom: int | None = None,
) -> tuple[PodInfo, ContainerInfo]:
    """A pod of one container named app, with the cgroup settings the kubelet would write."""
    pod = PodInfo(
        id=f"p{n}",
        name=f"pod{n}",
        namespace=namespace,
        annotations=annotations or {},
        cgroup_parent=kubelet.cgroup_parent(qos, str(n)),
    )
    if qos is QoS.GUARANTEED:
        limit = milli
    elif qos is QoS.BEST_EFFORT:
        milli = 0
    res = kubelet.resources(Amounts(milli, limit or 0, 0, memory or 0))
    return pod, ContainerInfo(
        id=f"c{n}", pod_id=pod.id, name="app", resources=res, oom_score_adj=oom
    )


# --- each hostile case of the issue is refused with a named error, the state unchanged -----------


@pytest.mark.parametrize("case", sorted(hostile.CASES))
@pytest.mark.parametrize("size_limit", [16384, 262144])
def test_hostile_values_are_refused_by_name(machine, case, size_limit):
    annotations = hostile.CASES[case]
    options = Options(annotation_limits=AnnotationLimits(max_value_bytes=size_limit))
    policy = Policy(machine, options)
    policy.create(*pair(0))
    before = policy.assignments()
    with pytest.raises(AnnotationError) as refused:
        policy.create(*pair(1, annotations=annotations))
    message = str(refused.value)
    (key,) = annotations
    assert message.startswith("tenant/pod1/app: annotation ") and key in message
    assert refused.value.key == key
    assert len(message) < 600  # the value is shown shortened, never echoed whole
    if refused.value.limit:
        assert refused.value.limit in message or "limit" in message
    assert policy.assignments() == before


@pytest.mark.parametrize(
    ("case", "limit"),
    [
        ("nested brackets (affinity)", "depth"),
        ("nested brackets (cold-start)", "depth"),
        ("anchored rules", "aliases"),
        ("alias bomb", "aliases"),
        ("huge number (string)", "number"),
        ("huge number (JSON number)", "number"),
        ("deep JSON", "depth"),
        ("200 KB invalid value", ""),
    ],
)
def test_hostile_values_name_the_limit_they_break(machine, case, limit):
    roomy = Options(annotation_limits=AnnotationLimits(max_value_bytes=262144))
    with pytest.raises(AnnotationError) as refused:
        build_request(*pair(1, annotations=hostile.CASES[case]), roomy, machine=machine)
    assert refused.value.limit == limit
    with pytest.raises(AnnotationError) as default:
        build_request(*pair(1, annotations=hostile.CASES[case]), Options(), machine=machine)
    small = len(next(iter(hostile.CASES[case].values()))) <= 16384
    assert default.value.limit == (limit if small else "size")


@pytest.mark.parametrize("value", ["duration: " + "9" * 5000 + "h", "duration: " + "1h" * 4000])
def test_long_durations_are_invalid_not_a_crash(machine, value):
    with pytest.raises(AnnotationError, match="expected YAML `duration"):
        build_request(*pair(1, annotations={hostile.COLD_START: value}), Options(), machine=machine)


def test_a_long_invalid_value_is_shortened_with_its_size(machine):
    value = "y" * 9000
    with pytest.raises(AnnotationError) as refused:
        build_request(
            *pair(1, annotations={f"memory-type.{DOMAIN}": value}), Options(), machine=machine
        )
    assert f"'{'y' * 64}'…(9000 bytes)" in str(refused.value)
    assert "y" * 65 not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        (hostile.rules(9, 1), "rules"),
        (hostile.rules(1, 17), "values"),
        (hostile.worst_affinity(globs=9, rules=9), "rules"),
        (hostile.worst_affinity().replace('values: ["*', 'values: ["*x", "*', 1), "globs"),
        (
            "app: [{match: {key: name, operator: Matches, values: [" + "a" * 254 + "]}}]",
            "pattern",
        ),
        ('app: [{match: {key: name, operator: Matches, values: ["*a*b*c*d*e"]}}]', "pattern"),
        ("app: [" + ", ".join(["x"] * 1100) + "]", "nodes"),
        ("app: [{match: {operator: AlwaysTrue}, weight: " + "1" * 40 + "}]", "number"),
    ],
)
def test_affinity_limits(machine, text, limit):
    with pytest.raises(AnnotationError) as refused:
        build_request(*pair(1, annotations={hostile.AFFINITY: text}), Options(), machine=machine)
    assert refused.value.limit == limit
    assert "policy.annotation_limits" in str(refused.value) or limit in str(refused.value)


def test_rules_count_affinity_and_anti_affinity_together(machine):
    five = hostile.rules(5, 1)
    annotations = {hostile.AFFINITY: five, hostile.ANTI_AFFINITY: five}
    with pytest.raises(AnnotationError, match="10 affinity and anti-affinity rules"):
        build_request(*pair(1, annotations=annotations), Options(), machine=machine)
    roomy = Options(annotation_limits=AnnotationLimits(max_affinity_rules=10))
    assert (
        len(build_request(*pair(1, annotations=annotations), roomy, machine=machine).affinities)
        == 10
    )


def test_the_worst_annotation_the_limits_allow_is_accepted(machine):
    text = hostile.worst_affinity()
    r = build_request(*pair(1, annotations={hostile.AFFINITY: text}), Options(), machine=machine)
    assert len(r.affinities) == 8


# --- noderesource.dev/resources never claims more than the cgroup settings allow ----------------


def test_burstable_claim_is_cut_to_its_request_and_the_honest_tenant_fits(machine):
    policy = Policy(machine, Options())
    claim = {RESOURCES_KEY: hostile.claim("app", "75")}
    decision = policy.create(*pair(1, annotations=claim))  # a Burstable pod of 100m
    assert decision.kind is CpuKind.SHARED
    assert [w.kind for w in decision.warnings] == ["claim_cut"]
    assert "cpu request 75000m cut to 100m" in decision.warnings[0].message
    assert policy.assignments()["c1"].shared == 100
    honest = policy.create(*pair(2, QoS.GUARANTEED, milli=16000, memory=GiB))
    assert len(honest.exclusive) == 16


def test_guaranteed_claim_is_cut_to_its_quota(machine):
    claim = {RESOURCES_KEY: hostile.claim("app", "20", "64Gi")}
    r = build_request(
        *pair(1, QoS.GUARANTEED, milli=1000, memory=GiB, annotations=claim),
        Options(prefer_isolated_cpus=False),
        machine=machine,
    )
    assert (r.kind, r.exclusive, r.cpu_request, r.memory_request) == (
        CpuKind.EXCLUSIVE,
        1,
        1000,
        GiB,
    )
    assert "memory request" in r.warnings[0].message


def test_best_effort_claims_nothing(machine):
    claim = {RESOURCES_KEY: hostile.claim("app", "4", "1Gi")}
    r = build_request(*pair(1, QoS.BEST_EFFORT, annotations=claim), Options(), machine=machine)
    assert (r.cpu_request, r.memory_request, r.shared) == (0, 0, 0)
    assert r.warnings[0].kind == "claim_cut"


def test_burstable_memory_claim_is_bounded_by_oom_score_adj(machine):
    capacity = sum(n.memory for n in machine.nodes.values())
    adj = 1000 - 1000 * GiB // capacity  # what the kubelet writes for a 1 GiB request
    fair = json.dumps({"containers": {"app": {"requests": {"cpu": "100m", "memory": "1Gi"}}}})
    r = build_request(
        *pair(1, oom=adj, annotations={RESOURCES_KEY: fair}), Options(), machine=machine
    )
    assert (r.memory_request, r.warnings) == (GiB, ())
    greedy = fair.replace("1Gi", "100Gi")
    r = build_request(
        *pair(1, oom=adj, annotations={RESOURCES_KEY: greedy}), Options(), machine=machine
    )
    assert GiB <= r.memory_request < 2 * GiB and r.warnings[0].kind == "claim_cut"


def test_a_smaller_claim_refines_the_estimate(machine):
    claim = {
        RESOURCES_KEY: json.dumps(
            {
                "containers": {
                    "app": {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": "2"}}
                }
            }
        )
    }
    r = build_request(
        *pair(1, milli=1500, limit=4000, annotations=claim), Options(), machine=machine
    )
    assert (r.cpu_request, r.cpu_limit, r.memory_request, r.warnings) == (1500, 2000, GiB, ())


# --- privileged annotations only from trusted namespaces -----------------------------------------

PRIVILEGED = [
    (f"prefer-reserved-cpus.{DOMAIN}", QoS.BURSTABLE, CpuKind.RESERVED),
    (f"cpu.preserve.{DOMAIN}", QoS.BURSTABLE, CpuKind.PRESERVE),
    (f"memory.preserve.{DOMAIN}", QoS.BURSTABLE, None),
]


@pytest.mark.parametrize(("key", "qos", "kind"), PRIVILEGED)
def test_privileged_annotations_are_ignored_outside_trusted_namespaces(machine, key, qos, kind):
    annotations = {key: "true"}
    tenant = build_request(*pair(1, qos, annotations=annotations), Options(), machine=machine)
    assert tenant.kind is CpuKind.SHARED and not tenant.memory_preserve
    assert [w.kind for w in tenant.warnings] == ["untrusted"]
    assert "'tenant' is not trusted" in tenant.warnings[0].message
    system = build_request(
        *pair(1, qos, annotations=annotations, namespace="kube-system"),
        Options(),
        machine=machine,
    )
    assert system.warnings == ()
    if kind is None:
        assert system.memory_preserve
    else:
        assert system.kind is kind


def test_untrusted_use_is_said_in_the_decision(machine):
    policy = Policy(machine, Options())
    decision = policy.create(*pair(1, annotations={f"prefer-reserved-cpus.{DOMAIN}/pod": "true"}))
    assert decision.kind is CpuKind.SHARED
    assert "prefer-reserved-cpus" in decision.warnings[0].message


def test_isolated_cpus_follow_their_own_trust_list(machine):
    annotations = {f"require-isolated-cpus.{DOMAIN}": "true"}
    g = pair(1, QoS.GUARANTEED, milli=2000, memory=GiB, annotations=annotations)
    assert build_request(*g, Options(), machine=machine).require_isolated  # every namespace
    only_rt = Options(trust=Trust(isolated_cpus=("rt-*",)))
    r = build_request(*g, only_rt, machine=machine)
    assert (r.require_isolated, r.warnings[0].kind) == (False, "untrusted")


def test_opting_out_needs_no_trust(machine):
    annotations = {f"prefer-reserved-cpus.{DOMAIN}": "false"}
    r = build_request(
        *pair(1, annotations=annotations, namespace="kube-system"),
        Options(trust=Trust(reserved_cpus=())),
        machine=machine,
    )
    assert r.kind is CpuKind.SHARED and r.warnings == ()


# --- unknown keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "kind", "fragment"),
    [
        (f"require-isolated-cpu.{DOMAIN}/pod", "unknown", f"require-isolated-cpus.{DOMAIN}/pod"),
        (f"cpu-class.{DOMAIN}", "unsupported", "cpu-class is not supported"),
        (f"unlimited-burstable.{DOMAIN}/container.a", "unsupported", "not supported"),
        (f"{DOMAIN}/afinity", "unknown", f"{DOMAIN}/affinity"),
        (
            "memory-typ.cri-resource-manager.intel.com",
            "unknown",
            "memory-type.cri-resource-manager",
        ),
        (f"cpu.preserve.{DOMAIN}/containers.x", "unknown", "scopes are"),
        (f"balloon.balloons.{DOMAIN}", "unknown", "no similar key"),
    ],
)
def test_unknown_keys_name_the_nearest_known_key(key, kind, fragment):
    (problem,) = key_problems([key, f"cpu.preserve.{DOMAIN}", "app.kubernetes.io/name"])
    assert problem.kind == kind and fragment in problem.message


def test_every_known_key_is_known():
    from nri_topology.policy.intake.annotations import ANNOTATIONS

    keys = [spec.key for spec in ANNOTATIONS]
    keys += [f"{s.name}.{DOMAIN}/container.web" for s in ANNOTATIONS if not s.prefixed]
    keys += [s.key.replace(DOMAIN, "cri-resource-manager.intel.com") for s in ANNOTATIONS]
    assert key_problems(keys) == []
