"""Request building: QoS, amounts, CPU classification (reference §3.3), memory tiers, cold start."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.intake.request import (
    build_request,
    in_namespaces,
    parse_bool,
    parse_duration,
    shares_to_milli,
)
from nri_topology.policy.options import Options, Trust
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    PodInfo,
    PolicyError,
    QoS,
    Resources,
)
from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode

GiB = 1 << 30
D = "resource-policy.nri.io"


def make_machine(
    *,
    isolated: frozenset[int] = frozenset(),
    tiers: tuple[MemoryTier, ...] = (MemoryTier.DRAM,),
) -> Machine:
    """8 CPUs, 2 threads per core, a 16 GiB CPU node and a memory-only node per extra tier."""
    cpus = {
        i: Cpu(
            id=i,
            package=0,
            die=0,
            cluster=i // 2,
            core=i // 2,
            node=0,
            threads=frozenset({i - i % 2, i - i % 2 + 1}),
            l2=frozenset({i - i % 2, i - i % 2 + 1}),
            l3=frozenset(range(8)),
        )
        for i in range(8)
    }
    ids = range(len(tiers))
    nodes = {
        n: NumaNode(
            id=n,
            cpus=frozenset(range(8)) if n == 0 else frozenset(),
            memory=16 * GiB,
            tier=tiers[n],
            tier_source="config",
            distances={m: 10 if m == n else 20 for m in ids},
        )
        for n in ids
    }
    return Machine(cpus=cpus, nodes=nodes, isolated=isolated)


MACHINE = make_machine()
ISOLATING = make_machine(isolated=frozenset({6, 7}))
CGROUP = {
    QoS.GUARANTEED: "kubepods-pod1234.slice",
    QoS.BURSTABLE: "kubepods-burstable-pod1234.slice",
    QoS.BEST_EFFORT: "/kubepods/besteffort/pod1234",
}


def shares(milli: int) -> int:
    return max(2, milli * 1024 // 1000)


def req(
    milli: int = 0,
    qos: QoS = QoS.GUARANTEED,
    *,
    annotations: Mapping[str, str] | None = None,
    namespace: str = "default",
    options: Options | None = None,
    machine: Machine = MACHINE,
    memory: int | None = None,
    quota: int | None = None,
    oom: int | None = None,
    container_annotations: Mapping[str, str] | None = None,
):
    pod, ctr = pod_and_container(
        milli,
        qos,
        annotations=annotations,
        namespace=namespace,
        memory=memory,
        quota=quota,
        oom=oom,
        container_annotations=container_annotations,
    )
    return build_request(pod, ctr, options or TRUSTING, machine=machine)


def pod_and_container(
    milli: int = 0,
    qos: QoS = QoS.GUARANTEED,
    *,
    annotations: Mapping[str, str] | None = None,
    namespace: str = "default",
    memory: int | None = None,
    quota: int | None = None,
    oom: int | None = None,
    container_annotations: Mapping[str, str] | None = None,
    cid: str = "ctr-1",
) -> tuple[PodInfo, ContainerInfo]:
    """The pod and container `req` classifies; `cid` names the container (its pod is pod-cid,
    but for the default)."""
    pod_id = "pod-1" if cid == "ctr-1" else f"pod-{cid}"
    pod = PodInfo(
        id=pod_id,
        name="web",
        namespace=namespace,
        annotations=dict(annotations or {}),
        cgroup_parent=CGROUP[qos],
        labels={"app": "web"},
    )
    ctr = ContainerInfo(
        id=cid,
        pod_id=pod_id,
        name="app",
        resources=Resources(
            cpu_shares=shares(milli),
            cpu_quota=quota,
            cpu_period=100000 if quota else None,
            memory_limit=memory,
        ),
        annotations=dict(container_annotations or {}),
        oom_score_adj=oom,
    )
    return pod, ctr


def kind_of(r) -> tuple[CpuKind, int, int]:
    return r.kind, r.exclusive, r.shared


# --- classification: every row of reference §3.3 ------------------------------------------------

# Every namespace trusted with the privileged annotations: what they do, not who may use them.
TRUSTING = Options(trust=Trust(reserved_cpus=("*",), preserve=("*",), isolated_cpus=("*",)))
NO_ISO = Options(prefer_isolated_cpus=False)
SHARED_OPT = Options(prefer_shared_cpus=True)


@pytest.mark.parametrize(
    ("milli", "qos", "annotations", "namespace", "options", "machine", "expected"),
    [
        # 1. cpu.preserve wins over everything
        (
            2000,
            QoS.GUARANTEED,
            {f"cpu.preserve.{D}": "true"},
            "kube-system",
            None,
            MACHINE,
            (CpuKind.PRESERVE, 0, 2000),
        ),
        # 2. prefer-reserved-cpus: true, any QoS and namespace; shared = request exactly
        (
            1500,
            QoS.GUARANTEED,
            {f"prefer-reserved-cpus.{D}": "true"},
            "default",
            None,
            MACHINE,
            (CpuKind.RESERVED, 0, 1500),
        ),
        (
            250,
            QoS.BURSTABLE,
            {f"prefer-reserved-cpus.{D}/pod": "1"},
            "default",
            None,
            MACHINE,
            (CpuKind.RESERVED, 0, 250),
        ),
        # 3. reserved namespace, unless prefer-reserved-cpus is annotated at all
        (100, QoS.BURSTABLE, {}, "kube-system", None, MACHINE, (CpuKind.RESERVED, 0, 100)),
        (0, QoS.BEST_EFFORT, {}, "kube-system", None, MACHINE, (CpuKind.RESERVED, 0, 0)),
        (2000, QoS.GUARANTEED, {}, "kube-system", None, MACHINE, (CpuKind.RESERVED, 0, 2000)),
        (
            2000,
            QoS.GUARANTEED,
            {f"prefer-reserved-cpus.{D}": "false"},
            "kube-system",
            None,
            MACHINE,
            (CpuKind.EXCLUSIVE, 2, 0),
        ),
        (
            300,
            QoS.BURSTABLE,
            {},
            "infra-7",
            Options(reserved_namespaces=("kube-*", "infra-?")),
            MACHINE,
            (CpuKind.RESERVED, 0, 300),
        ),
        (
            300,
            QoS.BURSTABLE,
            {},
            "kube-system",
            Options(reserved_namespaces=()),
            MACHINE,
            (CpuKind.SHARED, 0, 300),
        ),
        # 4./5. Burstable and BestEffort share
        (2500, QoS.BURSTABLE, {}, "default", None, MACHINE, (CpuKind.SHARED, 0, 2500)),
        (0, QoS.BEST_EFFORT, {}, "default", None, MACHINE, (CpuKind.SHARED, 0, 0)),
        # 6. Guaranteed, sub-core
        (500, QoS.GUARANTEED, {}, "default", None, MACHINE, (CpuKind.SHARED, 0, 500)),
        (
            500,
            QoS.GUARANTEED,
            {f"prefer-shared-cpus.{D}": "false"},
            "default",
            None,
            MACHINE,
            (CpuKind.SHARED, 0, 500),
        ),
        # mixed group (1 <= R < 2)
        (1000, QoS.GUARANTEED, {}, "default", NO_ISO, MACHINE, (CpuKind.EXCLUSIVE, 1, 0)),
        (1500, QoS.GUARANTEED, {}, "default", NO_ISO, MACHINE, (CpuKind.MIXED, 1, 500)),
        (
            1500,
            QoS.GUARANTEED,
            {f"prefer-shared-cpus.{D}": "true"},
            "default",
            None,
            MACHINE,
            (CpuKind.SHARED, 0, 1500),
        ),
        (1000, QoS.GUARANTEED, {}, "default", SHARED_OPT, MACHINE, (CpuKind.SHARED, 0, 1000)),
        (
            1000,
            QoS.GUARANTEED,
            {f"prefer-shared-cpus.{D}": "false"},
            "default",
            SHARED_OPT,
            MACHINE,
            (CpuKind.EXCLUSIVE, 1, 0),
        ),
        # the option alone isolates the mixed group, but only when the machine has isolated CPUs
        (1000, QoS.GUARANTEED, {}, "default", None, ISOLATING, (CpuKind.ISOLATED, 1, 0)),
        (1500, QoS.GUARANTEED, {}, "default", None, ISOLATING, (CpuKind.ISOLATED, 1, 500)),
        (1000, QoS.GUARANTEED, {}, "default", None, MACHINE, (CpuKind.EXCLUSIVE, 1, 0)),
        (1000, QoS.GUARANTEED, {}, "default", NO_ISO, ISOLATING, (CpuKind.EXCLUSIVE, 1, 0)),
        (
            1000,
            QoS.GUARANTEED,
            {f"prefer-isolated-cpus.{D}": "true"},
            "default",
            NO_ISO,
            ISOLATING,
            (CpuKind.ISOLATED, 1, 0),
        ),
        # multi-core, fractional: shared unless prefer-shared-cpus is annotated false
        (2500, QoS.GUARANTEED, {}, "default", NO_ISO, MACHINE, (CpuKind.SHARED, 0, 2500)),
        (
            2500,
            QoS.GUARANTEED,
            {f"prefer-shared-cpus.{D}": "false"},
            "default",
            NO_ISO,
            MACHINE,
            (CpuKind.MIXED, 2, 500),
        ),
        (
            2500,
            QoS.GUARANTEED,
            {f"prefer-shared-cpus.{D}": "false"},
            "default",
            None,
            ISOLATING,
            (CpuKind.ISOLATED, 2, 500),
        ),
        # multi-core, integral
        (2000, QoS.GUARANTEED, {}, "default", None, ISOLATING, (CpuKind.EXCLUSIVE, 2, 0)),
        (
            2000,
            QoS.GUARANTEED,
            {f"prefer-isolated-cpus.{D}": "true"},
            "default",
            None,
            ISOLATING,
            (CpuKind.ISOLATED, 2, 0),
        ),
        (2000, QoS.GUARANTEED, {}, "default", SHARED_OPT, MACHINE, (CpuKind.SHARED, 0, 2000)),
        (
            2000,
            QoS.GUARANTEED,
            {f"prefer-shared-cpus.{D}": "true"},
            "default",
            None,
            MACHINE,
            (CpuKind.SHARED, 0, 2000),
        ),
    ],
)
def test_classification(milli, qos, annotations, namespace, options, machine, expected):
    r = req(
        milli, qos, annotations=annotations, namespace=namespace, options=options, machine=machine
    )
    assert kind_of(r) == expected
    assert r.qos is qos
    assert r.cpu_request == milli


def test_require_isolated_is_strict_and_checked_against_the_machine():
    r = req(2000, annotations={f"require-isolated-cpus.{D}": "true"}, machine=ISOLATING)
    assert kind_of(r) == (CpuKind.ISOLATED, 2, 0)
    assert r.require_isolated
    with pytest.raises(PolicyError, match="asks for 3 isolated CPUs but the machine has 2"):
        req(3000, annotations={f"require-isolated-cpus.{D}": "true"}, machine=ISOLATING)
    with pytest.raises(PolicyError, match="default/web/app"):
        req(1000, annotations={f"require-isolated-cpus.{D}": "true"}, machine=MACHINE)
    # nothing exclusive, nothing to require
    assert not req(500, annotations={f"require-isolated-cpus.{D}": "true"}).require_isolated


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        # equal scope: require wins
        (
            {f"prefer-isolated-cpus.{D}": "false", f"require-isolated-cpus.{D}": "true"},
            (CpuKind.ISOLATED, True),
        ),
        # narrower prefer wins over broader require
        (
            {
                f"prefer-isolated-cpus.{D}/container.app": "true",
                f"require-isolated-cpus.{D}": "true",
            },
            (CpuKind.ISOLATED, False),
        ),
        (
            {
                f"prefer-isolated-cpus.{D}/container.app": "false",
                f"require-isolated-cpus.{D}/pod": "true",
            },
            (CpuKind.EXCLUSIVE, False),
        ),
    ],
)
def test_isolation_scope_precedence(annotations, expected):
    r = req(2000, annotations=annotations, machine=ISOLATING)
    assert (r.kind, r.require_isolated) == expected


# --- amounts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shares_", "milli"),
    [(None, 0), (0, 0), (2, 0), (3, 3), (102, 100), (1024, 1000), (1536, 1500)],
)
def test_shares_to_milli(shares_, milli):
    assert shares_to_milli(shares_) == milli


def test_guaranteed_limits_equal_requests():
    r = req(1500, memory=2 * GiB, options=NO_ISO)
    assert (r.cpu_request, r.cpu_limit, r.memory_request, r.memory_limit) == (
        1500,
        1500,
        2 * GiB,
        2 * GiB,
    )


def test_burstable_limit_from_quota_and_memory_from_oom_score_adj():
    # kubelet: adj = 1000 - 1000 * request / capacity; capacity 16 GiB, request 4 GiB -> adj 750
    r = req(500, QoS.BURSTABLE, quota=150000, memory=8 * GiB, oom=750)
    assert (r.cpu_request, r.cpu_limit) == (500, 1500)
    assert r.memory_request == 4 * GiB
    assert r.memory_limit == 8 * GiB
    # an estimate not below the limit is not used; adj 999 means (almost) no request
    assert req(500, QoS.BURSTABLE, memory=GiB, oom=750).memory_request == 0
    assert req(500, QoS.BURSTABLE, oom=999).memory_request == 0
    assert req(500, QoS.BURSTABLE).cpu_limit is None


def test_exact_resources_annotation_wins_and_parses_quantities():
    exact = {
        "containers": {
            "app": {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"memory": "2G"}},
        },
        "initContainers": {"init": {"limits": {"cpu": "2"}}},
    }
    r = req(1500, QoS.BURSTABLE, annotations={"noderesource.dev/resources": json.dumps(exact)})
    assert (r.cpu_request, r.cpu_limit, r.memory_request, r.memory_limit) == (
        1500,
        None,
        GiB,
        2 * 10**9,
    )
    assert r.shared == 1500


def test_exact_resources_request_defaults_to_limit_and_missing_container_falls_back():
    exact = {"containers": {"app": {"limits": {"cpu": 2, "memory": "1e9"}}}}
    r = req(2000, annotations={"noderesource.dev/resources": json.dumps(exact)}, options=NO_ISO)
    assert (r.cpu_request, r.memory_request, r.kind) == (2000, 10**9, CpuKind.EXCLUSIVE)
    other = {"containers": {"sidecar": {"limits": {"cpu": "2"}}}}
    assert (
        req(100, annotations={"noderesource.dev/resources": json.dumps(other)}).cpu_request == 100
    )


def test_resize_uses_the_given_resources_not_the_annotation():
    exact = {"containers": {"app": {"limits": {"cpu": "1"}}}}
    pod = PodInfo(
        id="p",
        name="web",
        namespace="ns",
        cgroup_parent="kubepods/podx",
        annotations={"noderesource.dev/resources": json.dumps(exact)},
    )
    ctr = ContainerInfo(id="c", pod_id="p", name="app")
    r = build_request(
        pod, ctr, NO_ISO, machine=MACHINE, resources=Resources(cpu_shares=shares(3000))
    )
    assert (r.kind, r.exclusive) == (CpuKind.EXCLUSIVE, 3)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "expected JSON"),
        (
            json.dumps({"containers": {"app": {"requests": {"cpu": "lots"}}}}),
            "requests.cpu: 'lots' is not a Kubernetes quantity",
        ),
        (
            json.dumps({"containers": {"app": {"limits": {"memory": "-1Gi"}}}}),
            "limits.memory: '-1Gi' is negative",
        ),
        (json.dumps({"containers": ["app"]}), "containers"),
    ],
)
def test_invalid_resources_annotation(value, fragment):
    with pytest.raises(PolicyError) as e:
        req(100, annotations={"noderesource.dev/resources": value})
    assert "default/web/app" in str(e.value)
    assert "noderesource.dev/resources" in str(e.value)
    assert fragment in str(e.value)


# --- memory ------------------------------------------------------------------------------------

TIERED = make_machine(tiers=(MemoryTier.DRAM, MemoryTier.PMEM, MemoryTier.CXL))


@pytest.mark.parametrize(
    ("value", "machine", "options", "expected"),
    [
        (None, TIERED, None, {MemoryTier.DRAM}),  # default: DRAM only, PMEM when asked
        (None, MACHINE, None, {MemoryTier.DRAM}),
        (
            None,
            TIERED,
            Options(default_memory_tiers=frozenset({MemoryTier.DRAM, MemoryTier.PMEM})),
            {MemoryTier.DRAM, MemoryTier.PMEM},
        ),
        ("CXL", TIERED, None, {MemoryTier.CXL}),
        ("dram, pmem", TIERED, None, {MemoryTier.DRAM, MemoryTier.PMEM}),
        ("mixed", TIERED, None, {MemoryTier.DRAM, MemoryTier.PMEM, MemoryTier.CXL}),
        ("hbm", TIERED, None, {MemoryTier.DRAM}),  # nothing left after masking -> DRAM
        (None, TIERED, Options(default_memory_tiers=frozenset({MemoryTier.CXL})), {MemoryTier.CXL}),
    ],
)
def test_memory_tiers(value, machine, options, expected):
    annotations = {} if value is None else {f"memory-type.{D}": value}
    r = req(100, QoS.BURSTABLE, annotations=annotations, machine=machine, options=options)
    assert r.memory_tiers == expected


@pytest.mark.parametrize(
    ("value", "machine", "ns", "tiers"),
    [
        ("duration: 60s", TIERED, 60 * 10**9, {MemoryTier.PMEM}),
        ("duration: 1m30s", TIERED, 90 * 10**9, {MemoryTier.PMEM}),
        ("duration: 1h", TIERED, 3600 * 10**9, {MemoryTier.PMEM}),
        ("duration: 0s", TIERED, 0, {MemoryTier.DRAM}),
        ("duration: 60s", MACHINE, 0, {MemoryTier.DRAM}),  # nothing else to start on
    ],
)
def test_cold_start(value, machine, ns, tiers):
    r = req(100, QoS.BURSTABLE, annotations={f"cold-start.{D}": value}, machine=machine)
    assert (r.cold_start_ns, r.memory_tiers) == (ns, tiers)


def test_flags_and_preserve():
    r = req(
        2000,
        annotations={
            f"hide-hyperthreads.{D}/container.app": "T",
            f"memory.preserve.{D}/pod": "true",
            f"cold-start.{D}": "duration: 10s",
        },
        machine=TIERED,
    )
    assert r.hide_hyperthreads and r.memory_preserve
    assert r.cold_start_ns == 0  # memory untouched, nothing to start cold
    assert r.labels == {} and r.pod_labels == {"app": "web"}


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        (f"prefer-shared-cpus.{D}", "maybe", "expected true or false"),
        (f"prefer-isolated-cpus.{D}/pod", "yes", "expected true or false"),
        (f"require-isolated-cpus.{D}", "2", "expected true or false"),
        (f"prefer-reserved-cpus.{D}", "", "expected true or false"),
        (f"hide-hyperthreads.{D}/container.app", "on", "expected true or false"),
        (f"cpu.preserve.{D}", "yes", "expected true or false"),
        (f"memory.preserve.{D}", "nope", "expected true or false"),
        (f"memory-type.{D}", "dram,ssd", "dram, pmem, hbm, cxl or mixed"),
        (f"memory-type.{D}", "dram,", "dram, pmem, hbm, cxl or mixed"),
        (f"cold-start.{D}", "60s", "duration: <Go duration>"),
        (f"cold-start.{D}", "duration: 2h", "from 0 to 1h"),
        (f"cold-start.{D}", "duration: -1s", "from 0 to 1h"),
        (f"cold-start.{D}", "duration: 10 parsecs", "from 0 to 1h"),
        (f"cold-start.{D}", "duration: 60s\nextra: 1", "duration: <Go duration>"),
        (f"cold-start.{D}", "duration: [", "duration: <Go duration>"),
    ],
)
def test_invalid_annotation_messages(key, value, accepted):
    with pytest.raises(PolicyError) as e:
        req(1000, annotations={key: value}, machine=TIERED)
    message = str(e.value)
    assert message.startswith("default/web/app: annotation ")
    assert key in message
    assert repr(value) in message
    assert accepted in message


def test_container_annotations_count_too():
    r = req(1000, options=NO_ISO, container_annotations={f"prefer-shared-cpus.{D}": "true"})
    assert r.kind is CpuKind.SHARED


# --- Go values -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_parse_bool_true(text):
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_parse_bool_false(text):
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["yes", "tRUE", "", " true", "2"])
def test_parse_bool_rejects(text):
    assert parse_bool(text) is None


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("1s", 10**9),
        ("1m30s", 90 * 10**9),
        ("1.5h", 5400 * 10**9),
        ("250ms", 25 * 10**7),
        ("1h2m3s4ms5us6ns", 3723004005006),
        ("-2s", -2 * 10**9),
        ("+.5s", 5 * 10**8),
    ],
)
def test_parse_duration(text, ns):
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "10", "1d", "s", "1s2", "--1s", "1 s"])
def test_parse_duration_rejects(text):
    assert parse_duration(text) is None


@pytest.mark.parametrize(
    ("qos", "key", "value"),
    [
        (QoS.BEST_EFFORT, f"prefer-shared-cpus.{D}", "maybe"),
        (QoS.BURSTABLE, f"require-isolated-cpus.{D}/pod", "always"),
        (QoS.GUARANTEED, f"prefer-isolated-cpus.{D}", "please"),  # decided by cpu.preserve
        (QoS.GUARANTEED, f"cold-start.{D}", "soon"),  # memory.preserve makes it moot
    ],
)
def test_invalid_values_are_errors_even_when_another_rule_decides(qos, key, value):
    annotations = {key: value, f"cpu.preserve.{D}": "true", f"memory.preserve.{D}": "true"}
    with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
        req(1000, qos, annotations=annotations)


_BOOLS = st.sampled_from([None, "true", "false"])
_EXCLUSIVE_KINDS = {CpuKind.EXCLUSIVE, CpuKind.MIXED, CpuKind.ISOLATED}


@settings(max_examples=150, deadline=None)
@given(
    milli=st.integers(min_value=0, max_value=6000),
    qos=st.sampled_from(list(QoS)),
    namespace=st.sampled_from(["default", "kube-system"]),
    keys=st.fixed_dictionaries(
        {
            name: _BOOLS
            for name in (
                "prefer-shared-cpus",
                "prefer-isolated-cpus",
                "require-isolated-cpus",
                "prefer-reserved-cpus",
                "cpu.preserve",
            )
        }
    ),
    prefer_shared=st.booleans(),
    prefer_isolated=st.booleans(),
)
def test_classification_invariants(milli, qos, namespace, keys, prefer_shared, prefer_isolated):
    annotations = {f"{k}.{D}": v for k, v in keys.items() if v is not None}
    options = Options(prefer_shared_cpus=prefer_shared, prefer_isolated_cpus=prefer_isolated)
    try:
        r = req(
            milli,
            qos,
            annotations=annotations,
            namespace=namespace,
            options=options,
            machine=ISOLATING,
        )
    except PolicyError as e:
        assert "require-isolated-cpus asks for" in str(e)
        return
    # the CPU amount is split, never lost or invented
    expected = 0 if r.kind is CpuKind.SHARED and qos is QoS.BEST_EFFORT else r.cpu_request
    # shares carry milli-CPU to within rounding; 2 shares (the floor, milli <= 2) mean none
    assert abs(r.cpu_request - milli) <= 1 or (milli <= 2 and r.cpu_request == 0)
    assert r.exclusive * 1000 + r.shared == expected
    assert (r.exclusive > 0) == (r.kind in _EXCLUSIVE_KINDS)
    assert 0 <= r.shared < 1000 or r.exclusive == 0
    if r.require_isolated:
        assert r.kind is CpuKind.ISOLATED and r.exclusive <= len(ISOLATING.isolated)
    if qos is not QoS.GUARANTEED:
        assert r.kind in {CpuKind.SHARED, CpuKind.RESERVED, CpuKind.PRESERVE}


_GLOB_PARTS = st.sampled_from(["kube", "-", "system", "*", "?", "[a-k]", "[!x]", "s", "]", "\\"])


@settings(max_examples=500)
@given(
    st.lists(st.lists(_GLOB_PARTS, max_size=5).map("".join), max_size=3).map(tuple),
    st.lists(st.sampled_from(["kube", "-", "system", "s", "x", "]", "\\", "\n"]), max_size=5).map(
        "".join
    ),
)
def test_namespace_globs_match_as_fnmatch_does(globs, namespace):
    from fnmatch import fnmatchcase

    assert in_namespaces(namespace, globs) == any(fnmatchcase(namespace, g) for g in globs)


OURS = ("", "app")  # the pod uid and container name `req` classifies


@pytest.mark.parametrize(
    ("milli", "qos", "annotations", "pinned", "kind", "exclusive", "shared"),
    [
        (2000, QoS.GUARANTEED, {}, OURS, CpuKind.PRESERVE, 0, 0),
        (2000, QoS.GUARANTEED, {f"prefer-shared-cpus.{D}": "true"}, OURS, CpuKind.PRESERVE, 0, 0),
        (2000, QoS.GUARANTEED, {f"prefer-reserved-cpus.{D}": "1"}, OURS, CpuKind.PRESERVE, 0, 0),
        (500, QoS.BURSTABLE, {}, OURS, CpuKind.PRESERVE, 0, 0),
        (2000, QoS.GUARANTEED, {}, ("", "sidecar"), CpuKind.EXCLUSIVE, 2, 0),
        (2000, QoS.GUARANTEED, {}, ("other-pod", "app"), CpuKind.EXCLUSIVE, 2, 0),
    ],
)
def test_a_container_the_kubelet_pinned_is_preserved_and_charged_nothing(
    milli, qos, annotations, pinned, kind, exclusive, shared
) -> None:
    """The kubelet's static CPU manager's containers, by pod uid and container name, whatever
    else they ask: their cpusets are the kubelet's, their CPUs outside those granted."""
    options = Options(kubelet_pinned={pinned: frozenset({2, 3})})
    r = req(milli, qos, annotations=annotations, options=options)
    assert (r.kind, r.exclusive, r.shared) == (kind, exclusive, shared)
    assert r.kubelet_cpus == (frozenset({2, 3}) if kind is CpuKind.PRESERVE else None)
