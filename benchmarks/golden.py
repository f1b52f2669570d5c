"""Golden decisions: every decision of seeded churn traces through the real `Policy`, as text.

Run: ``PYTHONHASHSEED=0 .venv/bin/python benchmarks/golden.py [--steps 1500] [--out FILE]``

A refactoring of the policy must leave this output byte-identical: compare the file written on
the branch's base with the one written after the change (``cmp base.txt after.txt``). The hash
seed is fixed because a frozenset of enum strings prints in hash order.

Per machine (`workload.MACHINES`), per options (the daemon's defaults from an empty
configuration, `Options()`, `Options(shared_placement="pack")`, and whole cores with strict
reserved CPUs and distribution across NUMA nodes) and per load (0.85, 1.0, and 1.5 for the
degradation ladder): the churn trace of `workload.churn`, where one arrival in five instead
resizes a live container and every 300th step restarts the policy from its snapshot and the
pinning the runtime holds. Written are each decision's repr (trace, reason and updates
included), each refusal, each release's updates, each restore report, and the snapshot at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workload import MACHINES, churn, load_machine, policy_pair, resources
from nri_topology.config.schema import Config
from nri_topology.configured import policy_options
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, Decision, PodInfo, PolicyError
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

OPTIONS: dict[str, Options] = {
    "daemon": policy_options(Config()),
    "default": Options(),
    "pack": Options(shared_placement="pack"),
    "strict": Options(full_pcpus_only=True, strict_reserved_cpus=True, distribute_across_numa=True),
}
LOADS = (0.85, 1.0, 1.5)
RESTART_EVERY = 300


def _restart(policy: Policy, machine: Machine, options: Options, live: dict) -> Policy:
    """A fresh policy restored from the snapshot and the pinning the runtime holds."""
    placements = policy.placements()
    pods: list[PodInfo] = []
    containers: list[ContainerInfo] = []
    for cid in sorted(live):
        pod, ctr = live[cid]
        p = placements.get(cid)
        if p is not None:
            ctr = replace(
                ctr,
                resources=replace(
                    ctr.resources,
                    cpuset_cpus=cpuset.format(p.cpus) if p.cpus is not None else "",
                    cpuset_mems=cpuset.format(p.mems) if p.mems is not None else "",
                ),
            )
        pods.append(pod)
        containers.append(ctr)
    fresh = Policy(machine, options)
    fresh.restore(pods, containers, json.loads(json.dumps(policy.snapshot())))
    return fresh


def _shown(decision: Decision) -> str:
    """A decision's repr with each sort key as a plain tuple: the key's values, not its type,
    are the decision."""
    trace = tuple(replace(s, key=tuple(s.key)) for s in decision.trace)
    return repr(replace(decision, trace=trace))


def trace(machine: Machine, options: Options, load: float, steps: int, seed: int) -> Iterator[str]:
    """The lines of one trace."""
    rng = random.Random(seed)
    policy = Policy(machine, options)
    live: dict[str, tuple[PodInfo, ContainerInfo]] = {}
    for step, event in enumerate(churn(machine, seed, steps, load)):
        if step and step % RESTART_EVERY == 0:
            before = policy.snapshot()
            policy = _restart(policy, machine, options, live)
            yield f"{step} restart same={policy.snapshot() == before}"
        cid, spec = event.container_id, event.spec
        if spec is None:
            live.pop(cid, None)
            yield f"{step} release {cid} {policy.release(cid)!r}"
            continue
        if live and rng.random() < 0.2:
            target = rng.choice(sorted(live))
            pod, ctr = live[target]
            new = resources(spec)
            try:
                decision = policy.resize(pod, ctr, new)
            except PolicyError as e:
                yield f"{step} resize {target} refused {e}"
            else:
                live[target] = (pod, replace(ctr, resources=new))
                yield f"{step} resize {_shown(decision)}"
            continue
        pod, ctr = policy_pair(cid, spec)
        try:
            decision = policy.create(pod, ctr)
        except PolicyError as e:
            yield f"{step} create {cid} refused {e}"
        else:
            live[cid] = (pod, ctr)
            yield f"{step} create {_shown(decision)}"
    yield "snapshot " + json.dumps(policy.snapshot(), sort_keys=True)


def golden(steps: int, seed: int) -> Iterator[str]:
    for name in MACHINES:
        machine = load_machine(name)
        for label, options in OPTIONS.items():
            for load in LOADS:
                yield f"== {name} {label} load={load}"
                yield from trace(machine, options, load, steps, seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write here (default: standard output)")
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") is None:
        parser.error("set PYTHONHASHSEED (sets of enum strings print in hash order)")
    out = args.out.open("w", encoding="utf-8") if args.out else sys.stdout
    with out:
        for line in golden(args.steps, args.seed):
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
