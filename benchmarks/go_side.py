"""CreateContainer latency inside the upstream Go runtime side, ours against a no-op Go plugin.

The runtime side is containerd/nri's `pkg/adaptation` (the code containerd embeds), driven by
`go_side/harness`; the floor is `go_side/noop`, NRI's template plugin with empty handlers on
`pkg/stub`. A third plugin, our own stub and protocol stack serving a no-op plugin
(`bench_roundtrip.py --serve`), tells the share of our Python wire path from the policy's. A
fourth, `go-pin`, is the same Go plugin answering each probe's create and stop with the reply
ours gave it (recorded by the harness in ours' first run of each live count): the cpuset
adjustment and the updates of other containers that any placement plugin sends and the
runtime side must decode, validate and merge, at no cost of the plugin's own. The
Go programs are built by `go_side/build.sh` with Debian 13's Go toolchain (downloaded once into
`.cache/go-side`, not installed), against Debian 13's containerd/nri packages (0.6.x) by default,
or with `--nri-src DIR` (or `NRI_TOPOLOGY_NRI_SRC`) against the containerd/nri vendored in the Go
module at DIR, e.g. a containerd 2.x source tree (the release containerd embeds, 0.12.x); the
version built against is recorded with the figures. Ours is the real
`nri-topology run` process on a sysfs tree written from a committed machine file.

For every live count the harness creates that many containers of `workload.fill_spec` through
the adaptation (pod run, create, start, applying the plugin's adjustments and updates), then
times `Adaptation.CreateContainer` of each probe in turns, stopping and removing the probe again
after each sample (not timed): `guaranteed-2cpu` takes 2 exclusive CPUs (on a filled node it
re-pins the shared containers of its pool; the time includes the adaptation merging those
updates), `burstable` is a 250m/1000m container in the shared pool. Rounds alternate the
plugins (which goes first alternates too); the figures are the medians over rounds of each
run's p50 and p99, with ours' ratios to the no-op (the target) and to go-pin (the part left to
the plugin once the runtime side's handling of a placement reply is paid). Runs with a fill
also restart the plugin before timing and report its registration and Synchronize with every
fill container running (ours reads its checkpoint and must move none). Each plugin's peak
resident set is read by the harness from its process's end (wait4), the restarted one's too.

    .venv/bin/python benchmarks/go_side.py [--machine 4-socket] [--live 0 1000] [--rounds 7]
        [--samples 500] [--nri-src DIR] [--cpu] [--profile DIR]
        [--out benchmarks/results/go_side.json]
        [--plugins ours,noop,python-noop,go-pin] [--before DIR] [--cgroups] [--plugin-config YAML]

`--before DIR` adds `before`: ours as served by the source tree DIR (e.g. a worktree of an older
commit), taking its turn in every round beside the others, so two commits are compared under one
load; `--plugins` runs only the plugins named (go-pin needs ours).

The harness's containers have no cgroups by default: a plugin writing re-pins into cgroups finds
none (and may say so and stop writing: the cgroup root holds none of the runtime's containers).
`--cgroups` gives every fill and probe container the cgroups path `/bench/<id>` and a cgroup v1
cpuset directory of plain files for it in the sysfs tree (`fs/cgroup/cpuset/bench/<id>`, all
CPUs and nodes, written afresh before every harness run), so such writes really are written:
into files, not the kernel's cgroupfs, which the harness writes too as runc would, with each
container's cpusets as it applies the plugin's adjustment or updates.

Built in GOPATH mode, the harness's adaptation cannot tell its containerd/nri version (it reports
`0.0.0-unknown`), so a plugin choosing its update transport from that version (ours, `auto`)
takes the reply, as on an old runtime. `--plugin-config YAML` is the configuration ours (and
before) run with, e.g. `updates: {in_reply: false, transport: nri}` for what `auto` takes on a
runtime that says it has v0.12.1 or later: re-pins after the reply through UpdateContainers,
paced, and written into the cgroups first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `benchmarks` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import profile_side
from benchmarks.plugin_side import OUT_ENV
from benchmarks.workload import MACHINES, Spec, daemon_command, fill_spec, nri_pair, sysfs_root
from nri_topology.nri import api_pb2
from nri_topology.policy.types import QoS

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("NRI_TOPOLOGY_GO_CACHE") or ROOT / ".cache" / "go-side")
SRC_ENV = "NRI_TOPOLOGY_NRI_SRC"  # a Go module whose vendor/ holds containerd/nri (build.sh)
MI = 1 << 20
PROBES = {
    "guaranteed-2cpu": Spec(QoS.GUARANTEED, cpu=2000, memory=1024 * MI),
    "burstable": Spec(QoS.BURSTABLE, cpu=250, cpu_limit=1000, memory=256 * MI),
}
PLUGINS = ("ours", "noop", "python-noop", "go-pin")  # ours first: go-pin replays its replies
BEFORE = "before"  # ours from another source tree (--before)


def toolchain_cached(src: str | None = None) -> bool:
    """Whether build.sh has its Go toolchain and containerd/nri already (builds offline): the
    Debian packages, or the vendor tree of `src` (default: $NRI_TOPOLOGY_NRI_SRC)."""
    src = os.environ.get(SRC_ENV) if src is None else src
    root = CACHE / "debian" / "root"
    if src:
        nri = Path(src) / "vendor/github.com/containerd/nri/pkg/adaptation"
    else:
        nri = root / "usr/share/gocode/src/github.com/containerd/nri/pkg/adaptation"
    return nri.is_dir() and any(root.glob("usr/lib/go-1.*/bin/go"))


def build(src: str | None = None) -> dict[str, str]:
    """Build (or reuse) the harness and the no-op plugin against the containerd/nri of `src`
    (default: $NRI_TOPOLOGY_NRI_SRC, else Debian's packages); their paths and versions."""
    src = os.environ.get(SRC_ENV) if src is None else src
    env = {**os.environ, "NRI_TOPOLOGY_GO_CACHE": str(CACHE)}
    env.pop(SRC_ENV, None)
    if src:
        env[SRC_ENV] = src
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "go_side" / "build.sh")],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode:
        raise SystemExit(f"go_side/build.sh failed:\n{proc.stderr[-3000:]}")
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


