"""A `Machine` as JSON (for tools, simulate and the daemon's logs) and as a readable tree.

JSON document (`machine_json`), described precisely by `JSON_SCHEMA`. CPU and node sets are
strings in the Linux list format ("0-3,8"); object keys that are ids are decimal strings.

    {
      "schema": "nri-topology/machine/v1",
      "counts": {"cpus", "cores", "sockets", "dies", "numa_nodes", "cpu_nodes",
                 "memory_only_nodes", "isolated", "offline": int},
      "threads_per_core": int,
      "cpus": "0-111",                        # online CPUs
      "sockets": [{"id": int, "cpus": str,
                   "dies": [{"id": int, "cpus": str, "nodes": str, "l3": [str, ...]}]}],
      "nodes": [{"id": int, "cpus": str, "memory": int (bytes), "tier": "dram|pmem|hbm|cxl",
                 "tier_source": "cpu|hmat|kernel|heuristic|config",
                 "distances": {"<node id>": int}, "hugepages": {"<page size kB>": int}}],
      "memory": {"<tier>": int (bytes)},      # per tier, tiers with memory only
      "isolated": str, "offline": str,
      "efficiency": str,                      # CPUs of efficiency cores ("" unless hybrid)
      "core_kinds_from": str,                 # sysfs source of the core kinds ("" unless hybrid)
      "warnings": [str],
      "windows_groups": {"machine": [str], "nodes": {"<node id>": [str]}}   # optional
    }

`windows_groups` items are `group:0xMASK` (see `windows.py`), present only when asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nri_topology.topology import cpuset, windows
from nri_topology.topology.model import Machine, MemoryTier

SCHEMA_ID = "nri-topology/machine/v1"

_SET = {"type": "string", "pattern": r"^(\d+(-\d+)?(,\d+(-\d+)?)*)?$"}
_COUNT = {"type": "integer", "minimum": 0}
_ID_MAP = {
    "type": "object",
    "propertyNames": {"pattern": r"^\d+$"},
    "additionalProperties": _COUNT,
}
_GROUPS = {"type": "array", "items": {"type": "string", "pattern": r"^\d+:0x[0-9a-f]{16}$"}}
JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "nri-topology machine",
    "type": "object",
    "required": [
        "schema", "counts", "threads_per_core", "cpus", "sockets", "nodes", "memory",
        "isolated", "offline", "efficiency", "core_kinds_from", "warnings",
    ],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "counts": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                "cpus", "cores", "sockets", "dies", "numa_nodes", "cpu_nodes",
                "memory_only_nodes", "isolated", "offline",
            ],
            "properties": {
                k: _COUNT
                for k in (
                    "cpus", "cores", "sockets", "dies", "numa_nodes", "cpu_nodes",
                    "memory_only_nodes", "isolated", "offline",
                )
            },
        },
        "threads_per_core": {"type": "integer", "minimum": 1},
        "cpus": _SET,
        "sockets": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "cpus", "dies"],
                "properties": {
                    "id": _COUNT,
                    "cpus": _SET,
                    "dies": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["id", "cpus", "nodes", "l3"],
                            "properties": {
                                "id": _COUNT,
                                "cpus": _SET,
                                "nodes": _SET,
                                "l3": {"type": "array", "items": _SET},
                            },
                        },
                    },
                },
            },
        },
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "id", "cpus", "memory", "tier", "tier_source", "distances", "hugepages",
                ],
                "properties": {
                    "id": _COUNT,
                    "cpus": _SET,
                    "memory": _COUNT,
                    "tier": {"enum": [t.value for t in MemoryTier]},
                    "tier_source": {"enum": ["cpu", "hmat", "kernel", "heuristic", "config"]},
                    "distances": _ID_MAP,
                    "hugepages": _ID_MAP,
                },
            },
        },
        "memory": {
            "type": "object",
            "propertyNames": {"enum": [t.value for t in MemoryTier]},
            "additionalProperties": _COUNT,
        },
        "isolated": _SET,
        "offline": _SET,
        "efficiency": _SET,
        "core_kinds_from": {"type": "string"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "windows_groups": {
            "type": "object",
            "additionalProperties": False,
            "required": ["machine", "nodes"],
            "properties": {
                "machine": _GROUPS,
                "nodes": {
                    "type": "object",
                    "propertyNames": {"pattern": r"^\d+$"},
                    "additionalProperties": _GROUPS,
                },
            },
        },
    },
}  # fmt: skip


def _dies(machine: Machine) -> dict[int, dict[int, set[int]]]:
    """package -> die -> CPU ids."""
    out: dict[int, dict[int, set[int]]] = {}
    for c in machine.cpus.values():
        out.setdefault(c.package, {}).setdefault(c.die, set()).add(c.id)
    return {p: dict(sorted(d.items())) for p, d in sorted(out.items())}


def _l3_groups(machine: Machine, cpus: Iterable[int]) -> list[frozenset[int]]:
    return sorted({machine.cpus[c].l3 for c in cpus}, key=min)


def memory_per_tier(machine: Machine) -> dict[str, int]:
    """Total bytes per memory tier, tiers without memory left out."""
    out: dict[str, int] = {}
    for n in machine.nodes.values():
        if n.memory:
            out[n.tier.value] = out.get(n.tier.value, 0) + n.memory
    return out


def machine_json(machine: Machine, *, windows_groups: bool = False) -> dict[str, Any]:
    """The JSON document described in the module docstring and `JSON_SCHEMA`."""
    dies = _dies(machine)
    doc: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "counts": {
            "cpus": len(machine.cpus),
            "cores": len(machine.cores),
            "sockets": len(dies),
            "dies": sum(len(d) for d in dies.values()),
            "numa_nodes": len(machine.nodes),
            "cpu_nodes": len(machine.cpu_nodes),
            "memory_only_nodes": len(machine.memory_only_nodes),
            "isolated": len(machine.isolated),
            "offline": len(machine.offline),
        },
        "threads_per_core": machine.threads_per_core,
        "cpus": cpuset.format(machine.cpus),
        "sockets": [
            {
                "id": pkg,
                "cpus": cpuset.format(set().union(*per_die.values())),
                "dies": [
                    {
                        "id": die,
                        "cpus": cpuset.format(cpus),
                        "nodes": cpuset.format(
                            machine.cpus[c].node for c in cpus if machine.cpus[c].node >= 0
                        ),
                        "l3": [cpuset.format(g) for g in _l3_groups(machine, cpus)],
                    }
                    for die, cpus in per_die.items()
                ],
            }
            for pkg, per_die in dies.items()
        ],
        "nodes": [
            {
                "id": n.id,
                "cpus": cpuset.format(n.cpus),
                "memory": n.memory,
                "tier": n.tier.value,
                "tier_source": n.tier_source,
                "distances": {str(k): v for k, v in sorted(n.distances.items())},
                "hugepages": {str(k): v for k, v in sorted(n.hugepages.items())},
            }
            for n in sorted(machine.nodes.values(), key=lambda n: n.id)
        ],
        "memory": memory_per_tier(machine),
        "isolated": cpuset.format(machine.isolated),
        "offline": cpuset.format(machine.offline),
        "efficiency": cpuset.format(machine.efficiency_cpus),
        "core_kinds_from": machine.core_kinds_from,
        "warnings": list(machine.warnings),
    }
    if windows_groups:
        doc["windows_groups"] = {
            "machine": [str(g) for g in windows.machine_groups(machine)],
            "nodes": {str(k): [str(g) for g in v] for k, v in windows.node_groups(machine).items()},
        }
    return doc


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _size(n: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _hugepages(pages: dict[int, int] | Any) -> str:
    return ", ".join(f"{_size(k * 1024)} x {v}" for k, v in sorted(pages.items())) or "none"


def machine_text(machine: Machine, *, windows_groups: bool = False) -> str:
    """A readable tree: sockets, dies, NUMA nodes with CPUs and cores, then memory and distances."""

    def cpus(ids: Iterable[int]) -> str:
        return windows.render(ids, groups=windows_groups)

    dies = _dies(machine)
    counts = machine_json(machine)["counts"]
    lines = [
        f"machine: {_n(counts['cpus'], 'CPU')}, {_n(counts['cores'], 'core')} "
        f"({_n(machine.threads_per_core, 'thread')} per core), "
        f"{_n(counts['sockets'], 'socket')}, {_n(counts['dies'], 'die')}, "
        f"{_n(counts['numa_nodes'], 'NUMA node')} ({counts['memory_only_nodes']} memory-only)",
        f"root: CPUs {cpus(machine.cpus)}",
    ]
    for p_idx, (pkg, per_die) in enumerate(dies.items()):
        last_pkg = p_idx == len(dies) - 1
        pkg_cpus = set().union(*per_die.values())
        lines.append(f"{'└─' if last_pkg else '├─'} socket {pkg}: CPUs {cpus(pkg_cpus)}")
        pad = "   " if last_pkg else "│  "
        for d_idx, (die, die_cpus) in enumerate(per_die.items()):
            dpad = pad
            if len(per_die) > 1:  # a lone die adds nothing to its socket
                last_die = d_idx == len(per_die) - 1
                lines.append(f"{pad}{'└─' if last_die else '├─'} die {die}: CPUs {cpus(die_cpus)}")
                dpad = pad + ("   " if last_die else "│  ")
            by_node: dict[int, set[int]] = {}
            for c in die_cpus:
                by_node.setdefault(machine.cpus[c].node, set()).add(c)
            l3 = _l3_groups(machine, die_cpus)
            items = [_node_lines(machine, n, ids, cpus) for n, ids in sorted(by_node.items())]
            if len(l3) > 1:
                items.append([f"L3 groups: {' | '.join(cpus(g) for g in l3)}"])
            for i, item in enumerate(items):
                last = i == len(items) - 1
                lines.append(f"{dpad}{'└─' if last else '├─'} {item[0]}")
                lines += [f"{dpad}{'   ' if last else '│  '}{rest}" for rest in item[1:]]
    memory_only = [machine.nodes[n] for n in machine.memory_only_nodes]
    if memory_only:
        lines.append("memory-only NUMA nodes:")
        for n in memory_only:
            near = min(
                machine.cpu_nodes, key=lambda c: (n.distances.get(c, 1 << 30), c), default=-1
            )
            where = f", nearest CPU node {near} (distance {n.distances[near]})" if near >= 0 else ""
            tier = f"{n.tier.value.upper()} ({n.tier_source})"
            lines.append(
                f"  node {n.id}: {_size(n.memory)} {tier}{where}; "
                f"hugepages {_hugepages(n.hugepages)}"
            )
    empty = [
        n
        for n in sorted(machine.nodes)
        if not machine.nodes[n].cpus and n not in machine.memory_only_nodes
    ]
    if empty:  # e.g. generic initiators (accelerators) or nodes whose CPUs are all offline
        lines.append(f"NUMA nodes without online CPUs or memory: {cpuset.format(empty)}")
    lines.append(
        "memory per tier: "
        + (", ".join(f"{t} {_size(v)}" for t, v in memory_per_tier(machine).items()) or "none")
    )
    ids = sorted(machine.nodes)
    width = max(len(str(i)) for i in [*ids, 100]) + 1
    lines.append("NUMA distances:")
    lines.append(" " * (width + 2) + "".join(f"{i:>{width}}" for i in ids))
    for a in ids:
        row = "".join(f"{machine.nodes[a].distances.get(b, 0):>{width}}" for b in ids)
        lines.append(f"  {a:>{width}}{row}")
    lines.append(f"isolated CPUs: {cpus(machine.isolated) or '-'}")
    lines.append(f"offline CPUs: {cpuset.format(machine.offline) or '-'}")
    if machine.efficiency_cpus:
        lines.append(
            f"efficiency cores: {cpuset.format(machine.efficiency_cpus)} "
            f"(from {machine.core_kinds_from})"
        )
    if machine.warnings:
        lines.append("warnings:")
        lines += [f"  - {w}" for w in machine.warnings]
    return "\n".join(lines) + "\n"


def _node_lines(machine: Machine, node: int, ids: set[int], cpus: Any) -> list[str]:
    cores = sorted({machine.cpus[c].threads for c in ids}, key=min)
    core_text = " ".join("[" + cpuset.format(t) + "]" for t in cores)
    if node < 0:
        return [f"no NUMA node: CPUs {cpus(ids)}", f"cores ({len(cores)}): {core_text}"]
    n = machine.nodes[node]
    return [
        f"NUMA node {node}: CPUs {cpus(ids)}",
        f"cores ({len(cores)}): {core_text}",
        f"memory {_size(n.memory)} {n.tier.value.upper()} ({n.tier_source}); "
        f"hugepages {_hugepages(n.hugepages)}",
    ]
