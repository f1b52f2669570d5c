"""The benchmark command works end to end (tiny sizes), and its target table tells misses apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import run, soak
from benchmarks.quality import Baseline, Ours, run_trace
from benchmarks.workload import Event, Spec, churn
from nri_topology.policy.types import QoS
from tests import machines


def test_quick_run_writes_json_and_markdown(tmp_path: Path) -> None:
    assert run.main(["--quick", "--out", str(tmp_path), "--machines", "server", "4-socket"]) == 0
    out = json.loads((tmp_path / "latest.json").read_text())
    assert {r["machine"] for r in out["decision_latency"]} == {"server", "4-socket"}
    assert out["synchronize"]["with_checkpoint_moved"] == 0
    assert out["synchronize"]["synchronize_only_moved"] == 0
    assert 0 < out["rss"]["after_startup_mb"] <= out["rss"]["with_containers_mb"] + 1
    assert out["fuzz"]["crashes"] == 0
    assert out["soak"]["invariant_violations"] == 0
    assert set(out["quality"]) == {"server", "4-socket"}
    md = (tmp_path / "latest.md").read_text()
    for heading in ("Targets", "decision latency", "round trip", "Synchronize", "Resident"):
        assert heading in md


def _results(p99: float, rss: float, local: float, ratio: float = 1.2, x2: float = 0.5) -> dict:
    quality = {
        "placer": "x",
        "local_share": local,
        "rejected": 0,
        "spanning": 2,
        "spanning_minimal_share": 1.0,
    }
    return {
        "decision_latency": [{"cpus": 256, "live": 1000, "p99_ms": p99}],
        "roundtrip": [
            {"machine": "m", "live_containers": 1, "probe": "mix", "p99_above_floor_ms": 0.5},
            {
                "machine": "4-socket",
                "live_containers": 0,
                "probe": "mix",
                "p99_above_floor_ms": 0.5,
                "p50_ratio": ratio,
            },
            {
                "machine": "4-socket",
                "live_containers": 1000,
                "probe": "exclusive-2",
                "p99_above_floor_ms": 0.5,
                "policy": {"p50_ms": x2, "p99_ms": 4 * x2},
            },
        ],
        "rss": {"after_startup_mb": rss, "with_containers_mb": rss, "containers": 1},
        "quality": {
            "m": {"nri-topology": quality, "kubelet-static": {**quality, "local_share": 0.5}}
        },
        "fuzz": {"crashes": 0},
        "soak": {"invariant_violations": 0},
    }


@pytest.mark.parametrize(
    ("p99", "rss", "local", "ratio", "x2", "missed"),
    [
        (0.5, 40.0, 0.9, 1.2, 0.5, []),
        (1.5, 40.0, 0.9, 1.2, 0.5, ["decision p99"]),
        (0.5, 61.0, 0.9, 1.2, 0.5, ["RSS after startup", "RSS with"]),
        (0.5, 40.0, 0.4, 1.2, 0.5, ["quality m: local share"]),
        (0.5, 40.0, 0.9, 3.0, 0.5, ["round trip p50 / no-op's"]),
        (0.5, 40.0, 0.9, 1.2, 0.55, ["2-CPU exclusive round trip, 4-socket, 1000 live: p99"]),
        (0.5, 40.0, 0.9, 1.2, 0.9, ["2-CPU exclusive", "2-CPU exclusive"]),
    ],
)
def test_targets_flag_exactly_the_misses(
    p99: float, rss: float, local: float, ratio: float, x2: float, missed
) -> None:
    rows = run.targets_met(_results(p99, rss, local, ratio, x2))
    misses = [r["target"] for r in rows if not r["met"]]
    assert len(misses) == len(missed)
    for prefix, target in zip(missed, misses, strict=True):
        assert target.startswith(prefix)


def test_traces_are_seeded_and_keep_within_the_budget() -> None:
    m = machines.load("server")
    first, second = list(churn(m, 5, 300)), list(churn(m, 5, 300))
    assert first == second
    live: dict[str, Spec] = {}
    for ev in first:
        if ev.spec is None:
            live.pop(ev.container_id)
        else:
            live[ev.container_id] = ev.spec
        assert sum(s.cpu for s in live.values()) <= 0.85 * (len(m.cpus) - 1) * 1000


def test_both_placers_are_judged_alike() -> None:
    """A trace of one exclusive container that fits a node: local for both, nothing spans."""
    m = machines.load("4-socket")
    trace = [Event("a", Spec(QoS.GUARANTEED, cpu=4000, memory=1 << 30)), Event("a", None)]
    for placer in (Ours(m), Baseline(m)):
        q = run_trace(m, placer, trace).summary()
        assert (q["admitted"], q["local"], q["spanning"], q["rejected"]) == (1, 1, 0, 0)


def test_shared_containers_of_the_baseline_span_every_node() -> None:
    m = machines.load("4-socket")
    trace = [Event("b", Spec(QoS.BURSTABLE, cpu=500, memory=1 << 20))]
    q = run_trace(m, Baseline(m), trace).summary()
    assert (q["local"], q["spanning"], q["spanning_minimal_share"]) == (0, 1, 1.0)


def test_annotation_benchmark_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_annotations

    assert bench_annotations.main(["--live", "30", "--samples", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["live"] == 30 and {"none", "cached", "distinct"} <= set(out)
    assert out["cached"]["cpu_p99_ms"] > 0
    assert bench_annotations.main(["--rss", "--cycles", "20", "--report", "10"]) == 0
    rss = json.loads(capsys.readouterr().out)
    assert [p["cycles"] for p in rss["rss"]] == [0, 10, 20] and rss["refused"] == 2


@pytest.mark.usefixtures("restore_logging")  # the benchmark silences structlog
def test_in_process_glue_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import socket_path

    assert socket_path.main(["--machine", "4-socket", "--in-process", "--samples", "5"]) == 0
    out = json.loads(capsys.readouterr().out)["in_process"]
    assert set(out) == {"guaranteed-2cpu", "burstable"}
    for probe in out.values():
        assert 0 < probe["policy_us"] < probe["create_us"]


def test_a_failed_soak_still_says_over_how_many_machines_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The soak's markdown line counts the machines and names the broken rule when it failed
    (a soak that stops early has no report, only its error)."""
    two = {name: machines.load(name) for name in ("desktop", "server")}
    ok = run.soak_summary(two, 20) | {"seconds": 0.1}
    assert run.soak_line(ok).startswith("**Soak**: 20 steps over 2 machines, 0 invariant")

    def broken(*_: object) -> None:
        raise soak.SoakError("server, step 3 (seed 1): restart lost placements")

    monkeypatch.setattr(soak, "soak", broken)
    failed = run.soak_summary(two, 20) | {"seconds": 0.1}
    line = run.soak_line(failed)
    assert "over 2 machines, 1 invariant violations" in line and "restart lost" in line


