"""A Guaranteed pod's start and removal beside shared containers, on a real containerd (root).

    .venv/bin/python benchmarks/repins.py [--shared 0,30,100] [--rounds 3] [--samples 2]
                                          [--modes M1,M2] [--hold S] [--json out.json]
                                          [--runtime containerd-1.7|containerd-2|crio]
                                          [--before DIR]

For each count of BestEffort (shared) containers live, one runtime from tests/e2e (fetched as
tests/e2e/prepare.sh does) runs them, with runc wrapped to log every subcommand it runs. Then
the modes alternate (the order reversed every other round), `--rounds` times, `--samples` pods
each: no plugin connected; the plugin with every re-pin in the reply (`updates.in_reply: true`,
the old behaviour); the plugin as configured by default (re-pins after the reply through the
runtime's CRI, whose socket the harness gives it). `--modes` may add the plugin with re-pins
after the reply through NRI UpdateContainers forced (`after reply`: `transport: nri`, `in_reply:
false`), which can deadlock an older NRI, and the default without shrinks written into the
cgroups first (`runtime only`: `cgroup_first: false`). With `--before DIR`, the mode `before` is
the default configuration served by the plugin of the source tree DIR (e.g. a worktree of an
older commit), so two commits' plugins alternate on one runtime and one load. Each sample:

* a Guaranteed 1-CPU pod's sandbox, then its container created and started, as a kubelet does
  (timed: create+start);
* 5 ms after that CreateContainer began, another pod's BestEffort container is created (timed:
  its CreateContainer; minus the median of the same without the plugin, the time it waited);
* the shared containers' cgroups are read when its StartContainer returns (how many still hold
  the new exclusive CPUs then; the workload started before that return), and from the
  Guaranteed CreateContainer's return on, every 20 ms, until none holds them. The exclusivity
  window is counted from the workload's start: from StartContainer's return until none holds
  them (0 when none did at that return; the read after the return cannot see a shared cgroup
  that held the CPUs between the task's start and the return, the plugin's own figure below
  can). Beside it the old measure, from the CreateContainer's return, and the window the plugin
  itself recorded (`nri_topology_exclusive_window_seconds`, read before and after the sample:
  how many windows closed meanwhile and their total; a grant's window may close after its
  sample's last read and count in the next one, or never, voided when its pod goes first; its
  meaning is the plugin's: from the workload's start since the windows were counted so, from
  the reply before);
* `--hold` seconds later (0: at once), the pod stopped and removed (timed: removal), then all
  shared cgroups awaited back on their full sets before the next sample;
* the `runc update` runs that started before the Guaranteed CreateContainer returned (those its
  reply carried), during its create+start, the window and the hold, and during the removal (and
  until the next sample): the runc updates per event. With re-pins written into the cgroups
  first, the runtime's re-pins follow `grow_delay_seconds` later; a pod removed before then
  leaves the runtime none to do, so `--hold 2` shows what a pod that stays costs it.

Printed per count and mode: medians and p90 in milliseconds, and the machine's load average.
The exclusive CPUs are those of the container's runtime spec.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nri_topology.cri import api_pb2 as cri
from tests.e2e import harness

MODES = {
    "without plugin": None,
    "in reply": "updates:\n  in_reply: true\n",
    "default": "",  # after the reply, through the runtime's CRI
    # After the reply on any runtime: on an NRI older than v0.12.1 (containerd 1.7, 2.1) it can
    # deadlock the runtime's NRI (docs/protocol.md §6.6), so only with --modes naming it.
    "after reply": "updates:\n  in_reply: false\n  transport: nri\n",
    # The default with wider batches: more concurrent CRI re-pins, a shorter window.
    "batch 8": "updates:\n  batch: 8\n",
    # The default without writing shrinks into the cgroups first: the runtime's re-pins alone.
    "runtime only": "updates:\n  cgroup_first: false\n",
    # The default, served by the plugin of the source tree given with --before.
    "before": "",
}
WINDOW = "nri_topology_exclusive_window_seconds"
DEFAULT_MODES = "without plugin,in reply,default"
GIB = 1 << 30
WRAPPER = """#!/bin/sh
sub=
for a in "$@"; do
  case "$a" in
    create|start|update|delete|kill|state|exec|pause|resume|ps|features|events) sub=$a; break;;
  esac
