"""Every benchmark of the project in one run, written as JSON and as a markdown table.

Run from the repository root (with ../shared beside it):

    .venv/bin/python benchmarks/run.py [--quick] [--out DIR]

Writes DIR/latest.json and DIR/latest.md (default benchmarks/results/). `--quick` uses tiny sizes
to show that the command works; its figures mean nothing. What is measured, and how, is said in
each module: `latency` (policy decisions), `socket_path` (round trips through the NRI socket,
Synchronize, the daemon's resident memory), `quality` (placement on churn traces against the
kubelet-static baseline), `fuzz` (decoders) and `soak` (policy invariants).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import fuzz, latency, quality, soak, socket_path
from benchmarks.workload import MACHINES, load_machine, sysfs_root
from nri_topology.topology.model import Machine

ROOT = Path(__file__).resolve().parents[1]
SEED = 1

# Targets of issue 6.
DECISION_P99_MS = 1.0  # at 1000 containers on 256 CPUs
ROUNDTRIP_ABOVE_FLOOR_MS = 1.0  # p99
RSS_MB = 60.0
# Targets of issue 14: a light node (no live containers) against the no-op plugin, and a 2-CPU
# exclusive create with 1000 live containers on the 144-CPU 4-socket machine.
LIGHT_RATIO = 1.5  # round trip p50, ours / no-op's
EXCLUSIVE_P50_MS = 0.6
EXCLUSIVE_P99_MS = 2.0


@dataclass(frozen=True)
class Sizes:
    live: tuple[int, ...]
    decision_samples: int
    roundtrip: tuple[tuple[str, int, str], ...]  # (machine, live containers, probe)
    roundtrip_samples: int
    sync_containers: int
    rss_containers: int
    trace_steps: int
    fuzz_inputs: int
    soak_steps: int
    soak_machines: tuple[str, ...] | None  # None: all


FULL = Sizes(
    live=(0, 100, 500, 1000),
    decision_samples=1500,
    roundtrip=(
        ("4-socket", 0, "mix"),
        ("4-socket", 1000, "exclusive-2"),
        ("server", 100, "mix"),
        ("synthetic-256", 1000, "mix"),
    ),
    roundtrip_samples=1000,
    sync_containers=1000,
    rss_containers=1000,
    trace_steps=3000,
    fuzz_inputs=100_000,
    soak_steps=10_000,
    soak_machines=None,
)
QUICK = Sizes(
    live=(0, 20),
    decision_samples=15,
    roundtrip=(("server", 5, "mix"), ("4-socket", 5, "exclusive-2")),
    roundtrip_samples=10,
    sync_containers=30,
    rss_containers=20,
    trace_steps=80,
    fuzz_inputs=400,
    soak_steps=150,
    soak_machines=("server", "4-socket"),
)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _environment() -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "commit": commit,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def measure(sizes: Sizes, machines: Sequence[str]) -> dict[str, Any]:
    loaded = {}
    workdir = Path(tempfile.mkdtemp(prefix="nri-topology-bench-"))
    for name in machines:
        _log(f"loading {name}")
        loaded[name] = load_machine(name, workdir / name)
    out: dict[str, Any] = {"environment": _environment(), "quick": sizes is QUICK}

    rows = []
    for name, m in loaded.items():
        for live in sizes.live:
            _log(f"decision latency: {name}, {live} containers")
            row = latency.decision_latency(m, live, sizes.decision_samples)
            rows.append({"machine": name, "cpus": len(m.cpus), "live": live, **row})
    out["decision_latency"] = rows

    rows = []
    for name, live, probe in sizes.roundtrip:
        if name in loaded:
            _log(f"round trip: {name}, {live} containers, {probe}")
            rows.append(
                {"machine": name}
                | socket_path.roundtrip(
                    loaded[name], live, sizes.roundtrip_samples, probe=probe
                )
            )
    out["roundtrip"] = rows

    sync_machine = "synthetic-256" if "synthetic-256" in loaded else next(iter(loaded))
    _log(f"synchronize: {sync_machine}, {sizes.sync_containers} containers")
    out["synchronize"] = {"machine": sync_machine} | socket_path.synchronize(
        loaded[sync_machine], sizes.sync_containers
    )

    rss_machine = "server" if "server" in loaded else next(iter(loaded))
    _log(f"resident memory: {rss_machine}, {sizes.rss_containers} containers")
    out["rss"] = {"machine": rss_machine} | socket_path.daemon_rss(
        sysfs_root(rss_machine, workdir / f"{rss_machine}-rss"), sizes.rss_containers
    )

    out["quality"] = {}
    for name, m in loaded.items():
        _log(f"placement quality: {name}, {sizes.trace_steps} steps")
        out["quality"][name] = quality.compare(m, SEED, sizes.trace_steps)

    _log(f"fuzz: {sizes.fuzz_inputs} inputs")
    started = time.perf_counter()
    fuzz_machine = loaded.get("server") or next(iter(loaded.values()))
    with fuzz.quiet():
        targets = fuzz.run(sizes.fuzz_inputs, SEED, fuzz_machine)
    out["fuzz"] = {
        "targets": targets,
        "inputs": sum(int(t["inputs"]) for t in targets.values()),
        "crashes": sum(int(t["crashes"]) for t in targets.values()),
        "seconds": round(time.perf_counter() - started, 1),
    }

    _log(f"soak: {sizes.soak_steps} steps")
    started = time.perf_counter()
    soak_set = soak.all_machines() if sizes.soak_machines is None else {}
    for name in sizes.soak_machines or ():
        soak_set[name] = loaded.get(name) or load_machine(name)
    out["soak"] = soak_summary(soak_set, sizes.soak_steps)
    out["soak"]["seconds"] = round(time.perf_counter() - started, 1)
    out["targets"] = targets_met(out)
    return out


def soak_summary(machines: Mapping[str, Machine], steps: int) -> dict[str, Any]:
    """The soak's summary; when a rule broke, the same fields with the error."""
    try:
        return soak.soak(machines, steps, SEED).summary()
    except soak.SoakError as exc:
        return {
            "steps": steps,
            "machines": list(machines),
            "invariant_violations": 1,
            "error": str(exc),
        }


