"""Policy decision latency, and a long soak of random steps with the invariants checked.

Run: ``.venv/bin/python benchmarks/bench_policy.py [--machine 4-socket] [--live 0 100 500]
[--decisions 2000] [--json F]`` for latency, ``--soak [--examples 300] [--steps 100]`` for the soak.

Latency: the live containers are created first (of every 25: one Guaranteed with 2 exclusive
CPUs, one Guaranteed 1.5 CPUs (mixed), the rest Burstable 100m or BestEffort), then each
measured decision creates one container of the same mix and releases it again, so the state
stays at the given size. Reported per live count: median and p99 of `Policy.create` and of
`Policy.release`, in microseconds, on the bundled machine.

Soak: the hypothesis state machine of tests/test_policy_state.py on the shared machines with many
more examples and steps than the test suite runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, PodInfo
from nri_topology.simulate.machine_spec import load_bundled

CGROUPS = {"g": "kubepods", "b": "kubepods-burstable", "be": "kubepods-besteffort"}


def workload(i: int) -> tuple[PodInfo, ContainerInfo]:
    kind = i % 25
    if kind == 0:
        qos, milli = "g", 2000
    elif kind == 1:
        qos, milli = "g", 1500
    elif kind % 3 == 0:
        qos, milli = "be", 0
    else:
        qos, milli = "b", 100
    pod = PodInfo(id=f"p{i}", name=f"p{i}", namespace="bench", cgroup_parent=CGROUPS[qos])
    memory = 0 if qos == "be" else 256 << 20
    amounts = Amounts(milli, milli if qos == "g" else 0, memory, memory)
    res = kubelet.resources(amounts)
    return pod, ContainerInfo(id=f"c{i}", pod_id=pod.id, name="main", resources=res)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(machine_name: str, live: int, decisions: int) -> dict[str, float]:
    machine = load_bundled(machine_name)[1]
    policy = Policy(machine, Options())
    for i in range(live):
        policy.create(*workload(i))
    create: list[float] = []
    release: list[float] = []
    for n in range(decisions):
        pod, ctr = workload(live + n)
        t0 = time.perf_counter()
        policy.create(pod, ctr)
        t1 = time.perf_counter()
        policy.release(ctr.id)
        t2 = time.perf_counter()
        create.append((t1 - t0) * 1e6)
        release.append((t2 - t1) * 1e6)
    return {
        "live": live,
        "create_p50_us": round(statistics.median(create), 1),
        "create_p99_us": round(percentile(create, 0.99), 1),
        "release_p50_us": round(statistics.median(release), 1),
        "release_p99_us": round(percentile(release, 0.99), 1),
    }


def soak(examples: int, steps: int) -> None:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests import machines
    from tests.test_policy_state import CASES, SYNTHETIC, make

    for name, options in CASES:
        machine = SYNTHETIC[name]() if name in SYNTHETIC else machines.load(name)
        t0 = time.perf_counter()
        run_state_machine_as_test(
            make(machine, options),
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            ),
        )
        print(f"{name}: {examples} x {steps} steps ok in {time.perf_counter() - t0:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default="4-socket", help="bundled machine name")
    parser.add_argument("--live", type=int, nargs="+", default=[0, 100, 500])
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--soak", action="store_true", help="run the random-step soak instead")
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    if args.soak:
        soak(args.examples, args.steps)
        return 0
    results = [latency(args.machine, live, args.decisions) for live in args.live]
    for r in results:
        print(
            f"{args.machine} live={r['live']:4}: create p50 {r['create_p50_us']} us "
            f"p99 {r['create_p99_us']} us; release p50 {r['release_p50_us']} us "
            f"p99 {r['release_p99_us']} us"
        )
    if args.json:
        args.json.write_text(json.dumps({"machine": args.machine, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