CGROUP_PARENT = "bench"  # --cgroups: each container's cgroup is /bench/<id>


def with_cgroup(
    pair: tuple[api_pb2.PodSandbox, api_pb2.Container],
) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    """The pair with the container's cgroups path set, as the runtime reports it (cgroupfs)."""
    pod, ctr = pair
    ctr.linux.cgroups_path = f"/{CGROUP_PARENT}/{ctr.id}"
    return pod, ctr


def cgroup_parent(sysfs: Path) -> Path:
    """The directory of the containers' cgroups (`with_cgroup`) in the sysfs tree."""
    return sysfs / "fs" / "cgroup" / "cpuset" / CGROUP_PARENT


def write_cgroups(sysfs: Path, live: int) -> None:
    """A cgroup v1 cpuset directory for each probe and each of `live` fill containers beneath
    the sysfs tree, holding every CPU and node: where a plugin's re-pins written into cgroups
    land, and the harness writes the cpusets it applies."""
    online = sysfs / "devices" / "system"
    cpus = (online / "cpu" / "online").read_text().strip()
    nodes = online / "node" / "online"
    mems = nodes.read_text().strip() if nodes.exists() else "0"
    for cid in [*PROBES, *(f"fill{i:04}" for i in range(live))]:
        d = cgroup_parent(sysfs) / cid
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpuset.cpus").write_text(cpus + "\n")
        (d / "cpuset.mems").write_text(mems + "\n")


def write_requests(path: Path, pairs: list[tuple[api_pb2.PodSandbox, api_pb2.Container]]) -> None:
    """Length-prefixed CreateContainerRequest messages, the harness's input."""
    with path.open("wb") as f:
        for pod, ctr in pairs:
            body = api_pb2.CreateContainerRequest(pod=pod, container=ctr).SerializeToString()
            f.write(struct.pack(">I", len(body)) + body)


