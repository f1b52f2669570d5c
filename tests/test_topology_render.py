"""The machine as JSON (checked against its schema) and as a tree; the `topology` command."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from nri_topology import cli
from nri_topology.simulate import machine_spec
from nri_topology.topology import cpuset
from nri_topology.topology.render import JSON_SCHEMA, machine_json, machine_text
from nri_topology.topology.sysfs import ENV_SYSFS, read_machine
from tests.machines import (
    ALL_MACHINES,
    MemoryOnlyNode,
    SyntheticSpec,
    load,
    write_machine_sysfs,
    write_sysfs,
)

VALIDATOR = jsonschema.Draft202012Validator(JSON_SCHEMA)


def test_schema_is_valid() -> None:
    jsonschema.Draft202012Validator.check_schema(JSON_SCHEMA)


@pytest.mark.parametrize("name", ALL_MACHINES)
@pytest.mark.parametrize("groups", [False, True])
def test_json_matches_schema_and_machine(name: str, groups: bool) -> None:
    m = load(name)
    doc = json.loads(json.dumps(machine_json(m, windows_groups=groups)))
    VALIDATOR.validate(doc)
    assert doc["counts"]["cpus"] == len(m.cpus)
    assert doc["counts"]["cores"] == len(m.cores)
    assert doc["counts"]["sockets"] == len(m.packages) == len(doc["sockets"])
    assert doc["counts"]["numa_nodes"] == len(m.nodes) == len(doc["nodes"])
    assert sum(len(s["dies"]) for s in doc["sockets"]) == doc["counts"]["dies"]
    for node in doc["nodes"]:
        n = m.nodes[node["id"]]
        assert cpuset.parse(node["cpus"]) == n.cpus
        assert {int(k): v for k, v in node["distances"].items()} == dict(n.distances)
        assert (node["tier"], node["tier_source"], node["memory"]) == (
            n.tier.value,
            n.tier_source,
            n.memory,
        )
    assert sum(doc["memory"].values()) == sum(n.memory for n in m.nodes.values())
    assert ("windows_groups" in doc) is groups


def test_server_json_details() -> None:
    doc = machine_json(load("server"), windows_groups=True)
    assert doc["isolated"] == "4-7,60-63" and doc["offline"] == ""
    assert doc["counts"] | {"isolated": 8} == {
        "cpus": 112, "cores": 56, "sockets": 2, "dies": 2, "numa_nodes": 6, "cpu_nodes": 4,
        "memory_only_nodes": 2, "isolated": 8, "offline": 0,
    }  # fmt: skip
    node4 = next(n for n in doc["nodes"] if n["id"] == 4)
    assert (node4["tier"], node4["cpus"], node4["distances"]["0"]) == ("pmem", "", 17)
    assert node4["hugepages"] == {"2048": 0, "1048576": 0}
    assert doc["sockets"][0]["dies"][0]["nodes"] == "0,2"
    assert doc["windows_groups"]["machine"] == ["0:0xffffffffffffffff", "1:0x0000ffffffffffff"]


def test_server_tree() -> None:
    text = machine_text(load("server"))
    assert text.startswith("machine: 112 CPUs, 56 cores (2 threads per core), 2 sockets")
    assert "├─ socket 0: CPUs " in text and "└─ socket 1: CPUs " in text
    assert "NUMA node 0: CPUs 0,4,8," in text
    assert "[0,56] [4,60]" in text
    assert "node 4: 124.0 GiB PMEM (heuristic), nearest CPU node 0 (distance 17)" in text
    assert "     0  10  21  11  21  17  28" in text
    assert "isolated CPUs: 4-7,60-63" in text and "offline CPUs: -" in text
    assert "warnings" not in text


def test_tree_shows_dies_l3_groups_and_unplaced_cpus() -> None:
    assert "die 1: CPUs 8-15" in machine_text(load("cpuid1f"))
    assert "NUMA nodes without online CPUs or memory: 4\n" in machine_text(load("meminitiators"))
    assert "L3 groups: 0-31 | 32-63" in machine_text(load("arm128"))
    text = machine_text(load("offline-cpu0"), windows_groups=True)
    assert "no NUMA node: CPUs 0:0x0000000000155550" in text
    assert "offline CPUs: 0-3,21-23" in text
    assert "\n  - devices/system/node/node*/cpulist: no online node lists" in text


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["topology", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_command_tree_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sys_root = write_machine_sysfs(tmp_path, load("desktop"))
    code, out, err = _run(capsys, "--sysfs", str(sys_root))
    assert (code, err) == (0, "")
    assert out.startswith("machine: 20 CPUs, 10 cores")
    code, out, _ = _run(capsys, "--sysfs", str(sys_root), "--json", "--windows-groups")
    doc = json.loads(out)
    VALIDATOR.validate(doc)
    assert code == 0 and doc["windows_groups"]["nodes"] == {"0": ["0:0x00000000000fffff"]}


def test_command_reads_proc_cmdline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = write_sysfs(tmp_path, SyntheticSpec(cores=4, threads=1))
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cmdline").write_text("isolcpus=domain,2-3\n")
    code, out, _ = _run(capsys, "--sysfs", str(root), "--proc", str(proc), "--json")
    assert code == 0 and json.loads(out)["isolated"] == "2-3"


def test_command_converts_a_sysfs_tree_to_a_machine_description(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What `simulate --machine FILE` loads back is exactly the machine the reader saw."""
    spec = SyntheticSpec(
        sockets=2, cores=2, isolated="1", offline="6", memory_only=(MemoryOnlyNode(8 << 30, 0),)
    )
    root = write_sysfs(tmp_path, spec)
    code, out, err = _run(capsys, "--sysfs", str(root), "--machine-json", "--name", "lab")
    assert (code, err) == (0, "")
    path = tmp_path / "lab.json"
    path.write_text(out)
    spec_doc = machine_spec.load_spec(path)
    assert spec_doc.name == "lab" and spec_doc.source == str(root)
    assert machine_spec.to_machine(spec_doc) == read_machine(root)


def test_command_uses_env_root(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_SYSFS, str(write_sysfs(tmp_path, SyntheticSpec(cores=3, threads=1))))
    code, out, _ = _run(capsys, "--json")
    assert code == 0 and json.loads(out)["cpus"] == "0-2"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (None, "not a directory"),
        ("devices/system/node/node0/distance", "node0/distance: 1 entries for 2 nodes"),
    ],
)
def test_command_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, damage: str | None, message: str
) -> None:
    root = tmp_path / "empty"
    if damage is not None:
        root = write_sysfs(tmp_path, SyntheticSpec(sockets=2))
        (root / damage).write_text("10\n")
    code, out, err = _run(capsys, "--sysfs", str(root))
    assert (code, out) == (2, "")
    assert err.startswith("nri-topology topology: ") and message in err