def soak_line(k: Mapping[str, Any]) -> str:
    """The markdown line of the soak, with the broken rule when there is one."""
    line = (
        f"**Soak**: {k['steps']} steps over {len(k['machines'])} machines, "
        f"{k['invariant_violations']} invariant violations, {k['seconds']} s."
    )
    return f"{line} {k['error']}" if "error" in k else line


def targets_met(out: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the issue with the measured value and whether it is met."""
    rows: list[dict[str, Any]] = []
    for r in out["decision_latency"]:
        if r["cpus"] == 256 and r["live"] == 1000:
            rows.append(_target("decision p99, 1000 containers, 256 CPUs", r["p99_ms"], "ms"))
    for r in out["roundtrip"]:
        rows.append(
            _target(
                f"round trip p99 above no-op floor, {r['machine']}, {r['live_containers']} live",
                r["p99_above_floor_ms"],
                "ms",
                ROUNDTRIP_ABOVE_FLOOR_MS,
            )
        )
        if r["machine"] == "4-socket" and r["live_containers"] == 0 and r["probe"] == "mix":
            rows.append(
                _target(
                    "round trip p50 / no-op's, 4-socket, 0 live", r["p50_ratio"], "x", LIGHT_RATIO
                )
            )
        if r["machine"] == "4-socket" and r["probe"] == "exclusive-2":
            name = f"2-CPU exclusive round trip, 4-socket, {r['live_containers']} live"
            p50, p99 = r["policy"]["p50_ms"], r["policy"]["p99_ms"]
            rows.append(_target(f"{name}: p50", p50, "ms", EXCLUSIVE_P50_MS))
            rows.append(_target(f"{name}: p99", p99, "ms", EXCLUSIVE_P99_MS))
    rss = out["rss"]
    rows.append(_target("RSS after startup", rss["after_startup_mb"], "MB", RSS_MB))
    rows.append(
        _target(f"RSS with {rss['containers']} containers", rss["with_containers_mb"], "MB", RSS_MB)
    )
    for name, q in out["quality"].items():
        ours, base = q["nri-topology"], q["kubelet-static"]
        rows.append(
            {
                "target": f"quality {name}: local share >= baseline, no more rejections",
                "value": f"{ours['local_share']} vs {base['local_share']}, "
                f"{ours['rejected']} vs {base['rejected']} rejected",
                "met": ours["local_share"] >= base["local_share"]
                and ours["rejected"] <= base["rejected"],
            }
        )
        rows.append(
            {
                "target": f"quality {name}: spanning containers at the minimal distance",
                "value": f"{ours['spanning_minimal_share']} of {ours['spanning']}",
                "met": ours["spanning_minimal_share"] == 1.0,
            }
        )
    rows.append(
        {
            "target": "fuzz: 0 crashes",
            "value": out["fuzz"]["crashes"],
            "met": not out["fuzz"]["crashes"],
        }
    )
    violations = out["soak"]["invariant_violations"]
    rows.append(
        {"target": "soak: 0 invariant violations", "value": violations, "met": not violations}
    )
    return rows


def _target(name: str, value: float, unit: str, limit: float = DECISION_P99_MS) -> dict[str, Any]:
    return {"target": f"{name} <= {limit} {unit}", "value": value, "met": value <= limit}


# --- markdown -----------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def markdown(out: dict[str, Any]) -> str:
    env = out["environment"]
    lines = [
        f"Measured {env['date']} at {env['commit']}, Python {env['python']}, {env['cpus']} CPUs, "
        f"load average {env['load_average_at_start']} at start"
        + (" (--quick: sizes too small to mean anything)" if out["quick"] else "")
        + ".",
        "",
        "**Targets**",
        "",
    ]
    lines += _table(
        ("target", "measured", "met"),
        [(t["target"], t["value"], "yes" if t["met"] else "**no**") for t in out["targets"]],
    )
    lines += ["**Policy decision latency** (`Policy.create`, probe mix)", ""]
    lines += _table(
        ("machine", "CPUs", "live containers", "p50 ms", "p99 ms"),
        [
            (r["machine"], r["cpus"], r["live"], r["p50_ms"], r["p99_ms"])
            for r in out["decision_latency"]
        ],
    )
    lines += ["**CreateContainer round trip through the NRI socket**", ""]
    lines += _table(
        (
            "machine",
            "live",
            "probe",
            "ours p50/p99 ms",
            "no-op p50/p99 ms",
            "p50 ratio",
            "above floor p50/p99 ms",
            "plugin's share p50/p99 ms (CPU p50)",
            "reply bytes",
        ),
        [
            (
                r["machine"],
                r["live_containers"],
                r["probe"],
                f"{r['policy']['p50_ms']} / {r['policy']['p99_ms']}",
                f"{r['noop']['p50_ms']} / {r['noop']['p99_ms']}",
                r["p50_ratio"],
                f"{r['p50_above_floor_ms']} / {r['p99_above_floor_ms']}",
                f"{side['p50_ms']} / {side['p99_ms']} ({side['cpu_p50_ms']})",
                side["reply_bytes_p50"],
            )
            for r in out["roundtrip"]
            for side in [r["plugin_side"]["policy"]]
        ],
    )
    s = out["synchronize"]
    lines += ["**Synchronize (plugin start to registered and ready)**", ""]
    lines += _table(
        ("machine", "containers", "with checkpoint ms", "Synchronize only ms", "moved"),
        [
            (
                s["machine"],
                s["containers"],
                s["with_checkpoint_ms"],
                s["synchronize_only_ms"],
                s["with_checkpoint_moved"] + s["synchronize_only_moved"],
            )
        ],
    )
    r = out["rss"]
    lines += ["**Resident memory of `nri-topology run`**", ""]
    lines += _table(
        ("machine", "after startup MB", f"with {r['containers']} containers MB", "bare Python MB"),
        [(r["machine"], r["after_startup_mb"], r["with_containers_mb"], r["bare_python_mb"])],
    )
    lines += ["**Placement quality on a seeded churn trace** (same trace for both placers)", ""]
    rows = []
    for name, q in out["quality"].items():
        for placer in ("nri-topology", "kubelet-static"):
            p = q[placer]
            rows.append(
                (
                    name,
                    placer,
                    p["admitted"],
                    p["rejected"],
                    f"{p['local_share']:.1%} ({p['local']}/{p['could_fit_one_node']})",
                    p["spanning"],
                    f"{p['spanning_avg_distance']} / {p['spanning_min_possible_distance']}",
                    f"{p['spanning_minimal_share']:.0%}",
                    p["exclusive_cpus_moved"],
                    p["cpuset_cpus_changed"],
                )
            )
    lines += _table(
        (
            "machine",
            "placer",
            "admitted",
            "rejected",
            "one NUMA node",
            "spanning",
            "avg / min distance",
            "at min",
            "excl. CPUs moved",
            "cpuset CPU changes",
        ),
        rows,
    )
    f = out["fuzz"]
    lines += [f"**Fuzzing** ({f['inputs']} inputs, {f['seconds']} s)", ""]
    lines += _table(
        ("decoder", "inputs", "crashes", "max ms per input"),
        [
            (name, t["inputs"], t["crashes"], t["max_ms_per_input"])
            for name, t in f["targets"].items()
        ],
    )
    lines += [soak_line(out["soak"]), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the command works")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument(
        "--machines", nargs="+", choices=MACHINES, default=list(MACHINES), help="default: all"
    )
    args = parser.parse_args(argv)
    saved = structlog.get_config()
    # the plugin logs every placement at info level; only problems matter here
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    try:
        out = measure(QUICK if args.quick else FULL, args.machines)
    finally:
        structlog.configure(**saved)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(out, indent=2) + "\n")
    (args.out / "latest.md").write_text(markdown(out) + "\n")
    _log(f"wrote {args.out / 'latest.json'} and {args.out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
