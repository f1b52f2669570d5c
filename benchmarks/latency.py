"""Policy decision latency: `Policy.create` at 0, 100, 500 and 1000 live containers.

The policy is filled with the dense mix of `workload.fill_spec`; then the probe mix (one of each
kind of request: BestEffort, Burstable, fractional and whole-CPU Guaranteed, PMEM on machines
that have it) is created and released again in turns, so every sample sees the same fill. Only
`create` is timed: request building, pool choice, CPU slicing, memory and the update diff.
Samples come in blocks; the reported p50/p99 are the medians over the blocks.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

from benchmarks.workload import fill_spec, policy_pair, probe_specs
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


def decision_latency(machine: Machine, live: int, samples: int, blocks: int = 3) -> dict[str, Any]:
    policy = Policy(machine, Options())
    for i in range(live):
        policy.create(*policy_pair(f"fill{i:04}", fill_spec(i)))
    probes = [policy_pair(f"probe{k}", spec) for k, spec in enumerate(probe_specs(machine))]
    for pod, ctr in probes:  # warm caches once
        policy.create(pod, ctr)
        policy.release(ctr.id)
    gc.collect()
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
    return median_quantiles(measured)
