"""Machine descriptions: parsing, clear errors, lossless round trips of every real machine.

(That each committed description matches its sysfs dump is tested in test_topology_machines.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.simulate import machine_spec
from nri_topology.simulate.machine_spec import MachineSpecError
from nri_topology.topology.model import Machine, MemoryTier
from tests import machines

TINY: dict[str, Any] = {
    "name": "tiny",
    "isolated": "3",
    "packages": [{"id": 0, "cores": ["0,4", "1,5", "2,6", "3,7"]}],
    "nodes": [
        {"id": 0, "cpus": "0,1,4,5", "memory": "8Gi"},
        {"id": 1, "cpus": "2,3,6,7", "memory": "8Gi"},
        {"id": 2, "memory": "32Gi", "tier": "pmem"},
    ],
    "distances": [[10, 21, 17], [21, 10, 28], [17, 28, 10]],
}


def _machine(doc: dict[str, Any]) -> Machine:
    return machine_spec.to_machine(machine_spec.parse_spec(doc))


def _shape(m: Machine) -> tuple[object, ...]:
    """What a description must keep: cores, packages, dies, nodes, tiers, distances, CPU sets."""
    cpus = tuple(
        (c.id, c.package, c.die, c.node, tuple(sorted(c.threads)))
        for c in sorted(m.cpus.values(), key=lambda c: c.id)
    )
    nodes = tuple(
        (n.id, n.cpus, n.memory, n.tier, tuple(sorted(n.distances.items())), n.hugepages)
        for n in sorted(m.nodes.values(), key=lambda n: n.id)
    )
    return cpus, nodes, m.cores, m.isolated, m.offline


def test_tiny_machine_has_what_the_description_says() -> None:
    m = _machine(TINY)
    assert m.cores == tuple(frozenset(c) for c in ({0, 4}, {1, 5}, {2, 6}, {3, 7}))
    assert m.cpu_nodes == (0, 1)
    assert m.memory_only_nodes == (2,)
    assert m.nodes[2].tier is MemoryTier.PMEM
    assert m.nodes[0].memory == 8 << 30
    assert m.distance(0, 2) == 17
    assert m.isolated == frozenset({3})
    assert m.cpus[6].node == 1 and m.cpus[6].threads == frozenset({2, 6})


def _with(path: str, value: object) -> dict[str, Any]:
    doc = json.loads(json.dumps(TINY))
    *parents, last = path.split(".")
    target: Any = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    if value is None:
        del target[int(last) if last.isdigit() else last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("nodes.0.cpus", "0,1,2", "nodes[id=1].cpus: CPU 2 is also in node 0"),
        ("nodes.2.tier", None, "nodes[id=2].tier: required for a node without CPUs"),
        ("nodes.2.tier", "flash", "nodes.2.tier"),
        ("nodes.0.memory", "lots", "nodes.0.memory"),
        ("isolated", "9", "isolated: CPUs 9 are in no package's cores"),
        ("offline", "2", "offline: CPUs 2 are listed as online cores"),
        ("distances", [[10, 21], [21, 10]], "distances: need a 3x3 matrix"),
        ("packages.0.cores.1", "1-x", "packages.0.cores.1"),
        ("format", 7, "format: version 7 is not supported"),
        ("surprise", 1, "surprise: unknown key; allowed: format, name,"),
        ("name", None, "name: required key is missing"),
        ("packages.0.dies", [{"cores": ["0"]}], "give exactly one of 'dies' or 'cores'"),
        (
            "packages.0",
            {"id": 0, "dies": [{"cores": ["0,4", "1,5", "2,6", "3,7"], "core_ids": [0, 1]}]},
            "dies[id=0].core_ids: need one id per core",
        ),
        (
            "packages.0",
            {"id": 0, "dies": [{"cores": ["0,4", "1,5", "2,6", "3,7"], "clusters": {1: "0-3"}}]},
            "dies[id=0].clusters: CPU 4 is in no cluster",
        ),
        (
            "packages.0",
            {"id": 0, "dies": [{"cores": ["0-7"], "clusters": {1: "0-3", 2: "3-7"}}]},
            "clusters: CPU 3 is in 1 and 2",
        ),
        (
            "packages.0",
            {"id": 0, "dies": [{"cores": ["0-7"], "clusters": {1: "0-8"}}]},
            "dies[id=0].clusters: CPUs 8 are not in this die",
        ),
        ("caches", {"l3": ["0-3", "4-6"]}, "caches.l3: CPUs 7 must be in exactly one group"),
        ("caches", {"l2": ["0-7", "7"]}, "caches.l2: CPU 7 is in 0 and 1"),
        ("nodes.2.tier_source", "guess", "nodes.2.tier_source"),
        ("warnings", "x", "warnings"),
    ],
)
def test_bad_descriptions_name_the_key(path: str, value: object, message: str) -> None:
    with pytest.raises(MachineSpecError) as err:
        _machine(_with(path, value))
    assert message in str(err.value)


def test_cpu_in_two_cores_is_refused() -> None:
    doc = _with("packages.0.cores", ["0,4", "1,5", "2,6", "3,7", "4"])
    with pytest.raises(MachineSpecError, match="CPU 4 appears in more than one core"):
        _machine(doc)


def test_yaml_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: tiny\npackages: [{id: 0, cores: ['0,1']}]\n"
        "nodes: [{id: 0, cpus: '0-1', memory: 1Gi}]\ndistances: [[10]]\n"
    )
    m = machine_spec.to_machine(machine_spec.load_spec(path))
    assert m.cores == (frozenset({0, 1}),)


@pytest.mark.parametrize("text", ["- a list\n", "name: [unclosed\n"])
def test_unreadable_file_names_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(MachineSpecError, match=str(path)):
        machine_spec.load_spec(path)


@settings(max_examples=25, deadline=None)
@given(
    sockets=st.integers(1, 3),
    dies=st.integers(1, 2),
    cores=st.integers(1, 4),
    threads=st.integers(1, 2),
    pmem=st.booleans(),
)
def test_round_trip_keeps_the_shape(
    sockets: int, dies: int, cores: int, threads: int, pmem: bool
) -> None:
    per_die = cores * threads
    total = sockets * dies * per_die
    packages = []
    nodes = []
    n = 0
    for s in range(sockets):
        die_docs = []
        for d in range(dies):
            base = (s * dies + d) * cores
            core_lists = [
                [base + c + t * sockets * dies * cores for t in range(threads)]
                for c in range(cores)
            ]
            die_docs.append({"id": d, "cores": core_lists})
            nodes.append(
                {
                    "id": n,
                    "cpus": sorted(x for cl in core_lists for x in cl),
                    "memory": (n + 1) << 30,
                }
            )
            n += 1
        packages.append({"id": s, "dies": die_docs})
    if pmem:
        nodes.append({"id": n, "memory": "64Gi", "tier": "pmem"})
    count = len(nodes)
    distances = [[10 if i == j else 20 + i + j for j in range(count)] for i in range(count)]
    doc = {
        "name": "gen",
        "packages": packages,
        "nodes": nodes,
        "distances": distances,
        "isolated": [0] if total > 1 else [],
    }
    m = _machine(doc)
    again = _machine(machine_spec.from_machine(m, name="gen", description="", source="test"))
    assert _shape(again) == _shape(m)
    assert len(m.cpus) == total


def test_optional_keys_set_what_is_otherwise_derived() -> None:
    doc = _with(
        "packages.0",
        {
            "id": 0,
            "dies": [
                {
                    "id": 0,
                    "cores": ["0,4", "1,5", "2,6", "3,7"],
                    "core_ids": [0, 8, 16, 24],
                    "clusters": {"7": "0-1,4-5", "9": "2-3,6-7"},
                }
            ],
        },
    )
    doc["caches"] = {"l2": ["0-1,4-5", "2-3,6-7"], "l3": ["0-7"]}
    doc["nodes"][2]["tier_source"] = "hmat"
    doc["warnings"] = ["proc/cmdline: missing"]
    m = _machine(doc)
    assert (m.cpus[5].core, m.cpus[5].cluster, m.cpus[6].cluster) == (8, 7, 9)
    assert m.cpus[5].l2 == frozenset({0, 1, 4, 5}) and m.cpus[5].l3 == frozenset(range(8))
    assert m.nodes[2].tier_source == "hmat" and m.nodes[0].tier_source == "cpu"
    assert m.warnings == ("proc/cmdline: missing",)
    again = machine_spec.from_machine(m, name="tiny", description="", source="")
    assert _machine(again) == m


@pytest.mark.parametrize("name", machines.ALL_MACHINES)
def test_every_real_machine_survives_a_round_trip(name: str) -> None:
    """Nothing the topology reader finds is lost in the description (clusters, caches...)."""
    m = machines.load(name)
    doc = machine_spec.from_machine(m, name=name, description="", source="")
    assert _machine(json.loads(machine_spec.dumps(doc))) == m


def test_bundled_names() -> None:
    assert {"server", "4-socket", "desktop"} <= set(machine_spec.bundled_names())


def test_unknown_bundled_machine_lists_the_known_ones() -> None:
    with pytest.raises(MachineSpecError, match=r"bundled: .*server"):
        machine_spec.load_bundled("mainframe")


def test_server_is_the_showcase() -> None:
    _, m = machine_spec.load_bundled("server")
    assert len(m.cpus) == 112 and len(m.packages) == 2
    assert m.cpu_nodes == (0, 1, 2, 3) and m.memory_only_nodes == (4, 5)
    assert {m.nodes[4].tier, m.nodes[5].tier} == {MemoryTier.PMEM}
    assert m.isolated == frozenset({4, 5, 6, 7, 60, 61, 62, 63})