done
start=$(date +%s.%N)
"{runc}" "$@"
rc=$?
echo "$start $sub" >> "{log}"
exit $rc
"""


def wrapped_runc(tools: harness.Tools, base: Path) -> tuple[harness.Tools, Path]:
    """Tools whose runc logs each subcommand and when it started."""
    log = base / "runc.log"
    log.touch()
    wrapper = base / "runc-wrapper"
    wrapper.write_text(WRAPPER.format(runc=tools.runc, log=log))
    wrapper.chmod(0o755)
    return dataclasses.replace(tools, runc=wrapper), log


def updates_between(log: Path, start: float, end: float) -> int:
    count = 0
    for line in log.read_text().splitlines():
        at, _, sub = line.partition(" ")
        if sub == "update" and start <= float(at) < end:
            count += 1
    return count


class Shared:
    """The shared containers' cgroup cpuset files, read directly (no CRI call per read)."""

    def __init__(self, run: harness.Run, pods: list[harness.Pod]) -> None:
        self.files = [harness.cgroup_dir(run.pid(p.containers[0].id)) / "cpuset.cpus" for p in pods]

    def holding(self, cpus: set[int]) -> int:
        return sum(1 for f in self.files if harness.parse_cpus(f.read_text()) & cpus)

    def all_on(self, cpus: set[int]) -> bool:
        return all(harness.parse_cpus(f.read_text()) == cpus for f in self.files)


def spec_cpus(run: harness.Run, cid: str) -> set[int]:
    """The cpuset a created container will run on, from its runtime spec."""
    assert run.cri is not None
    status = run.cri.runtime(
        "ContainerStatus", cri.ContainerStatusRequest(container_id=cid, verbose=True)
    )
    spec = json.loads(status.info["info"])["runtimeSpec"]
    return harness.parse_cpus(spec["linux"]["resources"].get("cpu", {}).get("cpus", ""))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def plugin_window(run: harness.Run) -> tuple[float, float] | None:
    """The plugin's exclusivity-window histogram: (count, sum in seconds); None without one."""
    if run.plugin is None:
        return None
    _, text = run.plugin_http("/metrics")
    return (
        harness.metric_sample(text, f"{WINDOW}_count"),
        harness.metric_sample(text, f"{WINDOW}_sum"),
    )


def sample(
    run: harness.Run, shared: Shared, probe: harness.Pod, i: int, log: Path, hold_s: float
) -> dict:
    assert run.cri is not None
    online = harness.online_cpus()
    pod = run.run_pod(f"g{i}", "guaranteed", containers=0)
    recorded_before = plugin_window(run)
    probe_ms: list[float] = []

    def probe_create() -> None:
        time.sleep(0.005)
        started = time.perf_counter()
        cid = run.create_container(probe, f"probe{i}")
        probe_ms.append((time.perf_counter() - started) * 1000)
        run.cri.runtime("RemoveContainer", cri.RemoveContainerRequest(container_id=cid))

    prober = threading.Thread(target=probe_create)
    t0 = time.time()
    started = time.perf_counter()
    prober.start()
    cid = run.create_container(pod, "c0", 1000, GIB // 4)
    replied = time.perf_counter()
    t_reply = time.time()
    exclusive = spec_cpus(run, cid) or online
    freed: list[float] = []

    def watch() -> None:  # from the reply on, while the container starts
        while exclusive != online and shared.holding(exclusive):
            time.sleep(0.02)  # reading every shared cgroup costs a loaded CPU: not more often
        freed.append(time.perf_counter())

    watcher = threading.Thread(target=watch)
    watcher.start()
    run.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=cid))
    running = time.perf_counter()
    holding = shared.holding(exclusive) if exclusive != online else 0
    create_ms = (running - started) * 1000
    watcher.join()
    prober.join()
    time.sleep(hold_s)
    t1 = time.time()
    started = time.perf_counter()
    run.remove_pod(pod)
    removal_ms = (time.perf_counter() - started) * 1000
    if exclusive != online:
        harness.wait_for("shared sets grown back", lambda: shared.all_on(online), 30)
    time.sleep(0.1)
    t2 = time.time()
    recorded_after = plugin_window(run)
    recorded_ms = recorded = None
    if recorded_before and recorded_after:  # windows closed meanwhile, and their total
        recorded = int(recorded_after[0] - recorded_before[0])
        recorded_ms = (recorded_after[1] - recorded_before[1]) * 1000
    unshared = exclusive == online  # nothing exclusive: no window
    return {
        "create_ms": create_ms,
        "removal_ms": removal_ms,
        "held_at_start": holding,
        "window_ms": 0.0 if unshared or not holding else max(0.0, (freed[0] - running) * 1000),
        "window_from_reply_ms": 0.0 if unshared else (freed[0] - replied) * 1000,
        "recorded_window_ms": recorded_ms,
        "recorded_windows": recorded,
        "probe_ms": probe_ms[0],
        "create_updates": updates_between(log, t0, t1),
        "reply_updates": updates_between(log, t0, t_reply),
        "removal_updates": updates_between(log, t1, t2),
    }


