"""`nri-topology simulate` end to end: the bundled default, the JSON schema and its invariants,
the pictures, other machines, and exit codes for failed steps and bad input."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nri_topology.cli import main
from nri_topology.policy.policy import Policy
from nri_topology.simulate.runner import Runner
from nri_topology.simulate.session import load_inputs
from nri_topology.topology import cpuset
from tests import machines

SVG = "{http://www.w3.org/2000/svg}"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def default_doc() -> dict[str, Any]:
    """The default simulation's JSON, with traces, computed once for the schema tests."""
    from nri_topology.simulate import render_json
    from nri_topology.simulate.session import simulate

    return json.loads(render_json.render(simulate(load_inputs()), explain=True))


def test_no_arguments_runs_the_bundled_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys)
    assert code == 0, err
    assert out.startswith("Machine server: 2 socket(s), 112 CPUs")
    assert "[1] create kube-system/coredns" in out
    assert "failed as expected" in out
    assert out.rstrip().endswith("All 16 steps went as expected.")


def test_tree_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--tree", "--explain")
    assert code == 0
    assert "Pools at the end:" in out
    tree = out[out.index("Pools at the end:") :]
    assert "root  cpus 0-111" in tree and "`-- socket #1" in tree
    assert "* kube-system/coredns/coredns [reserved]" in tree
    # CPU amounts in the tree in one unit, whole or decimal CPUs, never milli-CPU beside CPUs
    assert re.search(r"CPU \d+(\.\d+)? of \d+(\.\d+)? free", tree)
    assert not re.search(r"\d+m[/ ]", tree)
    # every component of the sort key has a column of its own, named
    headers = [line.split() for line in out.splitlines() if "VERDICT" in line]
    assert all(h[:2] == ["POOL", "VERDICT"] for h in headers)
    assert any("AFFINITY" in h and "INDEX" in h for h in headers)
    assert "SORT KEY" not in out
    assert "chosen" in out


STEP_KEYS = {
    "step",
    "action",
    "target",
    "note",
    "expect_error",
    "ok",
    "as_expected",
    "containers",
    "updates",
    "released",
    "errors",
}
CONTAINER_KEYS = {
    "id",
    "namespace",
    "pod",
    "container",
    "qos",
    "pool",
    "kind",
    "cpus",
    "mems",
    "exclusive",
    "cpu_shares",
    "memory_tiers",
    "hugepages",
}
PLACED_KEYS = CONTAINER_KEYS | {"reason", "memory_relaxed", "cold_start", "trace"}
POOL_KEYS = {
    "name",
    "kind",
    "depth",
    "parent",
    "cpus",
    "shared",
    "isolated",
    "reserved",
    "capacity_milli",
    "assigned_milli",
    "free_milli",
    "containers",
    "memory",
    "hugepages",
}


def test_json_has_the_documented_keys(default_doc: dict[str, Any]) -> None:
    doc = default_doc
    assert doc["schema"] == "nri-topology/simulate/v1"
    assert set(doc) == {"schema", "machine", "workload", "steps", "final", "summary"}
    assert set(doc["machine"]) == {"name", "cpus", "isolated", "offline", "efficiency", "nodes"}
    assert doc["machine"]["cpus"] == "0-111"
    assert set(doc["summary"]) == {"steps", "failed", "unexpected"}
    assert doc["summary"] == {"steps": 16, "failed": 1, "unexpected": []}
    for step in doc["steps"]:
        assert set(step) == STEP_KEYS
        for c in step["containers"]:
            assert set(c) == PLACED_KEYS
            for line in c["trace"]:
                assert set(line) == {"pool", "key", "criteria", "verdict"}
                assert len(line["criteria"]) == (len(line["key"]) + 2 if line["key"] else 0)
        for u in step["updates"]:
            assert set(u) == {"id", "cpus", "mems"}
        for e in step["errors"]:
            assert set(e) == {"container", "message", "internal"}
    for c in doc["final"]["containers"]:
        assert set(c) == CONTAINER_KEYS
    for p in doc["final"]["pools"]:
        assert set(p) == POOL_KEYS
        for m in p["memory"].values():
            assert set(m) == {"nodes", "capacity", "assigned", "free"}


