"""Hybrid CPUs: core kinds read from sysfs, carried through the machine description and the
topology JSON, and exclusive CPUs picked by the container's CPU priority."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    CpuPriority,
    PodInfo,
    PolicyError,
    QoS,
)
from nri_topology.simulate.machine_spec import (
    MachineSpecError,
    from_machine,
    parse_spec,
    to_machine,
)
from nri_topology.topology import cpuset
from nri_topology.topology.model import CoreKind, Machine
from nri_topology.topology.render import JSON_SCHEMA, machine_json, machine_text
from nri_topology.topology.sysfs import read_machine
from tests import machines, test_request
from tests.machines import SyntheticSpec, synthetic, write_sysfs
from tests.test_policy_restore import holding

D = "resource-policy.nri.io"
P_CPUS = frozenset(range(16))  # 8 performance cores x 2 threads: CPU n and n+8 are siblings
E_CPUS = frozenset(range(16, 24))  # 8 single-thread efficiency cores
OPTS = Options(reserved_resources=CpuAmount(milli=0), prefer_isolated_cpus=False)


def hybrid(tmp_path: Path, source: str = "atom") -> Machine:
    return synthetic(tmp_path, cores=8, threads=2, e_cores=8, hybrid_from=source)


@pytest.fixture(scope="module")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    return hybrid(tmp_path_factory.mktemp("hybrid"))


# --- discovery ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("atom", "devices/cpu_atom/cpus"),
        ("capacity", "devices/system/cpu/cpu*/cpu_capacity"),
        ("freq", "devices/system/cpu/cpu*/cpufreq/cpuinfo_max_freq"),
    ],
)
def test_core_kinds_from_each_source(tmp_path: Path, source: str, named: str) -> None:
    m = hybrid(tmp_path, source)
    assert m.efficiency_cpus == E_CPUS
    assert m.performance_cpus == P_CPUS
    assert m.core_kinds_from == named
    assert all(m.cpus[c].kind is CoreKind.EFFICIENCY for c in E_CPUS)
    assert m.cpus[0].threads == {0, 8}


def test_without_a_source_every_core_performs(tmp_path: Path) -> None:
    m = hybrid(tmp_path, "none")
    assert not m.efficiency_cpus and m.core_kinds_from == ""


def test_small_frequency_differences_are_not_hybrid(tmp_path: Path) -> None:
    """Favoured cores (Turbo Boost Max) run a few percent faster; that is not a hybrid CPU."""
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4, threads=2))
    for c in range(8):
        freq = 4500000 if c in (0, 4) else 4300000
        f = root / f"devices/system/cpu/cpu{c}/cpufreq/cpuinfo_max_freq"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"{freq}\n")
    assert not read_machine(root).efficiency_cpus


def test_a_core_is_efficient_only_with_all_its_threads(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4, threads=2))
    (root / "devices/cpu_atom").mkdir(parents=True)
    (root / "devices/cpu_atom/cpus").write_text("3,7\n")  # core 3 with both threads
    m = read_machine(root)
    assert m.efficiency_cpus == {3, 7}
    (root / "devices/cpu_atom/cpus").write_text("2\n")  # thread 2 without its sibling 6
    assert not read_machine(root).efficiency_cpus


def test_shared_fake_hybrid_dump() -> None:
    """The cpuallocator test dump marks 16-19,36-39,56-59,76-79 as cpu_atom."""
    if not machines.TOPOLOGIES.is_dir():
        pytest.skip("../shared/topologies is not present")
    m = machines.load("2s4n40c")
    assert cpuset.format(m.efficiency_cpus) == "16-19,36-39,56-59,76-79"


def test_topology_json_and_text(desktop: Machine) -> None:
    doc = machine_json(desktop)
    jsonschema.Draft202012Validator(JSON_SCHEMA).validate(doc)
    assert doc["efficiency"] == "16-23"
    assert doc["core_kinds_from"] == "devices/cpu_atom/cpus"
    assert "efficiency cores: 16-23 (from devices/cpu_atom/cpus)" in machine_text(desktop)


def test_machine_description_round_trip(desktop: Machine) -> None:
    doc = from_machine(desktop, name="hybrid", description="", source="test")
    assert doc["efficiency"] == "16-23"
    back = to_machine(parse_spec(doc))
    assert back.efficiency_cpus == E_CPUS
    assert back.core_kinds_from == desktop.core_kinds_from == "devices/cpu_atom/cpus"
    del doc["core_kinds_from"]  # as a hand-written description would say it
    assert to_machine(parse_spec(doc)).core_kinds_from == "machine description"


def test_machine_description_rejects_half_a_core(desktop: Machine) -> None:
    doc = from_machine(desktop, name="hybrid", description="", source="test")
    doc["efficiency"] = "0,16-23"
    with pytest.raises(MachineSpecError, match="efficiency: CPU 0 is an efficiency core"):
        to_machine(parse_spec(doc))


# --- requests -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qos", "annotations", "expected"),
    [
        (QoS.GUARANTEED, {}, CpuPriority.HIGH),
        (QoS.BURSTABLE, {}, CpuPriority.NORMAL),
        (QoS.BEST_EFFORT, {}, CpuPriority.LOW),
        (QoS.GUARANTEED, {f"prefer-cpu-priority.{D}/container.app": "low"}, CpuPriority.LOW),
        (QoS.GUARANTEED, {f"prefer-cpu-priority.{D}/pod": "None"}, CpuPriority.NONE),
        (QoS.GUARANTEED, {f"prefer-cpu-priority.{D}": "normal"}, CpuPriority.NORMAL),
        (QoS.GUARANTEED, {f"prefer-cpu-priority.{D}": "default"}, CpuPriority.HIGH),
        (QoS.BEST_EFFORT, {f"prefer-cpu-priority.{D}": "high"}, CpuPriority.HIGH),
    ],
)
def test_priority_from_annotation_and_qos(
    qos: QoS, annotations: dict[str, str], expected: CpuPriority
) -> None:
    milli = 0 if qos is QoS.BEST_EFFORT else 2000
    assert test_request.req(milli, qos, annotations=annotations).cpu_priority is expected


def test_invalid_priority_is_named() -> None:
    with pytest.raises(PolicyError, match="expected high, normal, low, none or default"):
        test_request.req(2000, annotations={f"prefer-cpu-priority.{D}": "urgent"})


# --- placement ----------------------------------------------------------------------------------


def pod(
    cid: str, cpus: int, annotations: dict[str, str] | None = None
) -> tuple[PodInfo, ContainerInfo]:
    """A Guaranteed pod of `cpus` whole CPUs."""
    return test_request.pod_and_container(cpus * 1000, annotations=annotations, cid=cid)


@pytest.mark.parametrize(
    ("annotations", "cpus", "within"),
    [
        ({}, 4, P_CPUS),
        ({f"prefer-cpu-priority.{D}": "high"}, 4, P_CPUS),
        ({f"prefer-cpu-priority.{D}": "normal"}, 4, P_CPUS),
        ({f"prefer-cpu-priority.{D}": "low"}, 4, E_CPUS),
        ({}, 16, P_CPUS),
        ({f"prefer-cpu-priority.{D}": "low"}, 8, E_CPUS),
    ],
)
def test_exclusive_cpus_by_priority(
    desktop: Machine, annotations: dict[str, str], cpus: int, within: frozenset[int]
) -> None:
    d = Policy(desktop, OPTS).create(*pod("c", cpus, annotations))
    assert d.kind is CpuKind.EXCLUSIVE
    assert d.exclusive <= within, cpuset.format(d.exclusive)


def test_guaranteed_pods_take_performance_threads_while_free(desktop: Machine) -> None:
    policy = Policy(desktop, OPTS)
    got = [policy.create(*pod(f"g{i}", 4)).exclusive for i in range(4)]
    assert frozenset().union(*got) == P_CPUS
    assert all(len(g) == 4 for g in got)
    fifth = policy.create(*pod("g4", 4)).exclusive
    assert fifth <= E_CPUS  # performance cores are all taken now


def test_low_priority_spills_onto_performance_cores_only_when_needed(desktop: Machine) -> None:
    low = {f"prefer-cpu-priority.{D}": "low"}
    d = Policy(desktop, OPTS).create(*pod("c", 10, low))
    assert d.exclusive >= E_CPUS and len(d.exclusive & P_CPUS) == 2


def test_not_hybrid_no_preference(tmp_path: Path) -> None:
    """Without efficiency cores the priority changes nothing."""
    m = synthetic(tmp_path, cores=8, threads=2)
    picks = set()
    for prio in ("high", "low", "none"):
        policy = Policy(m, OPTS)
        picks.add(policy.create(*pod("c", 4, {f"prefer-cpu-priority.{D}": prio})).exclusive)
    assert len(picks) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["high", "low"])), max_size=8))
def test_preferred_kind_first(desktop: Machine, steps: list[tuple[int, str]]) -> None:
    """Invariant: a grant holds CPUs of the other kind only when no CPU of its preferred kind
    was left free."""
    m = desktop
    policy = Policy(m, OPTS)
    for i, (k, prio) in enumerate(steps):
        try:
            got = policy.create(*pod(f"c{i}", k, {f"prefer-cpu-priority.{D}": prio})).exclusive
        except PolicyError:
            continue
        taken = frozenset().union(*(a.exclusive for a in policy.assignments().values()))
        wanted, other = (P_CPUS, E_CPUS) if prio == "high" else (E_CPUS, P_CPUS)
        if got & other:
            assert not (wanted - taken), f"{prio}: {cpuset.format(got)}"


def test_pools_with_free_preferred_cores_win(tmp_path: Path) -> None:
    """Node 0 has more free CPUs, all efficiency cores; node 1 fewer, performance ones: a
    Guaranteed pod goes to node 1 (criterion `cores`, before load)."""
    m = synthetic(tmp_path, nodes=2, cores=8, threads=2, e_cores=8)
    p0 = frozenset(c for c in m.nodes[0].cpus if c in m.performance_cpus)
    p1 = frozenset(c for c in m.nodes[1].cpus if c in m.performance_cpus)
    e1 = frozenset(c for c in m.nodes[1].cpus if c in m.efficiency_cpus)
    policy = holding(m, OPTS, p0, e1, frozenset(sorted(p1)[:10]))
    d = policy.create(*pod("g", 4))
    assert d.pool == "NUMA node #1" and d.exclusive <= p1, d.reason
    verdicts = {s.pool: s.verdict for s in d.trace}
    assert verdicts["NUMA node #0"] == "lost to NUMA node #1 on cores"
    low = policy.create(*pod("l", 4, {f"prefer-cpu-priority.{D}": "low"}))
    assert low.pool == "NUMA node #0" and low.exclusive <= m.efficiency_cpus


def test_cpus_kept_for_shared_containers_are_of_the_other_kind(tmp_path: Path) -> None:
    """A BestEffort container in NUMA node 0 keeps a CPU there when a pod takes all others from
    the socket: a performance thread for a low-priority pod, so it gets every efficiency core."""
    m = synthetic(tmp_path, nodes=2, cores=8, threads=2, e_cores=8)
    for prio, kept_kind in (("low", m.performance_cpus), ("high", m.efficiency_cpus)):
        e = Engine(m, OPTS)
        be = test_request.req(0, QoS.BEST_EFFORT, machine=m, options=OPTS)
        e.place(dataclasses.replace(be, name="be"), hint=e.pool_index("NUMA node #0"))
        assert e.grants[be.container_id].pool == e.pool_index("NUMA node #0")
        # (the engine's own unit: `hint` puts the BestEffort container in node 0)
        annotations = {f"prefer-cpu-priority.{D}": prio}
        g = test_request.req(47_000, annotations=annotations, machine=m, options=OPTS)
        got = e.place(dataclasses.replace(g, container_id="g")).exclusive
        assert m.all_cpus - got <= kept_kind, prio
