"""Placement quality on a churn trace: our policy side by side with a kubelet-static baseline.

Both placers see the same seeded trace and are judged by the same code from the pinning they
give each container (CPUs, memory nodes, exclusive CPUs):

* local share - of the admitted containers that could fit in one NUMA node (their CPU request
  rounded up and their memory fit the node with the memory-only nodes next to it), the share
  whose CPUs and memory sit in one node;
* spanning containers - those whose CPUs touch several NUMA nodes: their average pairwise NUMA
  distance and the lowest average any node set of the same size that could hold them has;
* rejected requests;
* CPUs moved - for containers that were already running, exclusive CPUs that changed (should be
  none) and CPUs added to or removed from their cpusets (shared pools growing and shrinking).

Run: ``.venv/bin/python benchmarks/quality.py [--steps 3000] [--seed 1] [--load 0.85]
[--machines NAME ...]`` (one JSON line per machine; `benchmarks/run.py` uses load 0.85; at
load 1.0 the trace fills every CPU but one, as far as the kubelet would admit).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kubelet_static import KubeletStatic
from benchmarks.workload import Event, Spec, churn, policy_pair
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import PolicyError, QoS
from nri_topology.topology.model import Machine


@dataclass(frozen=True, slots=True)
class Pinning:
    cpus: frozenset[int]
    mems: frozenset[int]
    exclusive: frozenset[int]


class Placer(Protocol):
    name: str

    def admit(self, cid: str, spec: Spec) -> bool: ...
    def remove(self, cid: str) -> None: ...
    def pinning(self) -> Mapping[str, Pinning]: ...


class Ours:
    """The policy with default options, as the daemon runs it."""

    name = "nri-topology"

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.policy = Policy(machine, Options())
        self._all_cpus = machine.all_cpus
        self._all_nodes = frozenset(machine.nodes)

    def admit(self, cid: str, spec: Spec) -> bool:
        try:
            self.policy.create(*policy_pair(cid, spec))
        except PolicyError:
            return False
        return True

    def remove(self, cid: str) -> None:
        self.policy.release(cid)

    def pinning(self) -> Mapping[str, Pinning]:
        return {
            cid: Pinning(a.cpus or self._all_cpus, a.mems or self._all_nodes, a.exclusive)
            for cid, a in self.policy.assignments().items()
        }


class Baseline:
    """Kubelet static CPU manager (1 reserved CPU, like our 750m rounded up) + memory binding."""

    name = "kubelet-static"

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.kubelet = KubeletStatic.with_reservation(machine, 1)
        self.live: set[str] = set()
        self._node_of = {c.id: c.node for c in machine.cpus.values()}
        self._all_nodes = frozenset(machine.nodes)

    def admit(self, cid: str, spec: Spec) -> bool:
        exclusive = spec.cpu // 1000 if spec.qos is QoS.GUARANTEED and spec.cpu % 1000 == 0 else 0
        try:
            self.kubelet.allocate(cid, exclusive)
        except ValueError:
            return False
        self.live.add(cid)
        return True

    def remove(self, cid: str) -> None:
        self.kubelet.release(cid)
        self.live.discard(cid)

    def pinning(self) -> Mapping[str, Pinning]:
        shared = self.kubelet.default_cpuset
        out = {}
        for cid in self.live:
            cpus = self.kubelet.assignments.get(cid)
            if cpus is None:
                out[cid] = Pinning(shared, self._all_nodes, frozenset())
            else:
                out[cid] = Pinning(cpus, frozenset(self._node_of[c] for c in cpus), cpus)
        return out


@dataclass
class Quality:
    """What one placer did with one trace."""

    placer: str
    admitted: int = 0
    rejected: int = 0
    could_fit_one: int = 0
    local: int = 0
    spanning: int = 0
    spanning_minimal: int = 0
    distance_sum: float = 0.0
    minimal_distance_sum: float = 0.0
    exclusive_cpus_moved: int = 0
    cpuset_cpus_changed: int = 0

    def summary(self) -> dict[str, object]:
        spanning = max(self.spanning, 1)
        return {
            "placer": self.placer,
            "admitted": self.admitted,
            "rejected": self.rejected,
            "local_share": round(self.local / max(self.could_fit_one, 1), 4),
            "local": self.local,
            "could_fit_one_node": self.could_fit_one,
            "spanning": self.spanning,
            "spanning_avg_distance": round(self.distance_sum / spanning, 2),
            "spanning_min_possible_distance": round(self.minimal_distance_sum / spanning, 2),
            "spanning_minimal_share": round(self.spanning_minimal / spanning, 4)
            if self.spanning
            else 1.0,
            "exclusive_cpus_moved": self.exclusive_cpus_moved,
            "cpuset_cpus_changed": self.cpuset_cpus_changed,
        }


class Judge:
    """The measures of the module docstring, for one machine."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.node_of = {c.id: c.node for c in machine.cpus.values()}
        self.cpu_nodes = machine.cpu_nodes
        # memory-only nodes belong to the CPU node closest to them
        self.attached: dict[int, set[int]] = {n: {n} for n in self.cpu_nodes}
        for m in machine.memory_only_nodes:
            near = min(self.cpu_nodes, key=lambda n: (machine.distance(m, n), n))
            self.attached[near].add(m)

    def fits_one_node(self, spec: Spec) -> bool:
        for n in self.cpu_nodes:
            memory = sum(self.machine.nodes[m].memory for m in self.attached[n])
            if len(self.machine.nodes[n].cpus) >= spec.whole_cpus and memory >= spec.memory:
                return True
        return False

    def nodes(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(self.node_of[c] for c in cpus)

    def is_local(self, p: Pinning) -> bool:
        nodes = self.nodes(p.cpus)
        if len(nodes) != 1:
            return False
        (n,) = nodes
        return p.mems <= self.attached[n]

    def avg_distance(self, nodes: Iterable[int]) -> float:
        ns = sorted(nodes)
        pairs = [(a, b) for a in ns for b in ns if a != b]
        return sum(self.machine.distance(a, b) for a, b in pairs) / len(pairs)

    @cache  # noqa: B019 - one judge per machine, lives for one benchmark run
    def minimal_distance(self, size: int, cpus_needed: int) -> float:
        """Lowest average distance over node sets of `size` nodes with enough CPUs."""
        best = None
        for combo in itertools.combinations(self.cpu_nodes, size):
            if sum(len(self.machine.nodes[n].cpus) for n in combo) < cpus_needed:
                continue
            d = self.avg_distance(combo)
            best = d if best is None else min(best, d)
        return best if best is not None else self.avg_distance(self.cpu_nodes[:size])


def run_trace(machine: Machine, placer: Placer, events: Iterable[Event]) -> Quality:
    judge = Judge(machine)
    q = Quality(placer.name)
    before = placer.pinning()
    for ev in events:
        if ev.spec is not None:
            if not placer.admit(ev.container_id, ev.spec):
                q.rejected += 1
                continue
            q.admitted += 1
            after = placer.pinning()
            mine = after[ev.container_id]
            if judge.fits_one_node(ev.spec):
                q.could_fit_one += 1
                q.local += judge.is_local(mine)
            nodes = judge.nodes(mine.cpus)
            if len(nodes) > 1:
                q.spanning += 1
                actual = judge.avg_distance(nodes)
                minimal = judge.minimal_distance(len(nodes), max(ev.spec.whole_cpus, 1))
                q.distance_sum += actual
                q.minimal_distance_sum += minimal
                q.spanning_minimal += actual <= minimal + 1e-9
        else:
            if ev.container_id not in before:
                continue  # it was rejected
            placer.remove(ev.container_id)
            after = placer.pinning()
        for cid, old in before.items():
            new = after.get(cid)
            if new is None:
                continue
            q.exclusive_cpus_moved += len(old.exclusive - new.exclusive)
            q.cpuset_cpus_changed += len(old.cpus ^ new.cpus)
        before = after
    return q


def compare(
    machine: Machine, seed: int, steps: int, load: float = 0.85
) -> dict[str, dict[str, object]]:
    """Ours and the baseline on the same trace; summaries by placer name."""
    out = {}
    for placer in (Ours(machine), Baseline(machine)):
        trace = churn(machine, seed, steps, load)
        out[placer.name] = run_trace(machine, placer, trace).summary()
    return out


def main() -> int:
    from benchmarks.workload import MACHINES, load_machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=0.85)
    parser.add_argument("--machines", nargs="+", default=list(MACHINES))
    args = parser.parse_args()
    for name in args.machines:
        result = compare(load_machine(name), args.seed, args.steps, args.load)
        print(json.dumps({"machine": name, "load": args.load, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
