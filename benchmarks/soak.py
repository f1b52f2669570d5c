"""Random soak of the policy: creations, releases, resizes, refusals and restarts on every machine,
with the invariants of `nri_topology.testing.invariants` checked after every step.

Run: ``.venv/bin/python benchmarks/soak.py [--steps 10000] [--seed 1] [--machines NAME ...]``

``--admission EXAMPLES`` runs instead the admission property of tests/test_admission_property.py
with that many examples per machine (workloads the kubelet admits must never be refused).

Steps are spread evenly over the machines (all shared dumps plus the synthetic 256-CPU one by
default). Per step one of: create a random container (the churn mix of `workload`), create one
with an invalid annotation (must be refused with the state unchanged), resize a running one,
release one, or restart: a fresh policy restored from the snapshot and the pinning the runtime
holds, which must keep every container where it was. Any broken rule stops the run with the
machine, step and operation named.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workload import Spec, policy_pair, random_spec, resources
from nri_topology.policy.intake.annotations import DOMAIN
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, PodInfo, PolicyError, QoS
from nri_topology.testing.invariants import InvariantError, RuntimeView, check
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

# Annotations the policy must refuse, each with the state left as it was.
INVALID_ANNOTATIONS: tuple[tuple[str, str], ...] = (
    (f"memory-type.{DOMAIN}/pod", "dramm"),
    (f"prefer-shared-cpus.{DOMAIN}/pod", "maybe"),
    (f"cold-start.{DOMAIN}/pod", "duration: forever"),
    (f"prefer-isolated-cpus.{DOMAIN}/container.app", "2"),
    (f"{DOMAIN}/affinity", "app: [{scope: nowhere}]"),
    ("noderesource.dev/resources", "{not json"),
)


@dataclass
class SoakReport:
    steps: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    machines: list[str] = field(default_factory=list)
    max_live: int = 0

    def summary(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "machines": self.machines,
            "operations": dict(self.operations),
            "refused": dict(self.refused),
            "max_live_containers": self.max_live,
            "invariant_violations": 0,
        }


class SoakError(AssertionError):
    """A broken invariant, with where it happened."""


def _views(policy: Policy) -> tuple[object, object]:
    return dict(policy.assignments()), tuple(policy.pools())


class _MachineSoak:
    def __init__(self, name: str, machine: Machine, rng: random.Random) -> None:
        self.name = name
        self.machine = machine
        self.rng = rng
        self.policy = Policy(machine, Options())
        self.runtime = RuntimeView()
        self.live: dict[str, tuple[PodInfo, ContainerInfo, Spec]] = {}
        self.budget = int(0.9 * (len(machine.cpus) - 1) * 1000)
        self.requested = 0
        self.serial = 0

    def step(self, report: SoakReport) -> None:
        roll = self.rng.random()
        if roll < 0.55 or not self.live:
            op = self._create()
        elif roll < 0.60:
            op = self._invalid()
        elif roll < 0.70:
            op = self._resize()
        elif roll < 0.99:
            op = self._release()
        else:
            op = self._restart()
        report.operations[op.split(":")[0]] += 1
        if ":" in op:
            report.refused[op] += 1
        check(self.policy, self.machine)
        self.runtime.agrees(self.policy)
        report.max_live = max(report.max_live, len(self.live))

    def _new_id(self) -> str:
        self.serial += 1
        return f"{self.name}-{self.serial:05}"

    def _create(self) -> str:
        spec = random_spec(self.rng, self.machine)
        if self.requested + spec.cpu > self.budget:
            return self._release() if self.live else "create:over budget"
        cid = self._new_id()
        pod, ctr = policy_pair(cid, spec)
        before = _views(self.policy)
        try:
            decision = self.policy.create(pod, ctr)
        except PolicyError:
            self._unchanged(before, "refused create")
            return "create:refused"
        self.runtime.created(decision)
        self.live[cid] = (pod, ctr, spec)
        self.requested += spec.cpu
        return "create"

    def _invalid(self) -> str:
        key, value = self.rng.choice(INVALID_ANNOTATIONS)
        pod, ctr = policy_pair(self._new_id(), random_spec(self.rng, self.machine))
        pod = replace(pod, annotations={**pod.annotations, key: value})
        before = _views(self.policy)
        try:
            self.policy.create(pod, ctr)
        except PolicyError:
            self._unchanged(before, f"invalid annotation {key}")
            return "invalid annotation"
        raise InvariantError(f"annotation {key}: {value!r} was accepted")

    def _resize(self) -> str:
        cid = self.rng.choice(sorted(self.live))
        pod, ctr, spec = self.live[cid]
        if spec.qos is QoS.BEST_EFFORT:
            return "resize:best effort"
        new = replace(spec, cpu=max(100, spec.cpu + self.rng.choice((-1000, -500, 500, 1000))))
        if self.requested - spec.cpu + new.cpu > self.budget:
            return "resize:over budget"
        before = _views(self.policy)
        try:
            decision = self.policy.resize(pod, ctr, resources(new))
        except PolicyError:
            self._unchanged(before, "refused resize")
            return "resize:refused"
        self.runtime.resized(decision)
        self.live[cid] = (pod, replace(ctr, resources=resources(new)), new)
        self.requested += new.cpu - spec.cpu
        return "resize"

    def _release(self) -> str:
        cid = self.rng.choice(sorted(self.live))
        updates = self.policy.release(cid)
        self.runtime.removed(cid, updates)
        self.requested -= self.live.pop(cid)[2].cpu
        return "release"

    def _restart(self) -> str:
        """A new policy from the snapshot and the runtime's pinning keeps every placement."""
        pods, ctrs = [], []
        for cid, (pod, ctr, _) in self.live.items():
            cpus, mems = self.runtime.cpus[cid], self.runtime.mems[cid]
            res = replace(
                ctr.resources,
                cpuset_cpus=cpuset.format(cpus) if cpus is not None else "",
                cpuset_mems=cpuset.format(mems) if mems is not None else "",
            )
            pods.append(pod)
            ctrs.append(replace(ctr, resources=res))
        old = self.policy.assignments()
        fresh = Policy(self.machine, Options())
        report = fresh.restore(pods, ctrs, self.policy.snapshot())
        if report.failed or report.replaced or report.updates:
            raise InvariantError(
                f"restart lost placements: failed {dict(report.failed)}, "
                f"re-placed {dict(report.replaced)}, {len(report.updates)} updates"
            )
        new = fresh.assignments()
        for cid, a in old.items():
            b = new[cid]
            if (a.cpus, a.mems, a.exclusive, a.pool) != (b.cpus, b.mems, b.exclusive, b.pool):
                raise InvariantError(f"restart moved {cid}: {a} became {b}")
        self.policy = fresh
        return "restart"

    def _unchanged(self, before: tuple[object, object], what: str) -> None:
        if _views(self.policy) != before:
            raise InvariantError(f"{what} changed the policy state")