def plugin_command(
    plugin: str,
    tools: dict[str, str],
    sock: Path,
    sysfs: Path,
    replies: Path | None,
    wrapper: str | None = None,
    config: Path | None = None,
) -> list[str]:
    if plugin == "noop":
        return [tools["NOOP"], f"-socket={sock}"]
    if plugin == "go-pin":
        if replies is None or not replies.exists():
            raise SystemExit(
                f"go-pin needs ours' replies to the probes ({replies}): run ours first"
            )
        return [tools["NOOP"], f"-socket={sock}", f"-replies={replies}"]
    if plugin == "python-noop":  # our stub and protocol stack with nothing behind them
        return [sys.executable, "-m", "benchmarks.bench_roundtrip", f"--serve={sock}"]
    command = daemon_command(sock, sysfs, sock.parent, "warning")  # ours, or before
    if config is not None:
        command.append(f"--config={config}")
    if wrapper:  # the same daemon, timing its share (`plugin_side.py`) or profiled
        assert command[1:4] == ["-m", "nri_topology.cli", "run"], command
        command[1:3] = ["-m", wrapper]
    return command


def run_once(
    plugin: str,
    tools: dict[str, str],
    sysfs: Path,
    fill: Path | None,
    probes: Path,
    samples: int,
    replies: Path | None = None,
    record: Path | None = None,
    split: bool = False,
    before: Path | None = None,
    config: Path | None = None,
    profile: Path | None = None,
    cpu: bool = False,
    cgroups: bool = False,
) -> dict[str, Any]:
    """One harness run: start the plugin, fill, time the probes; the harness's report.

    go-pin answers with the `replies` ours gave on this fill; `record` is where the harness
    writes the replies of this run. With `split`, ours times its own share of each probe's
    create (`plugin_side.py`), added to the report as `split`; with `profile`, ours writes its
    profiles per event kind there (`profile_side.py`) instead; with `cpu`, ours counts its CPU
    time per request of each kind (`profile_side.py`, unprofiled), added as `cpu_us` (medians).
    With `cgroups`, the harness writes each container's cpusets into its cgroup directory."""
    with tempfile.TemporaryDirectory(prefix="nri-go-side-") as tmp:
        sock = Path(tmp) / "nri.sock"
        cmd = [tools["HARNESS"], f"-socket={sock}", f"-probes={probes}", f"-samples={samples}"]
        cmd += [f"-fill={fill}"] if fill else []
        # profiled, a full node's Synchronize outlasts the runtime's deadline
        cmd += ["-restart"] if fill and not profile else []
        cmd += [f"-record={record}"] if record else []
        if cgroups:  # the runtime writes each container's cpusets there, as runc does
            cmd += [f"-cgroups={cgroup_parent(sysfs)}"]
        profile = profile if plugin == "ours" else None
        cpu = cpu and plugin in ("ours", BEFORE) and profile is None
        split = split and plugin == "ours" and profile is None and not cpu
        counted = profile or (Path(tmp) / "cpu" if cpu else None)
        wrapper = (
            "benchmarks.profile_side" if counted else "benchmarks.plugin_side" if split else None
        )
        plugin_cmd = plugin_command(plugin, tools, sock, sysfs, replies, wrapper, config)
        cmd += [f"-plugin-log={tmp}/out.log", "--", *plugin_cmd]
        split_out = Path(tmp) / "split.json"
        # `python -m` finds the plugin's package in its working directory first
        tree = before if plugin == BEFORE and before is not None else ROOT
        env = {**os.environ, "PYTHONPATH": str(tree), OUT_ENV: str(split_out)}
        if counted:
            env[profile_side.DIR_ENV] = str(counted)
        if cpu:
            env[profile_side.CPU_ONLY_ENV] = "1"
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env, check=False)
        per_kind = json.loads((counted / "cpu.json").read_text()) if cpu and counted else {}
        timed = json.loads(split_out.read_text()) if split and split_out.exists() else None
        if proc.returncode:
            logs = "".join(
                p.read_text()[-2000:] for p in Path(tmp).glob("*.log") if p.stat().st_size
            )
            raise SystemExit(f"harness with {plugin} failed: {proc.stderr.strip()}\n{logs}")
    report = json.loads(proc.stdout)
    if per_kind:
        report["cpu_us"] = {k: round(statistics.median(v) / 1e3, 1) for k, v in per_kind.items()}
    if split:
        if timed is None:
            raise SystemExit("ours ran with --split but wrote no timings")
        report["split"] = split_medians(timed, samples)
    # a closed or refusing plugin answers nothing: never time that
    if plugin in ("ours", "go-pin", BEFORE):
        case = report["cases"]["guaranteed-2cpu"]
        if case["adjusted"] != case["samples"]:
            raise SystemExit(f"{plugin} pinned {case['adjusted']} of {case['samples']} probes")
    return report


