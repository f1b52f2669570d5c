"""The NodeResourceTopology object: valid for the CRD on every shipped machine, and true to the
policy's state."""

from __future__ import annotations

import copy
import json
import socket
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from lightkube.generic_resource import create_global_resource
from lightkube.models.meta_v1 import ObjectMeta

from nri_topology.cli import main
from nri_topology.nrt.build import node_name, node_resource_topology
from nri_topology.policy.accounts.hugepages import resource_name as hugepage_name
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, PodInfo, Resources
from nri_topology.quantity import format_milli
from nri_topology.simulate import machine_spec
from nri_topology.topology.model import Machine
from tests import machines

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "packaging" / "kubernetes" / "noderesourcetopology-crd.yaml"


def schema(version: str = "v1alpha2") -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]


def validate(obj: dict[str, Any]) -> None:
    jsonschema.validate(obj, schema(), cls=jsonschema.Draft7Validator)


def bundled(name: str) -> Machine:
    return machine_spec.load_bundled(name)[1]


@pytest.mark.parametrize("name", machine_spec.bundled_names())
def test_every_shipped_machine_gives_a_valid_object(name: str) -> None:
    machine = bundled(name)
    policy = Policy(machine, Options())
    obj = node_resource_topology(machine, policy.node_capacity(), "worker-1")
    validate(obj)
    assert obj["metadata"]["name"] == "worker-1"
    nodes = [z for z in obj["zones"] if z["type"] == "Node"]
    assert sorted(z["name"] for z in nodes) == sorted(f"node-{n}" for n in machine.nodes)
    sockets = {z["name"] for z in obj["zones"] if z["type"] == "Socket"}
    assert {z["parent"] for z in nodes} <= sockets
    for z in nodes:  # every distance, and the tier
        n = int(z["name"].removeprefix("node-"))
        assert {c["name"]: c["value"] for c in z["costs"]} == {
            f"node-{m}": d for m, d in machine.nodes[n].distances.items()
        }
        assert z["attributes"] == [{"name": "memory.tier", "value": machine.nodes[n].tier}]
    # the CPUs of all node zones are the machine's, less the 750m reserved by default
    cpu = [r for z in nodes for r in z["resources"] if r["name"] == "cpu"]
    milli = sum(_milli(r["allocatable"]) for r in cpu)
    assert sum(_milli(r["capacity"]) for r in cpu) == 1000 * len(machine.cpus)
    assert milli == 1000 * len(machine.cpus) - 750
    # round trip through the client library's types
    nrt = create_global_resource(
        "topology.node.k8s.io", "v1alpha2", "NodeResourceTopology", "noderesourcetopologies"
    )
    assert nrt.from_dict(copy.deepcopy(obj)).to_dict() == obj
    assert ObjectMeta.from_dict(obj["metadata"]).to_dict() == obj["metadata"]


def _milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else 1000 * int(q)


