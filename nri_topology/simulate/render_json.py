"""`--json`: the simulation as one document with stable keys (schema in docs/simulate.md).

Every key is always present (empty lists, null for "not set"), sets are Linux list strings,
and lists are in a fixed order, so two runs of the same workload give identical output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nri_topology.policy.accounts.hugepages import resource_name
from nri_topology.policy.choice import scoring
from nri_topology.policy.types import PoolScore
from nri_topology.policy.views import PoolView
from nri_topology.simulate.runner import NodeAssignment, NodeState, Placed, Simulation, StepResult
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

SCHEMA = "nri-topology/simulate/v1"


def _set(ids: frozenset[int] | None) -> str | None:
    return None if ids is None else cpuset.format(ids)


def _assignment(a: NodeAssignment) -> dict[str, Any]:
    return {
        "id": a.id,
        "namespace": a.namespace,
        "pod": a.pod,
        "container": a.name,
        "qos": a.qos.value,
        "pool": a.pool,
        "kind": a.kind.value,
        "cpus": _set(a.cpus),
        "mems": _set(a.mems),
        "exclusive": cpuset.format(a.exclusive),
        "cpu_shares": a.cpu_shares,
        "memory_tiers": sorted(str(t) for t in a.memory_tiers),
        "hugepages": hugepages(a.hugepages),
    }


def hugepages(layout: tuple[tuple[int, int, int], ...]) -> list[dict[str, Any]]:
    """Hugepages booked: one entry per node and page size."""
    return [
        {"node": node, "resource": resource_name(size), "pages": count}
        for node, size, count in layout
    ]


def _placed(p: Placed, explain: bool) -> dict[str, Any]:
    doc = _assignment(p.assignment)
    doc["reason"] = p.reason
    doc["memory_relaxed"] = p.memory_relaxed
    doc["cold_start"] = (
        None
        if p.cold_start is None
        else {"delay_ns": p.cold_start.delay_ns, "then_mems": _set(p.cold_start.then_mems)}
    )
    if p.warnings:
        doc["warnings"] = list(p.warnings)
    if p.degraded:
        doc["degraded"] = list(p.degraded)
    if p.moved:
        doc["moved"] = list(p.moved)
    if explain:
        doc["trace"] = trace(p.trace)
    return doc


def trace(scores: Sequence[PoolScore]) -> list[dict[str, Any]]:
    """A decision's scoring trace: every pool with its sort key, named criteria and verdict."""
    return [
        {
            "pool": s.pool,
            "key": [_scalar(k) for k in s.key],
            "criteria": scoring.labelled(s.key),
            "verdict": s.verdict,
        }
        for s in scores
    ]


def _scalar(value: object) -> object:
    """Sort-key elements as JSON values: numbers and strings stay, anything else becomes text."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, frozenset | set) and all(isinstance(v, int) for v in value):
        return cpuset.format(value)
    if isinstance(value, tuple | list):
        return [_scalar(v) for v in value]
    return str(value)


def _step(step: StepResult, explain: bool) -> dict[str, Any]:
    return {
        "step": step.number,
        "action": step.action,
        "target": step.target,
        "note": step.note,
        "expect_error": step.expect_error,
        "ok": step.ok,
        "as_expected": step.as_expected,
        "containers": [_placed(p, explain) for p in step.placed],
        "updates": [{"id": m.id, "cpus": _set(m.cpus), "mems": _set(m.mems)} for m in step.updates],
        "released": list(step.released),
        "errors": [
            {"container": e.container, "message": e.message, "internal": e.internal}
            for e in step.errors
        ],
    }


def _pool(p: PoolView) -> dict[str, Any]:
    return {
        "name": p.name,
        "kind": p.kind,
        "depth": p.depth,
        "parent": p.parent,
        "cpus": cpuset.format(p.cpus),
        "shared": cpuset.format(p.shared),
        "isolated": cpuset.format(p.isolated),
        "reserved": cpuset.format(p.reserved),
        "capacity_milli": p.capacity_milli,
        "assigned_milli": p.assigned_milli,
        "free_milli": p.free_milli,
        "containers": p.containers,
        "memory": {
            str(tier): {
                "nodes": cpuset.format(m.nodes),
                "capacity": m.capacity,
                "assigned": m.assigned,
                "free": m.free,
            }
            for tier, m in sorted(p.memory.items())
        },
        "hugepages": {
            resource_name(size): {"pages": held, "free": free}
            for size, (held, free) in p.hugepages.items()
        },
    }


def machine(m: Machine, name: str) -> dict[str, Any]:
    """The machine: CPUs, isolated and offline ones, NUMA nodes with memory and tier."""
    return {
        "name": name,
        "cpus": cpuset.format(m.cpus),
        "isolated": cpuset.format(m.isolated),
        "offline": cpuset.format(m.offline),
        "efficiency": cpuset.format(m.efficiency_cpus),
        "nodes": [
            {
                "id": n.id,
                "cpus": cpuset.format(n.cpus),
                "memory": n.memory,
                "tier": str(n.tier),
            }
            for n in sorted(m.nodes.values(), key=lambda n: n.id)
        ],
    }


def node(state: NodeState) -> dict[str, Any]:
    """Every container's placement (by id) and every pool with its capacity and what is free."""
    return {
        "containers": [_assignment(state.assignments[k]) for k in sorted(state.assignments)],
        "pools": [_pool(p) for p in state.pools],
    }


def to_document(sim: Simulation, *, explain: bool = False) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "machine": machine(sim.machine, sim.machine_name),
        "workload": {"name": sim.workload.name, "description": sim.workload.description},
        "steps": [_step(s, explain) for s in sim.steps],
        "final": node(sim),
        "summary": {
            "steps": len(sim.steps),
            "failed": sum(1 for s in sim.steps if not s.ok),
            "unexpected": [s.number for s in sim.steps if not s.as_expected],
        },
    }


def render(sim: Simulation, *, explain: bool = False) -> str:
    return json.dumps(to_document(sim, explain=explain), indent=2) + "\n"
