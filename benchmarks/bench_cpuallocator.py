"""CPU allocator and node-set choice: time per call on large synthetic machines.

Run: ``.venv/bin/python benchmarks/bench_cpuallocator.py [--calls N] [--json F]``

Machines (built in memory, no sysfs): 2 x EPYC 9654 NPS1 (384 CPUs, L3 of 8 cores), 2 x EPYC
7742 NPS4 (256 CPUs, 8 NUMA nodes) and a 16-node flat-distance machine for `best_node_set`.
Each scenario fragments the machine the same way (every third core half used) and times
`take_cpus`, `take_distributed` and `best_node_set` with several sizes. Then the typical
grant: 1 to 16 CPUs of one NUMA node (one pool) of the bundled 4-socket machine, idle and with
every other core taken, and `grant_nodes` over all its nodes (what the engine asks of every
pool that spans several). Reported: median and p99 microseconds per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_cpuallocator import grid
from test_numasets import machine as distance_machine

from nri_topology.policy.allocator.cpuallocator import take_cpus, take_distributed
from nri_topology.policy.allocator.numasets import best_node_set, grant_nodes
from nri_topology.simulate.machine_spec import load_bundled
from nri_topology.topology.model import Machine


def fragmented(m: Machine) -> frozenset[int]:
    """All CPUs except one thread of every third core."""
    busy = {min(core) for i, core in enumerate(m.cores) if i % 3 == 0}
    return m.all_cpus - busy


def timed(fn: Callable[[], object], calls: int) -> dict[str, float]:
    samples = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e6)
    samples.sort()
    return {
        "median_us": round(statistics.median(samples), 1),
        "p99_us": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    genoa = grid(2, 1, 96, 2, l3_cores=8)
    rome = grid(2, 4, 16, 2)
    flat16 = distance_machine(
        [[10 if a == b else (12 if a // 4 == b // 4 else 20) for b in range(16)] for a in range(16)]
    )
    results: dict[str, dict[str, float]] = {}
    for name, m in (("genoa-384", genoa), ("rome-nps4-256", rome)):
        free = fragmented(m)
        for count in (2, 8, 30, 100):
            results[f"take_cpus {name} n={count}"] = timed(
                lambda m=m, free=free, count=count: take_cpus(m, free, count), args.calls
            )
        for count in (16, 64):
            results[f"take_distributed {name} n={count}"] = timed(
                lambda m=m, free=free, count=count: take_distributed(m, free, count), args.calls
            )
    four = load_bundled("4-socket")[1]
    node = four.nodes[four.cpu_nodes[0]].cpus
    busy = {c for i, core in enumerate(four.cores) if i % 2 for c in core}
    for load, free in (("idle", node), ("half taken", node - busy)):
        for count in (1, 2, 4, 8, 16):
            results[f"take_cpus 4-socket node {load} n={count}"] = timed(
                lambda free=free, count=count: take_cpus(four, free, count), args.calls
            )
    for load, free in (("idle", four.all_cpus), ("half taken", four.all_cpus - busy)):
        results[f"grant_nodes 4-socket {load} n=2"] = timed(
            lambda free=free: grant_nodes(four, free, 2, four.cpu_nodes), args.calls
        )
    free16 = {n: 16 for n in range(16)}
    for need in (20, 70, 130):
        results[f"best_node_set 16 nodes need={need}"] = timed(
            lambda need=need: best_node_set(flat16, free16, need), args.calls
        )
    width = max(len(k) for k in results)
    for key, r in results.items():
        print(f"{key:<{width}}  median {r['median_us']:>10.1f} us  p99 {r['p99_us']:>10.1f} us")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