def _check(state: dict[str, dict[str, Any]], all_cpus: frozenset[int], where: str) -> None:
    """No CPU is exclusive twice, and no one else runs on a container's exclusive CPUs."""
    owner: dict[int, str] = {}
    for cid, c in state.items():
        excl = cpuset.parse(c["exclusive"])
        assert excl <= all_cpus, where
        if c["cpus"] is not None:
            assert excl <= cpuset.parse(c["cpus"]), f"{where}: {cid} not pinned to its own CPUs"
        for cpu in excl:
            assert cpu not in owner, f"{where}: CPU {cpu} exclusive to {owner[cpu]} and {cid}"
            owner[cpu] = cid
    for cid, c in state.items():
        if c["cpus"] is None:
            continue
        for cpu in cpuset.parse(c["cpus"]):
            assert owner.get(cpu, cid) == cid, f"{where}: {cid} runs on {owner[cpu]}'s CPU {cpu}"


def test_replaying_the_steps_keeps_the_invariants(default_doc: dict[str, Any]) -> None:
    """Apply each step's placements, updates and releases; check after every step; end equal."""
    all_cpus = cpuset.parse(default_doc["machine"]["cpus"])
    state: dict[str, dict[str, Any]] = {}
    kinds: set[str] = set()
    for step in default_doc["steps"]:
        assert step["as_expected"], step
        assert step["ok"] == (not step["errors"])
        for c in step["containers"]:
            state[c["id"]] = {k: c[k] for k in CONTAINER_KEYS}
            kinds.add(c["kind"])
        for cid in step["released"]:
            del state[cid]
        for u in step["updates"]:
            assert u["id"] in state, f"step {step['step']}: update for unknown {u['id']}"
            assert u["cpus"] is not None or u["mems"] is not None
            for key in ("cpus", "mems"):
                if u[key] is not None:
                    state[u["id"]][key] = u[key]
        _check(state, all_cpus, f"step {step['step']}")
    final = {c["id"]: c for c in default_doc["final"]["containers"]}
    for c in final.values():
        c["cpu_shares"] = state[c["id"]]["cpu_shares"]  # shares changes are not part of updates
    assert state == final
    assert {"reserved", "shared", "exclusive", "isolated"} <= kinds


def test_the_story_happens(default_doc: dict[str, Any]) -> None:
    """The bundled default shows what the README promises."""
    placed = {c["id"]: c for s in default_doc["steps"] for c in s["containers"]}
    assert placed["kube-system/coredns/coredns"]["kind"] == "reserved"
    assert placed["default/batch/worker"]["kind"] == "shared"
    isolated = cpuset.parse(default_doc["machine"]["isolated"])
    trader = placed["default/trader/engine"]
    assert cpuset.parse(trader["exclusive"]) <= isolated and trader["exclusive"]
    assert placed["default/analytics/spark"]["mems"] in ("4", "5")  # PMEM nodes only
    render = placed["default/render/blender"]
    assert len(cpuset.parse(render["exclusive"])) == 40
    assert render["pool"].startswith("socket")
    assert len(cpuset.parse(render["mems"])) == 2  # the socket's two closest DRAM nodes
    by_number = {s["step"]: s for s in default_doc["steps"]}
    failed = [s for s in default_doc["steps"] if s["errors"]]
    assert [s["expect_error"] for s in failed] == [True]
    removals = [s for s in default_doc["steps"] if s["action"] == "remove" and s["updates"]]
    assert removals, "a removal should give CPUs back to shared containers"
    assert by_number[1]["containers"][0]["pool"] == "root"
    cache = placed["default/cache/redis"]
    assert cache["mems"] in ("4", "5")  # cold start: PMEM only at first
    (wait,) = [s for s in default_doc["steps"] if s["action"] == "wait"]
    (widened,) = wait["updates"]
    assert widened["id"] == "default/cache/redis"
    assert cpuset.parse(widened["mems"]) > cpuset.parse(cache["mems"])