def switch(run: harness.Run, config: str | None, checkout: Path | None = None) -> None:
    run.stop_plugin()
    if config is not None:
        run.write_plugin_config(config)
        run.start_plugin(extra=["--log-level", "warning"], checkout=checkout)


def measure(tools: harness.Tools, base: Path, image: Path, log: Path, n: int, args) -> dict:
    modes = {m: MODES[m] for m in args.modes}
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with harness.running(tools, base, image) as run:
        switch(run, MODES["default"])
        pods = [run.run_pod(f"be{i}", "besteffort") for i in range(n)]
        probe = run.run_pod("probe", "besteffort", containers=0)
        shared = Shared(run, pods)
        i = 0
        for r in range(args.rounds):
            order = list(modes.items())  # which goes first alternates too
            for mode, config in order if r % 2 == 0 else order[::-1]:
                switch(run, config, args.before if mode == "before" else None)
                for _ in range(args.samples):
                    results[mode].append(sample(run, shared, probe, i, log, args.hold))
                    i += 1
        switch(run, None)
    return results


def summarize(results: dict[str, list[dict]]) -> dict[str, dict]:
    base_probe = statistics.median(s["probe_ms"] for s in results["without plugin"])
    out = {}
    for mode, samples in results.items():
        row: dict[str, float] = {"samples": len(samples)}
        for key in ("create_ms", "removal_ms", "window_ms", "window_from_reply_ms"):
            values = [s[key] for s in samples]
            row[f"{key[:-3]}_median_ms"] = round(statistics.median(values), 1)
            row[f"{key[:-3]}_p90_ms"] = round(percentile(values, 0.9), 1)
            row[f"{key[:-3]}_max_ms"] = round(max(values), 1)
        row["held_at_start_median"] = statistics.median(s["held_at_start"] for s in samples)
        row["held_at_start_max"] = max(s["held_at_start"] for s in samples)
        row["samples_held_at_start"] = sum(1 for s in samples if s["held_at_start"])
        # The plugin's windows: a grant's window may close after its sample's last read (then
        # it counts in the next sample) or not at all (voided when the pod goes first).
        seen = [s for s in samples if s["recorded_windows"] is not None]
        row["recorded_windows"] = sum(s["recorded_windows"] for s in seen) if seen else None
        row["recorded_window_total_ms"] = round(sum(s["recorded_window_ms"] for s in seen), 1)
        closed = Counter(s["recorded_windows"] for s in seen)
        row["windows_closed_per_sample"] = {str(k): v for k, v in sorted(closed.items())}
        single = [s["recorded_window_ms"] for s in seen if s["recorded_windows"] == 1]
        if single:  # samples in which exactly one window closed: its length
            row["recorded_window_median_ms"] = round(statistics.median(single), 1)
            row["recorded_window_max_ms"] = round(max(single), 1)
        waits = [max(0.0, s["probe_ms"] - base_probe) for s in samples]
        row["other_create_wait_median_ms"] = round(statistics.median(waits), 1)
        row["other_create_wait_max_ms"] = round(max(waits), 1)
        for key in ("reply_updates", "create_updates", "removal_updates"):
            row[f"runc_updates_per_{key[:-8]}"] = statistics.median(s[key] for s in samples)
        out[mode] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default="0,30,100", help="shared containers live, per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2, help="pods per mode and round")
    parser.add_argument("--modes", default=DEFAULT_MODES, help="of: " + "; ".join(MODES))
    parser.add_argument(
        "--hold", type=float, default=0.0, help="seconds the pod runs before its removal"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--runtime", default="containerd-1.7", choices=harness.RUNTIMES)
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="a source tree whose plugin serves the mode `before` (default configuration)",
    )
    args = parser.parse_args(argv)
    args.modes = [m for m in MODES if m in args.modes.split(",")]
    if ("before" in args.modes) != (args.before is not None):
        parser.error("the mode `before` and --before DIR go together")
    if args.before is not None:
        args.before = args.before.resolve()
        if not (args.before / "nri_topology" / "cli.py").is_file():
            parser.error(f"{args.before} holds no nri_topology")
    tools = harness.prepare(args.runtime)
    report: dict = {
        "runtime": args.runtime,
        "version": tools.version,
        "load_before": os.getloadavg(),
        "cpus": len(harness.online_cpus()),
        "before": str(args.before) if args.before else None,
    }
    print(f"{args.runtime} {tools.version}; load average {report['load_before']}")
    with tempfile.TemporaryDirectory(prefix="nri-e2e-", dir="/tmp") as d:
        base = Path(d)
        image = harness.write_image(tools, base / "busybox.tar")
        wrapped, log = wrapped_runc(tools, base)
        for n in (int(x) for x in args.shared.split(",")):
            load_start = os.getloadavg()
            table = summarize(measure(wrapped, base, image, log, n, args))
            load_end = os.getloadavg()
            report[str(n)] = {"load_start": load_start, "load_end": load_end, "modes": table}
            base_create = table.get("without plugin", {}).get("create_median_ms")
            print(
                f"\n{n} shared containers live (load average 1 min {load_start[0]:.2f} at the "
                f"start, {load_end[0]:.2f} at the end)"
            )
            print(
                f"{'mode':16} {'create+start':>15} {'x':>5} {'removal':>15} {'runc r/c/rm':>12} "
                f"{'held':>6} {'window':>17} {'from reply':>17} {'recorded n:ms':>13} "
                f"{'other wait':>13}"
            )
            for mode, r in table.items():
                ratio = r["create_median_ms"] / base_create if base_create else float("nan")
                r["create_ratio"] = round(ratio, 2)
                recorded = (
                    f"{r['recorded_windows']:3d}:{r['recorded_window_total_ms']:7.1f}"
                    if r["recorded_windows"] is not None
                    else "-"
                )
                print(
                    f"{mode:16} {r['create_median_ms']:6.1f} /{r['create_p90_ms']:6.1f} "
                    f"{ratio:5.2f} {r['removal_median_ms']:6.1f} /{r['removal_p90_ms']:6.1f} "
                    f"{r['runc_updates_per_reply']:3g}/{r['runc_updates_per_create']:3g}/"
                    f"{r['runc_updates_per_removal']:3g} "
                    f"{r['held_at_start_median']:2g}/{r['held_at_start_max']:2g} "
                    f"{r['window_median_ms']:5.1f}/{r['window_p90_ms']:5.1f}/"
                    f"{r['window_max_ms']:5.1f} "
                    f"{r['window_from_reply_median_ms']:5.1f}/{r['window_from_reply_p90_ms']:5.1f}/"
                    f"{r['window_from_reply_max_ms']:5.1f} {recorded:>13} "
                    f"{r['other_create_wait_median_ms']:5.1f} /{r['other_create_wait_max_ms']:5.1f}"
                )
    report["load_after"] = os.getloadavg()
    print(f"\nload average before {report['load_before']}, after {report['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
