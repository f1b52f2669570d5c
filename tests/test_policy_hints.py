"""Topology hints through the policy facade: pool choice, explanation, opt-out and strict mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.choice.scoring import CRITERIA, labelled
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    HintSource,
    PodInfo,
    PolicyError,
    Resources,
    TopologyHint,
)
from nri_topology.topology.model import Machine
from tests import machines

MiB = 1 << 20
OPTS = Options(reserved_resources=CpuAmount(milli=0))
D = "resource-policy.nri.io"
ALIAS = "cri-resource-manager.intel.com"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    """2 sockets x 2 NUMA nodes x 2 cores x 2 threads: nodes 0,1 on socket 0, nodes 2,3 on 1."""
    return machines.synthetic(
        tmp_path_factory.mktemp("m"), sockets=2, nodes=2, cores=2, threads=2, memory=8 << 30
    )


def gpu(node: int, source: HintSource = HintSource.DEVICES) -> TopologyHint:
    return TopologyHint(source, f"/dev/dri/card{node} (0000:{node}b:00.0)", frozenset({node}))


def container(
    i: int,
    cpus: int,
    hints: tuple[TopologyHint, ...] = (),
    **annotations: str,
) -> tuple[PodInfo, ContainerInfo]:
    pod = PodInfo(
        id=f"pod{i}",
        name=f"pod{i}",
        namespace="default",
        cgroup_parent="kubepods",
        annotations=annotations,
    )
    res = Resources(
        cpu_shares=cpus * 1024, cpu_quota=cpus * 100_000, cpu_period=100_000, memory_limit=64 * MiB
    )
    ctr = ContainerInfo(id=f"c{i}", pod_id=pod.id, name="main", resources=res, hints=hints)
    return pod, ctr


def nodes_of(m: Machine, cpus: frozenset[int] | None) -> set[int]:
    assert cpus is not None
    return {m.cpus[c].node for c in cpus}


def test_a_device_pulls_the_container_to_its_node(machine: Machine) -> None:
    plain = Policy(machine, OPTS).create(*container(1, 2))
    assert nodes_of(machine, plain.placement.cpus) == {0}  # without hints: the first node
    d = Policy(machine, OPTS).create(*container(1, 2, (gpu(3),)))
    assert d.pool == "NUMA node #3"
    assert nodes_of(machine, d.placement.cpus) == {3}
    assert d.placement.mems == {3}
    assert "devices on NUMA 3 (/dev/dri/card3 (0000:3b:00.0)): covered" in d.reason
    # explain: the hints criterion is in every key, and the nodes that miss lost on it
    hints_at = CRITERIA.index("hints")
    verdicts = {s.pool: s.verdict for s in d.trace}
    keys = {s.pool: s.key for s in d.trace}
    assert keys["NUMA node #0"][hints_at] == 1 and keys["NUMA node #3"][hints_at] == 0
    assert labelled(keys["NUMA node #0"])["hint_miss"] == 1
    assert verdicts["NUMA node #0"] == "lost to NUMA node #3 on hints"
    assert verdicts["socket #1"] == "lost to NUMA node #3 on depth"  # covers, but wider


def test_a_full_node_falls_back_to_the_pool_covering_it(machine: Machine) -> None:
    p = Policy(machine, OPTS)
    p.create(*container(1, 4, (gpu(3),)))  # node 3 is full now
    d = p.create(*container(2, 2, (gpu(3),)))
    assert d.pool == "socket #1"
    assert nodes_of(machine, d.placement.cpus) == {2}
    # the socket pool covers node 3, but the CPUs are node 2's: not "covered"
    assert ": covered" not in d.reason
    assert "devices on NUMA 3 (/dev/dri/card3 (0000:3b:00.0)): missed, CPUs on NUMA 2: " in (
        d.reason
    )
    assert "NUMA node #3 does not fit: 0 CPUs free to slice, 2 needed" in d.hints_missed


def test_covered_only_when_the_cpus_are_on_the_devices_nodes(machine: Machine) -> None:
    """A 1-CPU container whose device's node cannot give a whole CPU: the socket pool, which
    covers that node, gives it a CPU of the other node."""
    p = Policy(machine, OPTS)
    p.create(*container(1, 4, (gpu(0),)))  # node 0 full
    d = p.create(*container(3, 1, (gpu(0),)))
    assert nodes_of(machine, d.placement.cpus) == {1}
    assert ": covered" not in d.reason
    assert d.hints_missed.startswith("CPUs on NUMA 1: NUMA node #0 does not fit")
    assert f"devices on NUMA 0 (/dev/dri/card0 (0000:0b:00.0)): missed, {d.hints_missed}" in (
        d.reason
    )
    # more CPUs than the device's node has: some on it, the others not
    wide = Policy(machine, OPTS).create(*container(5, 6, (gpu(3),)))
    assert wide.hints_missed.startswith("CPUs on NUMA 2 too: NUMA node #3 does not fit")
    # where the CPUs are on the device's node, it is covered and nothing is missed
    covered = Policy(machine, OPTS).create(*container(4, 1, (gpu(0),)))
    assert nodes_of(machine, covered.placement.cpus) == {0} and covered.hints_missed == ""
    assert "devices on NUMA 0 (/dev/dri/card0 (0000:0b:00.0)): covered" in covered.reason


def test_devices_on_two_sockets_take_the_root(machine: Machine) -> None:
    d = Policy(machine, OPTS).create(*container(1, 2, (gpu(0), gpu(2))))
    assert d.pool == "root"


def test_a_hint_with_cpus_only_counts_their_nodes(machine: Machine) -> None:
    node2 = machine.nodes[2].cpus
    hint = TopologyHint(HintSource.DEVICES, "/dev/nic (0000:af:00.0)", cpus=node2)
    d = Policy(machine, OPTS).create(*container(1, 2, (hint,)))
    assert d.pool == "NUMA node #2"


@pytest.mark.parametrize(
    ("annotations", "options", "pool"),
    [
        ({f"topologyhints.{D}": "false"}, OPTS, "NUMA node #0"),
        ({f"topologyhints.{D}/pod": "none"}, OPTS, "NUMA node #0"),
        ({f"topologyhints.{D}/container.main": "f"}, OPTS, "NUMA node #0"),
        ({f"topologyhints.{ALIAS}": "false"}, OPTS, "NUMA node #0"),
        ({f"topologyhints.{D}": "pod-resources"}, OPTS, "NUMA node #0"),  # only device hints
        ({f"topologyhints.{D}": "devices, mounts"}, OPTS, "NUMA node #3"),
        ({f"topologyhints.{D}": "all"}, OPTS, "NUMA node #3"),
        ({}, replace(OPTS, topology_hints=False), "NUMA node #0"),
        ({f"topologyhints.{D}": "true"}, replace(OPTS, topology_hints=False), "NUMA node #3"),
    ],
)
def test_hints_turned_off_per_container_or_by_option(
    machine: Machine, annotations: dict[str, str], options: Options, pool: str
) -> None:
    d = Policy(machine, options).create(*container(1, 2, (gpu(3),), **annotations))
    assert d.pool == pool


def test_invalid_topologyhints_value_is_refused_with_the_key(machine: Machine) -> None:
    with pytest.raises(PolicyError, match=rf"topologyhints\.{D}: invalid value 'gpus'"):
        Policy(machine, OPTS).create(*container(1, 2, (gpu(3),), **{f"topologyhints.{D}": "gpus"}))


@pytest.mark.parametrize(
    ("annotations", "options"),
    [
        ({f"strict.topologyhints.{D}": "true"}, OPTS),
        ({f"strict.topologyhints.{ALIAS}/pod": "true"}, OPTS),
        ({}, replace(OPTS, strict_topology_hints=True)),
    ],
)
def test_strict_hints_refuse_rather_than_misalign(
    machine: Machine, annotations: dict[str, str], options: Options
) -> None:
    p = Policy(machine, options)
    p.create(*container(1, 4, (gpu(3),)))  # node 3 full
    with pytest.raises(PolicyError) as e:
        p.create(*container(2, 2, (gpu(3),), **annotations))
    assert "strict topology hints: CPUs of NUMA 2 are outside the devices' NUMA 3" in str(e.value)
    # without the device, the same request fits (on another node)
    assert p.create(*container(3, 2, (), **annotations)).pool


def test_strict_hints_switched_off_per_container(machine: Machine) -> None:
    p = Policy(machine, replace(OPTS, strict_topology_hints=True))
    p.create(*container(1, 4, (gpu(3),)))
    d = p.create(*container(2, 2, (gpu(3),), **{f"strict.topologyhints.{D}": "false"}))
    assert d.pool == "socket #1"


def test_reconfigure_keeps_hinted_placements(machine: Machine) -> None:
    p = Policy(machine, OPTS)
    d = p.create(*container(1, 2, (gpu(3),)))
    report = p.reconfigure(replace(OPTS, prefer_closest_numa=False))
    assert report.adopted == ("c1",) and report.updates == ()
    assert p.assignments()["c1"].cpus == d.placement.cpus


@settings(max_examples=60, deadline=None)
@given(node=st.integers(0, 3), cpus=st.integers(1, 4), source=st.sampled_from(list(HintSource)))
def test_on_an_idle_machine_a_fitting_container_lands_on_its_device_node(
    machine: Machine, node: int, cpus: int, source: HintSource
) -> None:
    d = Policy(machine, OPTS).create(*container(1, cpus, (gpu(node, source),)))
    assert nodes_of(machine, d.placement.cpus) == {node}
    assert d.placement.mems == {node}


def test_docs_name_the_criterion() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "annotations.md").read_text()
    assert "`hints` criterion" in doc


def test_in_a_wider_pool_exclusive_cpus_come_from_the_device_nodes(machine: Machine) -> None:
    d = Policy(machine, OPTS).create(*container(1, 2, (gpu(1), gpu(2))))
    assert d.pool == "root"
    assert nodes_of(machine, d.placement.cpus) <= {1, 2}
    assert d.placement.mems is not None and d.placement.mems <= {1, 2}