def test_runner_picture_equals_the_policy_state() -> None:
    """What the simulated runtime applied (decisions + updates) is what the policy holds."""
    inputs = load_inputs()
    policy = Policy(inputs.machine, inputs.options)
    runner = Runner(policy, inputs.machine)
    runner.run(inputs.workload)
    held = policy.assignments()
    assert set(held) == set(runner.assignments)
    for cid, a in runner.assignments.items():
        assert (a.pool, a.kind, a.cpus, a.mems, a.exclusive) == (
            held[cid].pool,
            held[cid].kind,
            held[cid].cpus,
            held[cid].mems,
            held[cid].exclusive,
        )


def test_json_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = _run(capsys, "--json", "--explain")
    _, second, _ = _run(capsys, "--json", "--explain")
    assert first == second
    assert "trace" in json.loads(first)["steps"][0]["containers"][0]
    _, plain, _ = _run(capsys, "--json")
    assert "trace" not in json.loads(plain)["steps"][0]["containers"][0]


def test_svg_is_well_formed_with_a_cell_per_cpu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pools.svg"
    code, out, _ = _run(capsys, "--svg", str(path))
    assert code == 0 and f"picture written to {path}" in out
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    cells = [t for t in titles if t.startswith("CPU ")]
    assert len(cells) == 112
    assert "CPU 0: reserved" in cells
    # the latency pod holds kernel-isolated CPUs (4-7,60-63 on this machine)
    trader = [t for t in cells if ": default/trader/engine" in t]
    assert trader
    assert {int(t.split()[1].rstrip(":")) for t in trader} <= {4, 5, 6, 7, 60, 61, 62, 63}
    legend = {t.text for t in root.iter(f"{SVG}text")}
    assert "default/web/nginx" in legend


@pytest.mark.parametrize("name", ["4-socket", "desktop"])
def test_other_bundled_machines(capsys: pytest.CaptureFixture[str], write: Any, name: str) -> None:
    workload = textwrap.dedent(
        """
        steps:
          - create: {pod: b, containers: [{name: c}]}
          - create: {pod: a, containers: [{name: c, limits: {cpu: 2, memory: 1Gi}}]}
          - remove: {pod: a}
        """
    )
    code, out, err = _run(capsys, "--machine", name, "--json", "--workload", write(workload))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["machine"]["name"] == name
    assert doc["steps"][1]["containers"][0]["kind"] == "exclusive"
    if name == "desktop":  # one pool: the shared container gives the CPUs up and gets them back
        assert [u["id"] for u in doc["steps"][1]["updates"]] == ["default/b/c"]
        assert doc["steps"][2]["updates"][0]["cpus"] == "0-19"


