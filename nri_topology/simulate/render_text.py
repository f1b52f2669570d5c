"""Terminal output: a table per step, the scoring trace with --explain, and the pool tree."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nri_topology.policy.accounts import hugepages
from nri_topology.policy.accounts.hugepages import resource_name
from nri_topology.policy.choice import scoring
from nri_topology.policy.types import PoolScore
from nri_topology.policy.views import PoolView
from nri_topology.quantity import format_bytes, format_cores
from nri_topology.simulate.runner import Moved, NodeAssignment, NodeState, Simulation, StepResult
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine


def children(pools: Sequence[PoolView], parent: str | None) -> tuple[PoolView, ...]:
    """The pools whose parent is `parent` (None: the roots), in the policy's order."""
    return tuple(p for p in pools if p.parent == parent)


def _set(ids: frozenset[int] | None) -> str:
    if ids is None:
        return "(unchanged)"
    return cpuset.format(ids) or "-"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str) -> list[str]:
    rows = [list(r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    out = []
    for r in [list(header), *rows]:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def describe_machine(machine: Machine, name: str) -> str:
    """One paragraph: sockets, CPUs, threads, nodes per tier, isolated and offline CPUs."""
    cores = len(machine.cores)
    parts = [
        f"{len(machine.packages)} socket(s)",
        f"{len(machine.cpus)} CPUs ({cores} cores x {machine.threads_per_core} threads)",
    ]
    by_tier: dict[str, list[int]] = {}
    for node in sorted(machine.nodes.values(), key=lambda n: n.id):
        by_tier.setdefault(str(node.tier), []).append(node.id)
    for tier, ids in by_tier.items():
        size = sum(machine.nodes[i].memory for i in ids)
        parts.append(f"{tier.upper()} nodes {cpuset.format(ids)} ({format_bytes(size)})")
    if machine.isolated:
        parts.append(f"isolated CPUs {cpuset.format(machine.isolated)}")
    if machine.offline:
        parts.append(f"offline CPUs {cpuset.format(machine.offline)}")
    return f"Machine {name}: " + ", ".join(parts)


def _status(step: StepResult) -> str:
    if step.ok:
        return "" if not step.expect_error else "  [UNEXPECTED: should have failed]"
    if step.as_expected:
        return "  [failed as expected]"
    return "  [FAILED]"


def _exclusive(a: NodeAssignment) -> str:
    """The exclusive CPUs, or "all" when they are the whole cpuset (keeps tables narrow)."""
    if not a.exclusive:
        return "-"
    return "all" if a.exclusive == a.cpus else cpuset.format(a.exclusive)


def _placed_rows(step: StepResult) -> list[list[str]]:
    rows = []
    for p in step.placed:
        a = p.assignment
        rows.append(
            [a.id, a.qos.value, a.pool, a.kind.value, _set(a.mems), _exclusive(a), _set(a.cpus)]
        )
    return rows


def _moved(m: Moved) -> str:
    changes = []
    if m.cpus is not None:
        changes.append(f"cpus {_set(m.cpus)}")
    if m.mems is not None:
        changes.append(f"mems {_set(m.mems)}")
    return f"    updated {m.id}: " + ", ".join(changes or ["cpu shares"])


def _key_value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _explain(step: StepResult) -> list[str]:
    out: list[str] = []
    for p in step.placed:
        out.append(f"    {p.assignment.id}: {p.reason or '(no reason given)'}")
        if p.memory_relaxed:
            out.append("      memory widened beyond the pool: its memory ran out")
        for warning in p.warnings:
            out.append(f"      annotation ignored: {warning}")
        if p.degraded:
            out.append(f"      degraded: {', '.join(p.degraded)}")
        if p.moved:
            out.append(f"      moved to make room: {', '.join(p.moved)}")
        if p.cold_start is not None:
            out.append(
                f"      cold start: after {p.cold_start.delay_ns / 1e9:g} s memory widens to "
                f"{cpuset.format(p.cold_start.then_mems)}"
            )
        out.extend(trace_table(p.trace, "      "))
    return out


def trace_table(trace: Sequence[PoolScore], indent: str) -> list[str]:
    """A decision's scoring trace: a row per pool, a named column per sort-key criterion."""
    if not trace:
        return []
    labelled = [scoring.labelled(s.key) for s in trace]
    names = next((list(k) for k in labelled if k), [])
    rows = [
        [s.pool, s.verdict, *(_key_value(k[n]) if k else "" for n in names)]
        for s, k in zip(trace, labelled, strict=True)
    ]
    headers = ["POOL", "VERDICT", *(n.upper().replace("_", " ") for n in names)]
    return _table(headers, rows, indent)


def steps_table(sim: Simulation, *, explain: bool = False) -> str:
    """Every step: what was placed where, who else moved, what failed."""
    lines = [describe_machine(sim.machine, sim.machine_name)]
    title = sim.workload.name or "workload"
    lines.append(f"Workload {title}: {len(sim.steps)} steps")
    if sim.workload.description:
        lines.append(sim.workload.description.strip())
    for step in sim.steps:
        lines.append("")
        note = f" - {step.note}" if step.note else ""
        lines.append(f"[{step.number}] {step.action} {step.target}{note}{_status(step)}")
        rows = _placed_rows(step)
        if rows:
            header = ["CONTAINER", "QOS", "POOL", "KIND", "MEMS", "EXCLUSIVE", "CPUS"]
            lines.extend(_table(header, rows, "    "))
        for cid in step.released:
            lines.append(f"    released {cid}")
        for m in step.updates:
            lines.append(_moved(m))
        for e in step.errors:
            message = e.message.removeprefix(f"{e.container}: ")  # the policy names it too
            lines.append(f"    error {e.container}: {message}")
        if explain:
            lines.extend(_explain(step))
    failed = [s.number for s in sim.steps if not s.as_expected]
    lines.append("")
    if failed:
        lines.append(f"{len(failed)} step(s) did not go as the workload expected: {failed}")
    else:
        lines.append(f"All {len(sim.steps)} steps went as expected.")
    return "\n".join(lines) + "\n"


def _pool_line(p: PoolView) -> str:
    mems = ", ".join(
        f"{t} {cpuset.format(m.nodes)} ({format_bytes(m.free)} of {format_bytes(m.capacity)} free)"
        for t, m in p.memory.items()
    )
    parts = [
        f"cpus {_set(p.cpus)}",
        f"shared {_set(p.shared)}",
        f"CPU {format_cores(p.free_milli)} of {format_cores(p.capacity_milli)} free",
    ]
    if p.isolated:
        parts.append(f"isolated {cpuset.format(p.isolated)}")
    if p.reserved:
        parts.append(f"reserved {cpuset.format(p.reserved)}")
    if mems:
        parts.append(f"memory {mems}")
    for size, (held, free) in p.hugepages.items():
        parts.append(f"{resource_name(size)} {free} of {held} pages free")
    return f"{p.name}  " + ", ".join(parts)


def _assignment_line(a: NodeAssignment) -> str:
    excl = f" exclusive {cpuset.format(a.exclusive)}" if a.exclusive else ""
    huge = f" ({hugepages.describe(a.hugepages)})" if a.hugepages else ""
    return f"* {a.id} [{a.kind.value}] cpus {_set(a.cpus)} mems {_set(a.mems)}{excl}{huge}"


def pool_tree(sim: NodeState, heading: str = "Pools at the end:") -> str:
    """The pool tree with the containers assigned to each pool (at the end of the workload)."""
    by_pool: dict[str, list[NodeAssignment]] = {}
    for a in sorted(sim.assignments.values(), key=lambda a: a.id):
        by_pool.setdefault(a.pool, []).append(a)
    lines: list[str] = [heading]

    def walk(pool: PoolView, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("`-- " if last else "|-- ")
        lines.append(prefix + branch + _pool_line(pool))
        inner = prefix + ("" if top else ("    " if last else "|   "))
        kids = children(sim.pools, pool.name)
        bar = "|   " if kids else "    "
        for a in by_pool.get(pool.name, []):
            lines.append(inner + bar + _assignment_line(a))
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    for root in children(sim.pools, None):
        walk(root, "", True, True)
    known = {p.name for p in sim.pools}
    for name, items in sorted(by_pool.items()):
        if name not in known:
            lines.append(f"(pool {name!r} not in the tree)")
            lines.extend("    " + _assignment_line(a) for a in items)
    return "\n".join(lines) + "\n"