def split_medians(
    timed: dict[str, dict[str, list[int]]], samples: int
) -> dict[str, dict[str, float]]:
    """Per probe, the median ms of each part `plugin_side.py` timed (probe = container id), over
    the last `samples` creates of the probe: those the harness timed, after its warm-up."""
    return {
        probe: {
            part: round(statistics.median(by_id[probe][-samples:]) / 1e6, 4)
            for part, by_id in timed.items()
            if by_id.get(probe)
        }
        for probe in PROBES
    }


def split_rows(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Inside ours, medians over rounds: the request from its bytes in to its reply out, the
    plugin's handling and the policy's decision, with ours' round trip of the same runs."""
    rows = []
    for (live, plugin), reports in sorted(runs.items()):
        if plugin != "ours" or not all("split" in r for r in reports):
            continue
        for probe in PROBES:
            row: dict[str, Any] = {
                "live": live,
                "probe": probe,
                "round_trip_ms": statistics.median(r["cases"][probe]["p50_ms"] for r in reports),
            }
            for part in ("request", "plugin", "policy"):
                row[f"{part}_ms"] = statistics.median(r["split"][probe][part] for r in reports)
            rows.append(row)
    return rows


def cpu_rows(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Ours' (and before's) CPU µs per request of each event kind: the median over rounds of
    each run's median, with what follows a reply until the next request counted with that
    reply's."""
    rows = []
    for (live, plugin), reports in sorted(runs.items()):
        counted = [r["cpu_us"] for r in reports if "cpu_us" in r]
        for kind in sorted({k for c in counted for k in c}):
            us = [c[kind] for c in counted if kind in c]
            rows.append(
                {"live": live, "plugin": plugin, "kind": kind, "cpu_us": statistics.median(us)}
            )
    return rows


def cpu_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| live | plugin | event kind | CPU µs per request |", "|---|---|---|---|"]
    lines += [f"| {r['live']} | {r['plugin']} | {r['kind']} | {r['cpu_us']:g} |" for r in rows]
    return "\n".join(lines)


def split_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| live | probe | round trip p50 ms | inside ours: request ms | "
        "plugin.create_container ms | Policy.create ms | request / round trip |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['live']} | {r['probe']} | {r['round_trip_ms']:.3f} | {r['request_ms']:.3f} | "
            f"{r['plugin_ms']:.3f} | {r['policy_ms']:.3f} | "
            f"{r['request_ms'] / r['round_trip_ms']:.2f} |"
        )
    return "\n".join(lines)