@pytest.mark.parametrize("name", ["server", "4-socket", "desktop"])
def test_each_bundled_machine_runs_its_demo_as_expected(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, out, err = _run(capsys, "--machine", name)
    assert code == 0, out + err
    assert out.startswith(f"Machine {name}:")
    assert "went as expected" in out.splitlines()[-1]


@pytest.fixture
def write(tmp_path: Path) -> Any:
    """Write text to a new file in the test's folder and return its path as a string."""
    count = iter(range(1000))

    def _write(text: str) -> str:
        path = tmp_path / f"input-{next(count)}.yaml"
        path.write_text(text)
        return str(path)

    return _write


SMALL = """
name: small
steps:
  - create: {pod: sys, namespace: kube-system, containers: [{name: c}]}
  - create: {pod: g, containers: [{name: c, limits: {cpu: 2, memory: 256Mi}}]}
  - create: {pod: s, containers: [{name: c, requests: {cpu: 250m}}]}
  - remove: {pod: g}
"""


def test_sysfs_dump(capsys: pytest.CaptureFixture[str], write: Any) -> None:
    """A real extracted dump: the folder holding sys/ is accepted, and so is sys/ itself."""
    archive, inner = machines.MACHINES["amd16"]
    root = machines.extract(archive) / inner
    for where in (root, root / "sys"):
        code, out, err = _run(capsys, "--sysfs", str(where), "--workload", write(SMALL), "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["machine"]["cpus"] == "0-15"
        assert len(doc["machine"]["nodes"]) == 8
        assert doc["steps"][1]["containers"][0]["kind"] == "exclusive"


def test_machine_description_file(capsys: pytest.CaptureFixture[str], write: Any) -> None:
    desc = """
    name: tiny
    packages: [{id: 0, cores: ["0,4", "1,5", "2,6", "3,7"]}]
    nodes: [{id: 0, cpus: "0-7", memory: 8Gi}]
    distances: [[10]]
    """
    code, out, err = _run(
        capsys, "--machine", write(textwrap.dedent(desc)), "--workload", write(SMALL), "--tree"
    )
    assert code == 0, err
    assert out.startswith("Machine tiny: 1 socket(s), 8 CPUs (4 cores x 2 threads)")


@pytest.mark.parametrize(
    ("steps", "code", "marker"),
    [
        # An unexpected failure: exit 1, shown, and the next step still runs.
        (
            "- create: {pod: x, containers: [{name: c, limits: {cpu: 500, memory: 1Gi}}]}\n"
            "- create: {pod: y, containers: [{name: c}]}\n",
            1,
            "[FAILED]",
        ),
        # A step expected to fail that succeeds is not as expected either.
        (
            "- create: {pod: x, containers: [{name: c}]}\n  expect_error: true\n",
            1,
            "UNEXPECTED: should have failed",
        ),
        (
            "- create: {pod: x, containers: [{name: c, limits: {cpu: 500, memory: 1Gi}}]}\n"
            "  expect_error: true\n",
            0,
            "failed as expected",
        ),
    ],
)
def test_exit_code_follows_expectations(
    capsys: pytest.CaptureFixture[str], write: Any, steps: str, code: int, marker: str
) -> None:
    got, out, _ = _run(capsys, "--machine", "desktop", "--workload", write("steps:\n" + steps))
    assert got == code
    assert marker in out
    if "pod: y" in steps:
        assert "default/y/c" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "no-such-workload"], "no such file and no bundled workload"),
        (["--machine", "mainframe"], "no bundled machine 'mainframe'"),
        (["--sysfs", "/nonexistent-sysfs"], "--sysfs /nonexistent-sysfs"),
        (
            ["--workload", "@BAD"],
            "step 1: create.containers[0].limits.cpu: 'lots' is not a Kubernetes quantity",
        ),
        (["--config", "@CONFIG"], "policy.reserved_resources.cpu"),
        (["--workload", "/nonexistent/w.yaml"], "/nonexistent/w.yaml"),
        (["--until", "17"], "--until 17: the workload has steps 1 to 16"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], write: Any, args: list[str], message: str
) -> None:
    bad = "steps:\n- create: {pod: x, containers: [{name: c, limits: {cpu: lots}}]}\n"
    config = "policy:\n  reserved_resources: {cpu: lots}\n"
    args = [write(bad) if a == "@BAD" else write(config) if a == "@CONFIG" else a for a in args]
    code, out, err = _run(capsys, *args)
    assert code == 2
    assert out == ""
    assert err.startswith("nri-topology simulate: ") and message in err


def test_svg_to_an_unwritable_place(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, "--svg", str(tmp_path / "missing" / "x.svg"))
    assert code == 2 and "cannot write" in err


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--list")
    assert code == 0
    assert "bundled machines: 4-socket, desktop, server" in out
    assert "bundled workloads: default, desktop" in out