def soak(machines: Mapping[str, Machine], steps: int, seed: int) -> SoakReport:
    """`steps` random steps spread over `machines`; raises SoakError at the first broken rule."""
    report = SoakReport(machines=list(machines))
    rng = random.Random(seed)
    runs = [_MachineSoak(name, m, random.Random(rng.random())) for name, m in machines.items()]
    for n in range(steps):
        run = runs[n % len(runs)]
        try:
            run.step(report)
        except InvariantError as exc:
            raise SoakError(f"{run.name}, step {n} (seed {seed}): {exc}") from exc
        report.steps += 1
    return report


def all_machines() -> dict[str, Machine]:
    from benchmarks.workload import load_machine
    from tests.machines import ALL_MACHINES

    return {name: load_machine(name) for name in (*ALL_MACHINES, "synthetic-256")}


def admission(names: list[str], examples: int) -> dict[str, str]:
    """The admission property, `examples` per machine; per machine "ok" or the failure."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from nri_topology.testing import kubelet
    from tests.test_admission_property import scenarios

    def prop(name: str) -> None:
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def run(data: st.DataObject) -> None:
            machine, options, steps = data.draw(scenarios(name))
            kubelet.run(machine, options, steps)

        run()

    out = {}
    for name in names:
        try:
            prop(name)
            out[name] = "ok"
        except InvariantError as exc:
            out[name] = f"FAILED: {exc}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--machines", nargs="+", help="machine names (default: all)")
    parser.add_argument("--admission", type=int, metavar="EXAMPLES", help="admission property")
    args = parser.parse_args()
    if args.admission:
        from tests.test_admission_property import NAMES

        result = admission(args.machines or NAMES, args.admission)
        print(json.dumps(result, indent=2))
        return 0 if all(v == "ok" for v in result.values()) else 1
    machines = all_machines()
    if args.machines:
        machines = {name: machines[name] for name in args.machines}
    start = time.perf_counter()
    try:
        report = soak(machines, args.steps, args.seed)
    except SoakError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    summary = report.summary() | {"seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
