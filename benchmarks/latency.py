"""Policy decision latency: `Policy.create` at 0, 100, 500 and 1000 live containers.

The policy is filled with the dense mix of `workload.fill_spec`; then the probe mix (one of each
kind of request: BestEffort, Burstable, fractional and whole-CPU Guaranteed, PMEM on machines
that have it) is created and released again in turns, so every sample sees the same fill. Only
`create` is timed: request building, pool choice, CPU slicing, memory and the update diff.
"""

from __future__ import annotations

import gc
import time

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


def decision_latency(machine: Machine, live: int, samples: int) -> dict[str, float]:
    policy = Policy(machine, Options())
    for i in range(live):
        policy.create(*policy_pair(f"fill{i:04}", fill_spec(i)))
    probes = [policy_pair(f"probe{k}", spec) for k, spec in enumerate(probe_specs(machine))]
    for pod, ctr in probes:  # warm caches once
        policy.create(pod, ctr)
        policy.release(ctr.id)
    gc.collect()
    times: list[int] = []
    clock = time.perf_counter_ns
    for n in range(samples):
        pod, ctr = probes[n % len(probes)]
        start = clock()
        policy.create(pod, ctr)
        times.append(clock() - start)
        policy.release(ctr.id)
    return quantiles(times)