def test_documented_examples_are_valid(capsys: pytest.CaptureFixture[str], write: Any) -> None:
    """The workload and machine examples in docs/simulate.md load and run."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "simulate.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    assert len(blocks) == 2
    workload, machine = (write(b) for b in blocks)
    code, out, err = _run(capsys, "--machine", machine, "--workload", workload)
    assert code == 0, err
    assert "Machine tiny:" in out and "failed as expected" in out
    code, _, err = _run(capsys, "--workload", workload)  # its own machine: server
    assert code == 0, err


COLD = """
steps:
  - create:
      pod: a
      annotations: {cold-start.resource-policy.nri.io/pod: "duration: 60s"}
      containers: [{name: c, limits: {cpu: 1, memory: 1Gi}}]
  - create:
      pod: b
      annotations: {cold-start.resource-policy.nri.io/pod: "duration: 60s"}
      containers: [{name: c, limits: {cpu: 1, memory: 1Gi}}]
  - wait: 30s
  - remove: {pod: b}
  - wait: 30s
  - wait: 1h
"""


def test_cold_starts_end_when_their_time_has_come(
    capsys: pytest.CaptureFixture[str], write: Any
) -> None:
    """Only a wait that reaches the deadline widens memory, once; removed containers never."""
    code, out, err = _run(capsys, "--workload", write(COLD), "--json")
    assert code == 0, err
    steps = json.loads(out)["steps"]
    start = steps[0]["containers"][0]
    assert start["cold_start"]["delay_ns"] == 60 * 10**9
    assert [u["id"] for u in steps[2]["updates"]] == []
    assert [u["id"] for u in steps[4]["updates"]] == ["default/a/c"]
    assert steps[4]["updates"][0]["mems"] == start["cold_start"]["then_mems"]
    assert steps[5]["updates"] == []


def test_removing_what_never_started(capsys: pytest.CaptureFixture[str], write: Any) -> None:
    """A pod whose creation failed can still be removed later; nothing is released."""
    steps = """
    steps:
      - expect_error: true
        create: {pod: x, containers: [{name: c, limits: {cpu: 500, memory: 1Gi}}]}
      - remove: {pod: x, container: c}
      - create: {pod: x2, containers: [{name: c, limits: {cpu: 500, memory: 1Gi}}, {name: d}]}
        expect_error: true
      - remove: {pod: x2}
    """
    code, out, err = _run(
        capsys, "--machine", "desktop", "--workload", write(textwrap.dedent(steps)), "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert [s["released"] for s in doc["steps"]] == [[], [], [], ["default/x2/d"]]
    assert doc["final"]["containers"] == []


def test_config_options_reach_the_policy(capsys: pytest.CaptureFixture[str], write: Any) -> None:
    """With no reserved namespaces, kube-system pods are placed like any other."""
    config = write("policy:\n  reserved_namespaces: []\n")
    code, out, err = _run(capsys, "--config", config, "--json")
    assert code == 0, err
    first = json.loads(out)["steps"][0]["containers"][0]
    assert first["id"] == "kube-system/coredns/coredns" and first["kind"] == "shared"


def test_until_stops_after_a_step(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The picture and the final state show the node after step 10: the render job is there."""
    svg = tmp_path / "at10.svg"
    code, out, err = _run(capsys, "--until", "10", "--json", "--svg", str(svg))
    assert code == 0, err
    doc = json.loads(out)
    assert [s["step"] for s in doc["steps"]] == list(range(1, 11))
    assert "default/render/blender" in {c["id"] for c in doc["final"]["containers"]}
    texts = {t.text for t in ET.parse(svg).getroot().iter(f"{SVG}text")}
    assert any(t and "40 CPUs of its own" in t for t in texts)


def test_bundled_devices_workload_shows_hints(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--workload", "devices", "--explain")
    assert code == 0
    assert "default/train/main: exclusive CPUs in socket #3; devices on NUMA 3" in out
    assert "strict topology hints: CPUs of NUMA 0 are outside the devices' NUMA 3" in out