def reply_shape(replies: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per probe, what the recorded reply carries (protobuf's JSON mapping, as the harness
    writes it): the new container's cpuset and shares, how many environment variables, and
    how many other containers its create and its stop update."""
    shapes = {}
    for probe, reply in replies.items():
        create, stop = reply["create"], reply["stop"]
        adjust = create.get("adjust", {})
        cpu = adjust.get("linux", {}).get("resources", {}).get("cpu", {})
        shares = cpu.get("shares", {}).get("value")
        shapes[probe] = {
            "cpus": cpu.get("cpus", ""),
            "mems": cpu.get("mems", ""),
            "shares": int(shares) if shares is not None else None,
            "env": len(adjust.get("env", [])),
            "create_updates": len(create.get("update", [])),
            "stop_updates": len(stop.get("update", [])),
        }
    return shapes


def plugins_of(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[str]:
    """The plugins that ran, in the order of PLUGINS, `before` last."""
    ran = {plugin for _, plugin in runs}
    return [p for p in (*PLUGINS, BEFORE) if p in ran]


def summarize(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per live count and probe: medians over rounds of p50 and p99 of every plugin; ours
    against the no-op (the target) and against go-pin (what is left to the plugin)."""
    rows = []
    for live in sorted({live for live, _ in runs}):
        for case in PROBES:
            row: dict[str, Any] = {"live": live, "probe": case}
            for plugin in plugins_of(runs):
                each = [r["cases"][case] for r in runs[live, plugin]]
                row[plugin] = {
                    "p50_ms": round(statistics.median(c["p50_ms"] for c in each), 3),
                    "p99_ms": round(statistics.median(c["p99_ms"] for c in each), 3),
                    "p50_ms_per_round": [round(c["p50_ms"], 3) for c in each],
                    "updates": statistics.median(c["updates"] for c in each),
                }
            for q in ("p50", "p99"):
                for other, key in (("noop", "ratio"), ("go-pin", "ratio_go_pin")):
                    if "ours" in row and other in row:
                        row[f"{q}_{key}"] = round(row["ours"][f"{q}_ms"] / row[other][f"{q}_ms"], 2)
                if "ours" in row and BEFORE in row:  # after over before
                    row[f"{q}_ratio_before"] = round(
                        row["ours"][f"{q}_ms"] / row[BEFORE][f"{q}_ms"], 2
                    )
            rows.append(row)
    return rows


def restarts(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per live count and plugin: median restart-to-synchronized time, most containers moved."""
    out = []
    for (live, plugin), reports in sorted(runs.items()):
        each = [r["restart"] for r in reports if r.get("restart")]
        if each:
            out.append(
                {
                    "live": live,
                    "plugin": plugin,
                    "synchronize_ms": round(statistics.median(e["synchronize_ms"] for e in each)),
                    "moved": max(e["moved"] for e in each),
                }
            )
    return out


def collections(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per live count and plugin, the runtime side's heap allocation per create and its Go
    garbage collection over the probe loop (a probe is one create and stop), medians over
    rounds: what the garbage of a placement reply costs the runtime side on top of its merge."""
    out = []
    for (live, plugin), reports in sorted(runs.items()):
        gcs = [r["gc"] for r in reports]
        out.append(
            {
                "live": live,
                "plugin": plugin,
                "alloc_kb": {
                    case: round(statistics.median(r["cases"][case]["alloc_kb"] for r in reports))
                    for case in PROBES
                },
                "gc_cycles_per_1000_probes": round(
                    statistics.median(1000 * g["cycles"] / g["creates"] for g in gcs), 1
                ),
                "gc_cpu_ms_per_probe": round(
                    statistics.median(g["cpu_ms"] / g["creates"] for g in gcs), 3
                ),
            }
        )
    return out


def peaks(runs: dict[tuple[int, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per live count and plugin, the largest resident set of its process(es) in a run (the
    harness reads it from wait4 as the plugin ends), median and highest over the rounds."""
    out = []
    for (live, plugin), reports in sorted(runs.items()):
        each = [r["plugin_peak_rss_kb"] / 1024 for r in reports if r.get("plugin_peak_rss_kb")]
        if each:
            out.append(
                {
                    "live": live,
                    "plugin": plugin,
                    "peak_rss_mb": round(statistics.median(each), 1),
                    "peak_rss_mb_max": round(max(each), 1),
                }
            )
    return out


def gc_table(gcs: list[dict[str, Any]]) -> str:
    lines = [
        "| live | plugin | runtime side's allocation per create, "
        + " / ".join(PROBES)
        + " KB | GC cycles per 1000 probes | GC CPU ms per probe |",
        "|---|---|---|---|---|",
    ]
    for g in gcs:
        alloc = " / ".join(f"{g['alloc_kb'][case]:g}" for case in PROBES)
        lines.append(
            f"| {g['live']} | {g['plugin']} | {alloc} | {g['gc_cycles_per_1000_probes']:g} | "
            f"{g['gc_cpu_ms_per_probe']:g} |"
        )
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    if any(p not in r for r in rows for p in PLUGINS):
        return short_table(rows)

    def both(r: dict[str, Any], plugin: str) -> str:
        return f"{r[plugin]['p50_ms']} / {r[plugin]['p99_ms']}"

    lines = [
        "| live | probe | ours p50 / p99 ms | Go no-op p50 / p99 ms | ratio p50 / p99 |"
        " Go plugin answering a fixed cpuset p50 / p99 ms | ours / fixed p50 / p99 |"
        " our stub with a no-op plugin p50 / p99 ms | updates per reply |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['live']} | {r['probe']} | {both(r, 'ours')} | {both(r, 'noop')} | "
            f"{r['p50_ratio']} / {r['p99_ratio']} | {both(r, 'go-pin')} | "
            f"{r['p50_ratio_go_pin']} / {r['p99_ratio_go_pin']} | {both(r, 'python-noop')} | "
            f"{r['ours']['updates']:g} |"
        )
    return "\n".join(lines)


def short_table(rows: list[dict[str, Any]]) -> str:
    """p50 / p99 of each plugin that ran, and ours over before where both did."""
    plugins = [p for p in (*PLUGINS, BEFORE) if rows and p in rows[0]]
    lines = [
        "| live | probe | "
        + " | ".join(f"{p} p50 / p99 ms" for p in plugins)
        + (" | ours / before p50 / p99" if BEFORE in plugins and "ours" in plugins else "")
        + " | updates per reply |",
        "|---|---|" + "---|" * (len(plugins) + 1 + (BEFORE in plugins and "ours" in plugins)),
    ]
    for r in rows:
        cells = [f"{r[p]['p50_ms']} / {r[p]['p99_ms']}" for p in plugins]
        if "p50_ratio_before" in r:
            cells.append(f"{r['p50_ratio_before']} / {r['p99_ratio_before']}")
        updates = r.get("ours", r[plugins[0]])["updates"]
        lines.append(f"| {r['live']} | {r['probe']} | " + " | ".join(cells) + f" | {updates:g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machine", choices=MACHINES, default="4-socket")
    parser.add_argument("--live", type=int, nargs="+", default=[0, 1000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=500, help="timed creates per probe and run")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "go_side.json"
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="ours also times its own share of each create (benchmarks/plugin_side.py)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="ours (and before) also count their CPU time per request of each event kind "
        "(benchmarks/profile_side.py, unprofiled)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="then run ours once more per live count, profiled per event kind "
        "(benchmarks/profile_side.py), into DIR/live-N",
    )
    parser.add_argument(
        "--nri-src",
        metavar="DIR",
        default=os.environ.get(SRC_ENV),
        help="build against the containerd/nri vendored in the Go module at DIR (a containerd "
        f"2.x source tree; default ${SRC_ENV}, else Debian's containerd/nri packages)",
    )
    parser.add_argument(
        "--plugins",
        default=",".join(PLUGINS),
        help="the plugins to run, of " + ", ".join(PLUGINS) + " (go-pin needs ours)",
    )
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="also run ours as served by the source tree DIR, as the plugin `before`",
    )
    parser.add_argument(
        "--cgroups",
        action="store_true",
        help="give the containers cgroups (plain files in the sysfs tree) for re-pins to land in",
    )
    parser.add_argument(
        "--plugin-config",
        metavar="YAML",
        help="the configuration ours and before run with (default: none, the defaults)",
    )
    args = parser.parse_args(argv)
    plugins = [p for p in PLUGINS if p in args.plugins.split(",")]
    if "go-pin" in plugins and "ours" not in plugins:
        parser.error("go-pin replays ours' replies: run ours too")
    if args.before is not None:
        args.before = args.before.resolve()
        if not (args.before / "nri_topology" / "cli.py").is_file():
            parser.error(f"{args.before} holds no nri_topology")
        plugins.append(BEFORE)
    tools = build(args.nri_src)
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nri-go-side-") as tmp:
        work = Path(tmp)
        sysfs = sysfs_root(args.machine, work)
        config = None
        if args.plugin_config is not None:
            config = work / "plugin.yaml"
            config.write_text(args.plugin_config + "\n")
        probes = work / "probes.bin"
        wrap = with_cgroup if args.cgroups else (lambda pair: pair)
        write_requests(probes, [wrap(nri_pair(name, spec)) for name, spec in PROBES.items()])
        for n in range(args.rounds):
            for live in args.live:
                replies = work / f"replies-{live}.json"
                fill = None
                if live:
                    fill = work / f"fill-{live}.bin"
                    if not fill.exists():
                        write_requests(
                            fill,
                            [wrap(nri_pair(f"fill{i:04}", fill_spec(i))) for i in range(live)],
                        )
                for plugin in plugins if n % 2 == 0 else plugins[::-1]:
                    record = replies if plugin == "ours" and not replies.exists() else None
                    if args.cgroups:  # every run starts from the same cgroups
                        write_cgroups(sysfs, live)
                    report = run_once(
                        plugin,
                        tools,
                        sysfs,
                        fill,
                        probes,
                        args.samples,
                        replies,
                        record,
                        args.split,
                        args.before,
                        config,
                        cpu=args.cpu,
                        cgroups=args.cgroups,
                    )
                    runs.setdefault((live, plugin), []).append(report)
                    print(
                        f"round {n + 1}/{args.rounds} live {live} {plugin}: "
                        + ", ".join(
                            f"{k} p50 {c['p50_ms']:.3f} p99 {c['p99_ms']:.3f} ms"
                            for k, c in report["cases"].items()
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
        for live in args.live if args.profile else ():  # apart: a profile slows ours down
            fill = work / f"fill-{live}.bin" if live else None
            where = args.profile / f"live-{live}"
            if args.cgroups:
                write_cgroups(sysfs, live)
            run_once(
                "ours",
                tools,
                sysfs,
                fill,
                probes,
                args.samples,
                profile=where,
                cgroups=args.cgroups,
            )
            print(f"\n## Profile of ours, {live} live ({where})", file=sys.stderr)
            print(profile_side.report(where, 12), file=sys.stderr)
        answers = [
            {"live": live, "probe": probe, **shape}
            for live in args.live
            if (work / f"replies-{live}.json").exists()
            for probe, shape in reply_shape(
                json.loads((work / f"replies-{live}.json").read_text())
            ).items()
        ]
    rows = summarize(runs)
    load = {
        "loadavg_1m_before": round(load_before[0], 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    out = {
        "machine": args.machine,
        "nri": tools.get("NRI"),
        "plugins": plugins,
        "before": str(args.before) if args.before else None,
        "cgroups": args.cgroups,
        "plugin_config": args.plugin_config,
        "rounds": args.rounds,
        "samples": args.samples,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "load": load,
        "rows": rows,
        "go_pin_answers": answers,
        "runtime_gc": collections(runs),
        "restarts": restarts(runs),
        "peak_rss": peaks(runs),
        "split": split_rows(runs),
        "cpu_us": cpu_rows(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(table(rows))
    if BEFORE in plugins and all(p in plugins for p in PLUGINS):  # the full table has no before
        print()
        print(short_table(rows))
    print()
    print(gc_table(out["runtime_gc"]))
    if out["cpu_us"]:
        print()
        print(cpu_table(out["cpu_us"]))
    if out["split"]:
        print()
        print(split_table(out["split"]))
    for a in answers:
        print(
            f"go-pin answers {a['probe']} at {a['live']} live as ours did: cpus {a['cpus']} "
            f"mems {a['mems']} shares {a['shares']}, {a['env']} env, updates of "
            f"{a['create_updates']} containers on create and {a['stop_updates']} on stop"
        )
    for r in out["peak_rss"]:
        print(
            f"peak RSS of {r['plugin']} at {r['live']} live: {r['peak_rss_mb']} MB (median of "
            f"the rounds, highest {r['peak_rss_mb_max']} MB)"
        )
    for r in out["restarts"]:
        print(
            f"restart of {r['plugin']} with {r['live']} running: process start to synchronized "
            f"{r['synchronize_ms']} ms (median), containers moved {r['moved']}"
        )
    print(
        f"\nmachine {args.machine}; containerd/nri {out['nri']}; "
        f"{'cgroups in the sysfs tree; ' if args.cgroups else ''}"
        f"{f'plugin config {args.plugin_config!r}; ' if args.plugin_config else ''}"
        f"{args.rounds} rounds x "
        f"{args.samples} samples; load (1 min) {load['loadavg_1m_before']} before, "
        f"{load['loadavg_1m_after']} after, {load['cpus']} CPUs; written to {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