def test_golden_trace_is_deterministic_and_covers_restarts() -> None:
    from benchmarks import golden

    machine = machines.load("server")
    first = list(golden.trace(machine, golden.OPTIONS["daemon"], 1.0, 320, 3))
    assert first == list(golden.trace(machine, golden.OPTIONS["daemon"], 1.0, 320, 3))
    assert "300 restart same=True" in first
    assert first[-1].startswith("snapshot ")


def test_profile_side_tells_where_the_time_goes_per_kind(tmp_path: Path) -> None:
    import cProfile
    import time

    from benchmarks import profile_side

    assert profile_side._where(("~", 0, "<method 'SerializeToString' of 'M'>")) == "protobuf"
    assert profile_side._where(("/x/nri_topology/policy/engine/a.py", 1, "f")) == "policy"
    assert profile_side._where(("/x/nri_topology/daemon/convert.py", 1, "f")) == "convert"
    assert profile_side._where(("/x/nri_topology/nri/stub.py", 1, "f")) == "wire"
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    sorted(str(i) for i in range(2000))
    profile.disable()
    profile.dump_stats(tmp_path / "CreateContainer-fill.prof")
    (tmp_path / "counts.json").write_text('{"CreateContainer-fill": 2}')
    text = profile_side.report(tmp_path, 3)
    assert "### CreateContainer-fill: " in text and "µs CPU per request (2)" in text
    assert text.count("\n| ") == 4  # the header and the three costliest functions