def test_the_schema_catches_a_broken_object() -> None:
    machine = bundled("desktop")
    obj = node_resource_topology(machine, Policy(machine, Options()).node_capacity(), "n")
    broken = copy.deepcopy(obj)
    del broken["zones"][1]["resources"][0]["available"]
    with pytest.raises(jsonschema.ValidationError, match="'available' is a required property"):
        validate(broken)
    broken = copy.deepcopy(obj)
    broken["zones"][1]["resources"][0]["capacity"] = "lots"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    broken = copy.deepcopy(obj)
    broken["zones"][1]["costs"][0]["value"] = "10"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_policy_attributes_and_legacy_policies() -> None:
    machine = bundled("desktop")
    caps = Policy(machine, Options()).node_capacity()
    obj = node_resource_topology(machine, caps, "n", policy="single-numa-node", scope="pod")
    assert obj["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
    ]
    assert obj["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    with pytest.raises(ValueError):
        node_resource_topology(machine, caps, "n", policy="strict")


@pytest.mark.parametrize(("milli", "text"), [(0, "0"), (2000, "2"), (2500, "2500m"), (750, "750m")])
def test_cpu_quantities(milli: int, text: str) -> None:
    assert format_milli(milli) == text


@pytest.mark.parametrize(
    ("kb", "name"), [(2048, "hugepages-2Mi"), (1 << 20, "hugepages-1Gi"), (64, "hugepages-64Ki")]
)
def test_hugepage_names(kb: int, name: str) -> None:
    assert hugepage_name(kb) == name


def container(i: int, milli: int, qos: str, memory: int) -> tuple[PodInfo, ContainerInfo]:
    parent = {"g": "kubepods", "b": "kubepods-burstable"}[qos]
    pod = PodInfo(id=f"p{i}", name=f"p{i}", namespace="default", cgroup_parent=parent)
    res = Resources(
        cpu_shares=milli * 1024 // 1000,
        cpu_quota=milli * 100 if qos == "g" else None,
        cpu_period=100_000,
        memory_limit=memory,
    )
    return pod, ContainerInfo(id=f"c{i}", pod_id=pod.id, name="main", resources=res)


def zone(obj: dict[str, Any], name: str) -> dict[str, dict[str, str]]:
    (z,) = [z for z in obj["zones"] if z["name"] == name]
    return {r["name"]: r for r in z["resources"]}


def test_available_follows_placements(tmp_path: Path) -> None:
    machine = machines.synthetic(
        tmp_path, sockets=1, nodes=2, cores=4, threads=1, memory=8 << 30, hugepages={2048: 8}
    )
    policy = Policy(machine, Options(reserved_resources=CpuAmount(cpus=frozenset({0}))))
    empty = node_resource_topology(machine, policy.node_capacity(), "n")
    assert zone(empty, "node-0")["cpu"] == {
        "name": "cpu",
        "capacity": "4",
        "allocatable": "3",
        "available": "3",
    }
    assert zone(empty, "node-0")["hugepages-2Mi"]["capacity"] == str(8 * 2 << 20)
    d = policy.create(*container(1, 2000, "g", 1 << 30))  # 2 exclusive CPUs on one node
    n = min(machine.cpus[c].node for c in d.exclusive)
    placed = node_resource_topology(machine, policy.node_capacity(), "n")
    validate(placed)
    assert zone(placed, f"node-{n}")["cpu"]["available"] == format_milli(
        _milli(zone(empty, f"node-{n}")["cpu"]["available"]) - 2000
    )
    assert int(zone(placed, f"node-{n}")["memory"]["available"]) == (8 << 30) - (1 << 30)
    assert zone(placed, "socket-0")["cpu"]["available"] == "5"  # 7 allocatable - 2 exclusive
    assert _milli(zone(placed, "socket-0")["cpu"]["allocatable"]) == 7000


def test_topology_nrt_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(sockets=2, cores=2))
    config = tmp_path / "c.yaml"
    config.write_text(
        "policy: {reserved_resources: {cpu: 'cpuset:0'}}\n"
        "nrt: {topology_manager_policy: restricted, node_name: from-config}\n"
    )
    assert main(["topology", "--sysfs", str(sysfs), "--nrt", "--config", str(config)]) == 0
    obj = json.loads(capsys.readouterr().out)
    validate(obj)
    assert obj["metadata"]["name"] == "from-config"
    assert obj["attributes"][0] == {"name": "topologyManagerPolicy", "value": "restricted"}
    assert zone(obj, "node-0")["cpu"]["allocatable"] == "3"
    assert main(["topology", "--sysfs", str(sysfs), "--nrt", "--node-name", "w7"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["name"] == "w7"


def test_shared_containers_charge_the_nodes_of_their_pool(tmp_path: Path) -> None:
    machine = machines.synthetic(tmp_path, sockets=1, nodes=2, cores=4, threads=1)
    policy = Policy(machine, Options(reserved_resources=CpuAmount(milli=0)))
    policy.create(*container(1, 1500, "b", 1 << 30))  # Burstable: shared, in one node's pool
    obj = node_resource_topology(machine, policy.node_capacity(), "n")
    available = [_milli(zone(obj, f"node-{n}")["cpu"]["available"]) for n in (0, 1)]
    assert sorted(available) == [2500, 4000]


@pytest.mark.parametrize(
    ("configured", "environ", "expected"),
    [
        ("From-Config", {"NODE_NAME": "env"}, "from-config"),
        (None, {"NODE_NAME": " Worker-1 "}, "worker-1"),
        (None, {"NODE_NAME": ""}, socket.gethostname().strip().lower()),
        (None, {}, socket.gethostname().strip().lower()),
    ],
)
def test_node_name_follows_the_kubelet(
    configured: str | None, environ: dict[str, str], expected: str
) -> None:
    """Configured, else $NODE_NAME, else the host name; lower case as node names are."""
    assert node_name(configured, environ) == expected
