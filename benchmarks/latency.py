"""Policy decision latency: `Policy.create` at 0, 100, 500 and 1000 live containers.

The policy is filled with the dense mix of `workload.fill_spec`; then the probe mix (one of each
kind of request: BestEffort, Burstable, fractional and whole-CPU Guaranteed, PMEM on machines
that have it) is created and released again in turns, so every sample sees the same fill. Only
`create` is timed: request building, pool choice, CPU slicing, memory and the update diff.
Samples come in blocks; the reported p50/p99 are the medians over the blocks.

Run alone: ``.venv/bin/python benchmarks/latency.py --machine synthetic-256 4-socket --live 1000
[--samples 1000] [--profile FILE]`` (the profile covers the timed creates and releases).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `benchmarks` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workload import MACHINES, fill_spec, load_machine, policy_pair, probe_specs
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.topology.model import Machine


def quantiles(samples_ns: list[int]) -> dict[str, float]:
    """p50 and p99 in milliseconds (nearest rank)."""
    s = sorted(samples_ns)
    return {
        "p50_ms": round(s[len(s) // 2] / 1e6, 4),
        "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] / 1e6, 4),
        "samples": len(s),
    }


def median_quantiles(blocks: list[list[int]]) -> dict[str, Any]:
    """p50 and p99 of each block, and their medians: one busy moment of a shared machine moves
    one block's p99, not the reported figure."""
    each = [quantiles(b) for b in blocks]
    return {
        "p50_ms": statistics.median(q["p50_ms"] for q in each),
        "p99_ms": statistics.median(q["p99_ms"] for q in each),
        "samples": sum(q["samples"] for q in each),
        "p99_ms_per_block": [q["p99_ms"] for q in each],
    }


def decision_latency(
    machine: Machine,
    live: int,
    samples: int,
    blocks: int = 3,
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    policy = Policy(machine, Options())
    for i in range(live):
        policy.create(*policy_pair(f"fill{i:04}", fill_spec(i)))
    probes = [policy_pair(f"probe{k}", spec) for k, spec in enumerate(probe_specs(machine))]
    for pod, ctr in probes:  # warm caches once
        policy.create(pod, ctr)
        policy.release(ctr.id)
    gc.collect()
    if profile is not None:
        profile.enable()
    clock = time.perf_counter_ns
    measured: list[list[int]] = []
    for _ in range(blocks):
        times: list[int] = []
        for n in range(samples):
            pod, ctr = probes[n % len(probes)]
            start = clock()
            policy.create(pod, ctr)
            times.append(clock() - start)
            policy.release(ctr.id)
        measured.append(times)
    if profile is not None:
        profile.disable()
    return median_quantiles(measured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machine", choices=MACHINES, nargs="+", default=["synthetic-256"])
    parser.add_argument("--live", type=int, nargs="+", default=[0, 100, 500, 1000])
    parser.add_argument("--samples", type=int, default=1000, help="per block; three blocks")
    parser.add_argument("--profile", type=Path, help="save cProfile statistics of the timed part")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.machine:
            machine = load_machine(name, Path(tmp) / name)
            for live in args.live:
                prof = cProfile.Profile() if args.profile else None
                row = decision_latency(machine, live, args.samples, profile=prof)
                row.pop("p99_ms_per_block")
                print(json.dumps({"machine": name, "live": live} | row), flush=True)
                if prof is not None and args.profile is not None:
                    prof.dump_stats(args.profile)
                    pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
