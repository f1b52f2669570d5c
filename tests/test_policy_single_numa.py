"""Strict single-NUMA (`numa-policy: single-numa-node` and the `numa_policy` option): a container
that one NUMA node can hold never spans; one that none can hold is refused, saying so."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_topology.config.load import config_from
from nri_topology.configured import policy_options
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    Decision,
    PodInfo,
    PolicyError,
    QoS,
    Resources,
)
from nri_topology.topology.model import Machine
from tests import test_request
from tests.machines import synthetic

D = "resource-policy.nri.io"
GI = 1 << 30
OPTS = Options(reserved_resources=CpuAmount(milli=0))


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    """2 sockets x 2 NUMA nodes x 4 single-thread cores, 4 GiB per node."""
    return synthetic(tmp_path_factory.mktemp("m"), sockets=2, nodes=2, cores=4, threads=1)


def nodes_of(m: Machine, cpus: frozenset[int]) -> set[int]:
    return {m.cpus[c].node for c in cpus}


def pod_of(
    cid: str,
    kind: CpuKind,
    *,
    exclusive: int = 0,
    shared: int = 0,
    memory: int = 0,
    strict: bool = False,
) -> tuple[PodInfo, ContainerInfo]:
    """A one-container pod the policy classifies as `kind` with these amounts (Guaranteed
    for exclusive CPUs, Burstable for shared ones), strictly single-NUMA by annotation."""
    milli = 1000 * exclusive + shared
    guaranteed = kind is not CpuKind.SHARED
    pod = PodInfo(
        id=f"pod-{cid}",
        name=f"pod-{cid}",
        namespace="default",
        annotations={f"numa-policy.{D}": "single-numa-node"} if strict else {},
        cgroup_parent="kubepods" if guaranteed else "kubepods-burstable",
    )
    res = Resources(
        cpu_shares=max(2, milli * 1024 // 1000),
        cpu_quota=milli * 100 if guaranteed else None,
        cpu_period=100_000 if guaranteed else None,
        memory_limit=memory or None,
    )
    return pod, ContainerInfo(id=cid, pod_id=pod.id, name="app", resources=res)


def create(policy: Policy, cid: str, kind: CpuKind, **kwargs: object) -> Decision:
    d = policy.create(*pod_of(cid, kind, **kwargs))  # type: ignore[arg-type]
    assert d.kind is kind or kind is CpuKind.MIXED, d.reason
    return d


def fill(policy: Policy, m: Machine, per_node: int) -> None:
    """Hold `per_node` CPUs of every NUMA node exclusively (with a strict request each)."""
    for n in sorted(m.nodes):
        create(policy, f"fill{n}", CpuKind.EXCLUSIVE, exclusive=per_node, strict=True)


# (name, request kwargs, CPUs held per node first, fits: expected message part or None)
CASES = [
    ("3 exclusive CPUs fit one node", {"exclusive": 3, "kind": CpuKind.EXCLUSIVE}, 0, None),
    ("a whole node", {"exclusive": 4, "kind": CpuKind.EXCLUSIVE}, 0, None),
    (
        "more CPUs than a node has",
        {"exclusive": 6, "kind": CpuKind.EXCLUSIVE},
        0,
        "the largest NUMA node has 4 CPUs",
    ),
    (
        "nodes too full now, the machine is not",
        {"exclusive": 2, "kind": CpuKind.EXCLUSIVE},
        3,
        "now at most 1 free CPUs",
    ),
    ("2 shared CPUs", {"shared": 2000, "kind": CpuKind.SHARED}, 0, None),
    ("shared CPUs next to held ones", {"shared": 900, "kind": CpuKind.SHARED}, 3, None),
    (
        "memory larger than a node",
        {"exclusive": 1, "kind": CpuKind.EXCLUSIVE, "memory": 5 * GI},
        0,
        "5Gi of dram memory",
    ),
    (
        "a mixed container",
        {"exclusive": 1, "shared": 500, "kind": CpuKind.MIXED},
        0,
        None,
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "held", "refused"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_single_numa_node(
    machine: Machine, kwargs: dict[str, object], held: int, refused: str | None
) -> None:
    policy = Policy(machine, OPTS)
    if held:
        fill(policy, machine, held)
    kwargs = dict(kwargs)
    kind = kwargs.pop("kind")
    if refused is not None:
        with pytest.raises(PolicyError) as err:
            create(policy, "c", kind, strict=True, **kwargs)  # type: ignore[arg-type]
        message = str(err.value)
        assert "single-numa-node asked and no NUMA node can hold" in message
        assert "not spanning NUMA nodes as asked" in message
        assert refused in message
        # the same request without the strict ask is placed (spanning) where CPUs allow
        loose = create(policy, "c", kind, **kwargs)  # type: ignore[arg-type]
        p = loose.placement
        assert len(nodes_of(machine, p.cpus)) > 1 or len(p.mems) > 1
        return
    d = create(policy, "c", kind, strict=True, **kwargs)  # type: ignore[arg-type]
    assert len(nodes_of(machine, d.placement.cpus)) == 1, d.reason
    assert len(d.placement.mems) == 1
    assert d.placement.mems == nodes_of(machine, d.placement.cpus)


def test_without_the_ask_the_same_state_spans(machine: Machine) -> None:
    policy = Policy(machine, OPTS)
    fill(policy, machine, 3)
    d = create(policy, "c", CpuKind.EXCLUSIVE, exclusive=2)
    assert len(nodes_of(machine, d.exclusive)) == 2


def test_the_trace_names_the_rule(machine: Machine) -> None:
    d = create(Policy(machine, OPTS), "c", CpuKind.EXCLUSIVE, exclusive=2, strict=True)
    verdicts = {s.pool: s.verdict for s in d.trace}
    assert verdicts["root"].startswith("does not fit: single-numa-node: the pool spans")
    assert verdicts["socket #0"].startswith("does not fit: single-numa-node")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2500)), min_size=1, max_size=12))
def test_strict_containers_never_span(machine: Machine, steps: list[tuple[int, int]]) -> None:
    """Invariant: whatever comes and goes, a strict container sits in one NUMA node or is
    refused with the single-numa-node message."""
    policy = Policy(machine, OPTS)
    for i, (k, milli) in enumerate(steps):
        try:
            if k:
                d = create(policy, f"c{i}", CpuKind.EXCLUSIVE, exclusive=k, strict=True)
            else:
                d = create(policy, f"c{i}", CpuKind.SHARED, shared=milli, strict=True)
        except PolicyError as err:
            assert "single-numa-node asked" in str(err)
            continue
        assert len(nodes_of(machine, d.placement.cpus)) == 1
        assert len(d.placement.mems) == 1
    for p in policy.placements().values():
        assert p.cpus is not None and len(nodes_of(machine, p.cpus)) == 1


# --- from annotations and the option ------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "options", "expected"),
    [
        ({}, Options(), False),
        ({}, Options(single_numa_node=True), True),
        ({f"numa-policy.{D}/container.app": "single-numa-node"}, Options(), True),
        ({f"numa-policy.{D}/pod": "Single-NUMA-Node"}, Options(), True),
        ({f"numa-policy.{D}": "single-numa-node"}, Options(), True),
        ({f"numa-policy.{D}/container.other": "single-numa-node"}, Options(), False),
        ({f"numa-policy.{D}": "best-effort"}, Options(single_numa_node=True), False),
        (
            {
                f"numa-policy.{D}/container.app": "best-effort",
                f"numa-policy.{D}/pod": "single-numa-node",
            },
            Options(),
            False,
        ),
    ],
)
def test_request_reads_the_policy(annotations, options, expected) -> None:
    r = test_request.req(2000, QoS.GUARANTEED, annotations=annotations, options=options)
    assert r.single_numa is expected


def test_invalid_policy_is_named() -> None:
    with pytest.raises(PolicyError, match="expected single-numa-node or best-effort"):
        test_request.req(2000, annotations={f"numa-policy.{D}": "strict"})


@pytest.mark.parametrize(("value", "strict"), [("best-effort", False), ("single-numa-node", True)])
def test_config_option(value: str, strict: bool, tmp_path: Path) -> None:
    cfg = config_from({"policy": {"numa_policy": value}})
    assert policy_options(cfg).single_numa_node is strict


def test_config_option_rejects_other_values() -> None:
    with pytest.raises(ValueError, match="numa_policy"):
        config_from({"policy": {"numa_policy": "restricted"}})
