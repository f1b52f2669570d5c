"""Moving shared containers so that a Guaranteed container gets whole cores on fewer NUMA nodes.

Every pool with shared containers keeps whole CPUs for them, so a few shared containers in sibling
pools can leave an exclusive request only half cores on two NUMA nodes while moving one of them
frees a whole core on one node, which is what the kubelet's static policy gives
(`benchmarks/kubelet_static.py`, faithful to its packed algorithm). The layout is the 8-CPU guest
where this was seen: 2 sockets x 2 NUMA nodes x one 2-thread core each, siblings numbered next to
each other (node n holds CPUs 2n and 2n+1), 750m reserved on CPU 0.
"""

from __future__ import annotations

import pytest

from benchmarks.kubelet_static import KubeletStatic
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import Decision
from nri_topology.simulate.machine_spec import parse_spec, to_machine
from nri_topology.simulate.render_text import trace_table
from nri_topology.topology.model import Machine
from tests.test_policy_restore import Runtime, workload

GUEST = to_machine(
    parse_spec(
        {
            "name": "guest8",
            "description": "2 sockets x 2 NUMA nodes x one 2-thread core",
            "source": "hand-written",
            "packages": [
                {"id": 0, "cores": ["0,1", "2,3"]},
                {"id": 1, "cores": ["4,5", "6,7"]},
            ],
            "nodes": [{"id": n, "cpus": f"{2 * n},{2 * n + 1}", "memory": "2Gi"} for n in range(4)],
            "distances": [[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]],
        }
    )
)

G2, B500, BE = ("g", 2000), ("b", 500), ("be", 0)

# (id, containers placed before, in order, the Guaranteed one, max_moves,
#  expected (NUMA nodes, split cores) of its CPUs, containers moved)
CASES = [
    # the report: c0 takes node 1, c1 (Burstable) node 2, c2 (BestEffort) node 3; without moves
    # the new one gets CPUs 5 and 7, one thread of each core of socket #1
    ("issue", [G2, B500, BE], G2, 4, (1, 0), ("c2",)),
    ("no-move-budget", [G2, B500, BE], G2, 0, (2, 2), ()),
    ("two-burstable", [G2, B500, ("b", 500)], G2, 4, (1, 0), ("c1",)),
    ("larger-burstable", [G2, ("b", 1500), BE], G2, 4, (1, 0), ("c2",)),
    ("four-shared", [B500, BE, BE, ("b", 200)], G2, 4, (1, 0), ("c1",)),
    # one CPU: a split core is the best there is, nothing moves
    ("one-cpu", [G2, B500, BE], ("g", 1000), 4, (1, 1), ()),
]


def run(
    before: list[tuple[str, int]], last: tuple[str, int], max_moves: int
) -> tuple[Policy, Runtime, KubeletStatic, Decision]:
    """Place `before`, then `last`; the runtime applies every update, as containerd does."""
    policy, rt = Policy(GUEST, Options(max_moves=max_moves)), Runtime()
    kubelet = KubeletStatic.with_reservation(GUEST, 1)
    for i, (qos, milli) in enumerate(before):
        rt.create(policy, *workload(i, qos, milli))
        kubelet.allocate(f"c{i}", milli // 1000 if qos == "g" else 0)
    pod, ctr = workload(len(before), *last)
    rt.pods[pod.id], rt.ctrs[ctr.id] = pod, ctr
    decision = policy.create(pod, ctr)
    rt.pin(ctr.id, decision.placement.cpus, decision.placement.mems)
    rt.apply(decision.updates)
    kubelet.allocate(ctr.id, last[1] // 1000)
    return policy, rt, kubelet, decision


def nodes_and_split(machine: Machine, cpus: frozenset[int]) -> tuple[int, int]:
    """The NUMA nodes of `cpus`, and the cores of which they hold only some threads."""
    nodes = {machine.cpus[c].node for c in cpus}
    split = {machine.cpus[c].threads for c in cpus} - {
        machine.cpus[c].threads for c in cpus if machine.cpus[c].threads <= cpus
    }
    return len(nodes), len(split)


@pytest.mark.parametrize(
    ("before", "last", "max_moves", "expected", "moved"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_shared_containers_move_for_whole_cores_on_fewer_nodes(
    before: list[tuple[str, int]],
    last: tuple[str, int],
    max_moves: int,
    expected: tuple[int, int],
    moved: tuple[str, ...],
) -> None:
    policy, rt, kubelet, decision = run(before, last, max_moves)
    new = f"c{len(before)}"
    placed = policy.assignments()[new]
    assert nodes_and_split(GUEST, placed.exclusive) == expected
    if max_moves:  # as good as the kubelet's static policy
        assert expected == nodes_and_split(GUEST, kubelet.assignments.get(new, frozenset()))
    # the runtime, updated as told, pins nobody else onto the new container's CPUs
    for cid in rt.ctrs:
        if cid != new:
            assert not rt.cpus(cid) & placed.exclusive, cid
    assert rt.cpus(new) == placed.exclusive
    assert decision.moved == moved


def test_the_decision_and_its_trace_name_the_moves() -> None:
    _, _, _, decision = run([G2, B500, BE], G2, 4)
    assert decision.moved == ("c2",) and decision.exclusive == {6, 7}
    assert [u.container_id for u in decision.updates] == ["c2"]
    assert "moved 1 shared container(s) for whole cores on fewer NUMA nodes" in decision.reason
    assert "else CPUs 5,7 on NUMA nodes 2-3" in decision.reason
    (without,) = [s for s in decision.trace if s.pool == "socket #1"]
    assert without.verdict == "lost to NUMA node #3 on moving c2"
    assert "CPUs 5,7 on NUMA nodes 2-3" in without.result.detail
    assert any(
        "lost to NUMA node #3 on moving c2" in line for line in trace_table(decision.trace, "")
    )
