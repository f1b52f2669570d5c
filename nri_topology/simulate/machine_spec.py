"""Compact machine descriptions: a `Machine` as a small JSON/YAML document, both ways.

An installed package has no sysfs dumps to read, so the simulator ships machines in this form
(`nri_topology/data/machines/*.json`) and `bundle.py` generates them from real dumps. The format
is documented in docs/simulate.md. What it keeps: packages, dies, cores (as thread lists), NUMA
nodes with CPUs, memory, tier, hugepages and distances, isolated and offline CPUs, and the CPUs
of efficiency cores on hybrid machines. What it derives unless told: core ids are positions
within the die, clusters equal cores, a core's L2 is its threads, L3 is its die, a tier came from
the node having CPUs (or from the description). `from_machine` writes the optional keys only
where a machine departs from those rules, so a description of a real host loads back as exactly
the `Machine` the topology reader gave.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from msgspec import Meta, Struct

from nri_topology.config.validate import Before, Invalid, convert
from nri_topology.quantity import memory_bytes
from nri_topology.topology import cpuset
from nri_topology.topology.model import CoreKind, Cpu, Machine, MemoryTier, NumaNode

FORMAT_VERSION = 1


class MachineSpecError(ValueError):
    """A machine description that cannot be turned into a Machine; the message names the key."""


def _cpu_list(value: object) -> frozenset[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return frozenset({value})
    if isinstance(value, list | set | frozenset):
        return frozenset(int(v) for v in value)
    if isinstance(value, str):
        return cpuset.parse(value)
    raise ValueError(f"expected a CPU list such as '0-3,8', got {value!r}")


def _bytes(value: object) -> int:
    if isinstance(value, str | int | float):
        return memory_bytes(value)
    raise ValueError(f"expected a memory quantity such as '32Gi', got {value!r}")


CpuList = Annotated[frozenset[int], Before(_cpu_list)]
Bytes = Annotated[int, Before(_bytes)]
TierSource = Literal["cpu", "hmat", "kernel", "heuristic", "config"]


class _Strict(Struct, forbid_unknown_fields=True, frozen=True):
    pass


class DieSpec(_Strict, kw_only=True):
    id: int = 0
    cores: Annotated[list[CpuList], Meta(min_length=1)]  # each core: its hardware threads
    core_ids: list[int] | None = None  # the kernel's core_id of each core; default: positions
    clusters: dict[int, CpuList] | None = None  # cluster id -> its CPUs; default: one per core


class PackageSpec(_Strict, kw_only=True):
    id: int
    dies: list[DieSpec] | None = None
    cores: list[CpuList] | None = None  # shorthand for a single die 0

    def all_dies(self) -> list[DieSpec]:
        if (self.dies is None) == (self.cores is None):
            raise ValueError(f"package {self.id}: give exactly one of 'dies' or 'cores'")
        return self.dies if self.dies is not None else [DieSpec(id=0, cores=self.cores or [])]


class NodeSpec(_Strict, kw_only=True):
    id: int
    cpus: CpuList = frozenset()
    memory: Bytes = 0
    tier: MemoryTier | None = None  # default: dram for nodes with CPUs; required otherwise
    tier_source: TierSource | None = None  # default: "cpu" for DRAM with CPUs, else "config"
    hugepages: dict[int, int] = {}  # page size in kB -> pages
    normal_memory: bool = True  # false: movable-only memory, not in has_normal_memory


class CacheSpec(_Strict, kw_only=True):
    """CPUs sharing a cache, as groups; every CPU in exactly one group of a level given."""

    l2: list[CpuList] | None = None  # default: each core's threads
    l3: list[CpuList] | None = None  # default: each die's CPUs


class MachineSpec(_Strict, kw_only=True):
    format: int = FORMAT_VERSION
    name: str
    description: str = ""
    source: str = ""  # where the description came from (a dump, or "hand-written")
    isolated: CpuList = frozenset()
    offline: CpuList = frozenset()
    efficiency: CpuList = frozenset()  # CPUs of efficiency cores (hybrid machines)
    core_kinds_from: str | None = None  # where the kinds were read; default: this description
    packages: Annotated[list[PackageSpec], Meta(min_length=1)]
    nodes: Annotated[list[NodeSpec], Meta(min_length=1)]
    distances: list[list[int]]  # rows and columns in the order of `nodes`
    caches: CacheSpec = CacheSpec()
    warnings: list[str] = []  # what the topology reader could not read


def _build(spec: MachineSpec) -> Machine:
    """Check cross-references and build the Machine; errors name the package, node or CPU."""
    if spec.format != FORMAT_VERSION:
        raise MachineSpecError(f"format: version {spec.format} is not supported (only 1)")
    node_of: dict[int, int] = {}
    node_ids = [n.id for n in spec.nodes]
    if len(set(node_ids)) != len(node_ids):
        raise MachineSpecError(f"nodes: duplicate node ids in {node_ids}")
    for node in spec.nodes:
        for cpu in node.cpus:
            if cpu in node_of:
                raise MachineSpecError(
                    f"nodes[id={node.id}].cpus: CPU {cpu} is also in node {node_of[cpu]}"
                )
            node_of[cpu] = node.id
    cpus: dict[int, Cpu] = {}
    for pkg in spec.packages:
        try:
            dies = pkg.all_dies()
        except ValueError as exc:
            raise MachineSpecError(f"packages: {exc}") from None
        for die in dies:
            where = f"packages[id={pkg.id}].dies[id={die.id}]"
            die_cpus = frozenset().union(*die.cores)
            core_ids = die.core_ids if die.core_ids is not None else range(len(die.cores))
            if len(core_ids) != len(die.cores):
                raise MachineSpecError(f"{where}.core_ids: need one id per core")
            cluster_of = _group_ids(die.clusters or {}, f"{where}.clusters")
            if cluster_of.keys() - die_cpus:
                stray = cpuset.format(cluster_of.keys() - die_cpus)
                raise MachineSpecError(f"{where}.clusters: CPUs {stray} are not in this die")
            for pos, (core_id, threads) in enumerate(zip(core_ids, die.cores, strict=True)):
                if not threads:
                    raise MachineSpecError(f"{where}.cores[{pos}]: empty core")
                for cpu in sorted(threads):
                    if cpu in cpus:
                        raise MachineSpecError(
                            f"packages[id={pkg.id}]: CPU {cpu} appears in more than one core"
                        )
                    if die.clusters is not None and cpu not in cluster_of:
                        raise MachineSpecError(f"{where}.clusters: CPU {cpu} is in no cluster")
                    cpus[cpu] = Cpu(
                        id=cpu,
                        package=pkg.id,
                        die=die.id,
                        cluster=cluster_of.get(cpu, core_id),
                        core=core_id,
                        node=node_of.get(cpu, -1),
                        threads=threads,
                        l2=threads,
                        l3=die_cpus,
                        kind=(
                            CoreKind.EFFICIENCY if cpu in spec.efficiency else CoreKind.PERFORMANCE
                        ),
                    )
    cpus = _with_caches(cpus, spec.caches)
    unknown = set(node_of) - set(cpus)
    if unknown:
        raise MachineSpecError(f"nodes: CPUs {cpuset.format(unknown)} are in no package's cores")
    if not spec.isolated <= cpus.keys():
        missing = cpuset.format(spec.isolated - cpus.keys())
        raise MachineSpecError(f"isolated: CPUs {missing} are in no package's cores")
    if not spec.efficiency <= cpus.keys():
        missing = cpuset.format(spec.efficiency - cpus.keys())
        raise MachineSpecError(f"efficiency: CPUs {missing} are in no package's cores")
    split = [c for c in spec.efficiency if not cpus[c].threads <= spec.efficiency]
    if split:
        raise MachineSpecError(
            f"efficiency: CPU {min(split)} is an efficiency core but its sibling threads "
            f"{cpuset.format(cpus[min(split)].threads)} are not all listed"
        )
    if spec.offline & cpus.keys():
        online = cpuset.format(spec.offline & cpus.keys())
        raise MachineSpecError(f"offline: CPUs {online} are listed as online cores")
    if len(spec.distances) != len(spec.nodes) or any(
        len(row) != len(spec.nodes) for row in spec.distances
    ):
        raise MachineSpecError(
            f"distances: need a {len(spec.nodes)}x{len(spec.nodes)} matrix in the order of 'nodes'"
        )
    nodes: dict[int, NumaNode] = {}
    for node, row in zip(spec.nodes, spec.distances, strict=True):
        if node.tier is None and not node.cpus:
            raise MachineSpecError(f"nodes[id={node.id}].tier: required for a node without CPUs")
        tier = node.tier or MemoryTier.DRAM
        default_source = "cpu" if node.cpus and tier is MemoryTier.DRAM else "config"
        nodes[node.id] = NumaNode(
            id=node.id,
            cpus=node.cpus,
            memory=node.memory,
            tier=tier,
            tier_source=node.tier_source or default_source,
            distances=dict(zip(node_ids, row, strict=True)),
            hugepages=dict(node.hugepages),
            normal=node.normal_memory,
        )
    return Machine(
        cpus=cpus,
        nodes=nodes,
        isolated=spec.isolated,
        offline=spec.offline,
        warnings=tuple(spec.warnings),
        core_kinds_from=spec.core_kinds_from
        if spec.core_kinds_from is not None
        else _default_kinds_from(spec.efficiency),
    )


def _default_kinds_from(efficiency: frozenset[int]) -> str:
    return "machine description" if efficiency else ""


def _group_ids(groups: Mapping[int, frozenset[int]], where: str) -> dict[int, int]:
    """CPU -> id of the one group holding it; a CPU in two groups is an error."""
    owner: dict[int, int] = {}
    for gid, members in groups.items():
        for cpu in members:
            if cpu in owner:
                raise MachineSpecError(f"{where}: CPU {cpu} is in {owner[cpu]} and {gid}")
            owner[cpu] = gid
    return owner


def _with_caches(cpus: dict[int, Cpu], caches: CacheSpec) -> dict[int, Cpu]:
    """Replace the derived L2/L3 sets by the groups the description gives."""
    levels = {"l2": caches.l2, "l3": caches.l3}
    given: dict[str, dict[int, frozenset[int]]] = {}
    for level, groups in levels.items():
        if groups is None:
            continue
        where = f"caches.{level}"
        owner = _group_ids(dict(enumerate(groups)), where)
        if owner.keys() != cpus.keys():
            odd = owner.keys() ^ cpus.keys()
            raise MachineSpecError(
                f"{where}: CPUs {cpuset.format(odd)} must be in exactly one group, and only those"
            )
        given[level] = {cpu: groups[g] for cpu, g in owner.items()}
    if not given:
        return cpus
    return {
        cpu: dataclasses.replace(c, **{level: sets[cpu] for level, sets in given.items()})
        for cpu, c in cpus.items()
    }


def _errors(exc: Invalid) -> str:
    lines = []
    for loc, problem in exc.problems:
        where = ".".join(str(p) for p in loc if p != "[key]") or "(top level)"
        lines.append(f"{where}: {problem}")
    return "; ".join(lines)


def parse_spec(data: Mapping[str, Any], *, origin: str = "machine description") -> MachineSpec:
    """Validate a decoded document; the error names the origin and the key."""
    try:
        return convert(MachineSpec, data)
    except Invalid as exc:
        raise MachineSpecError(f"{origin}: {_errors(exc)}") from None


def load_spec(path: Path) -> MachineSpec:
    """Read a machine description from a .json or .yaml file."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise MachineSpecError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise MachineSpecError(f"{path}: expected a mapping at the top level")
    return parse_spec(data, origin=str(path))


def to_machine(spec: MachineSpec, *, origin: str = "machine description") -> Machine:
    try:
        return _build(spec)
    except MachineSpecError as exc:
        raise MachineSpecError(f"{origin}: {exc}") from None


def from_machine(machine: Machine, *, name: str, description: str, source: str) -> dict[str, Any]:
    """Describe a Machine in the compact form (JSON-ready, deterministic key order).

    Keys for what the loader would derive are left out; `to_machine` of the result equals
    `machine`.
    """
    dies: dict[int, dict[int, list[frozenset[int]]]] = {}
    for core in machine.cores:
        first = machine.cpus[min(core)]
        dies.setdefault(first.package, {}).setdefault(first.die, []).append(core)
    pkg_docs = [_package_doc(machine, pkg_id, dies[pkg_id]) for pkg_id in sorted(dies)]
    node_ids = sorted(machine.nodes)
    node_docs: list[dict[str, Any]] = []
    for nid in node_ids:
        node = machine.nodes[nid]
        doc: dict[str, Any] = {"id": nid, "cpus": cpuset.format(node.cpus), "memory": node.memory}
        doc["tier"] = str(node.tier)
        default_source = "cpu" if node.cpus and node.tier is MemoryTier.DRAM else "config"
        if node.tier_source != default_source:
            doc["tier_source"] = node.tier_source
        if node.hugepages:
            doc["hugepages"] = {str(k): v for k, v in sorted(node.hugepages.items())}
        if not node.normal:
            doc["normal_memory"] = False
        node_docs.append(doc)
    out: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "name": name,
        "description": description,
        "source": source,
        "isolated": cpuset.format(machine.isolated),
        "offline": cpuset.format(machine.offline),
    }
    if machine.efficiency_cpus:  # only on hybrid machines, so other descriptions stay as they were
        out["efficiency"] = cpuset.format(machine.efficiency_cpus)
    if machine.core_kinds_from != _default_kinds_from(machine.efficiency_cpus):
        out["core_kinds_from"] = machine.core_kinds_from
    out |= {
        "packages": pkg_docs,
        "nodes": node_docs,
        "distances": [[machine.distance(a, b) for b in node_ids] for a in node_ids],
    }
    caches = _caches_doc(machine)
    if caches:
        out["caches"] = caches
    if machine.warnings:
        out["warnings"] = list(machine.warnings)
    return out


def _package_doc(
    machine: Machine, pkg_id: int, dies: Mapping[int, list[frozenset[int]]]
) -> dict[str, Any]:
    die_docs: list[dict[str, Any]] = []
    for die_id in sorted(dies):
        cores = sorted(dies[die_id], key=min)
        doc: dict[str, Any] = {"id": die_id, "cores": [cpuset.format(c) for c in cores]}
        core_ids = [machine.cpus[min(c)].core for c in cores]
        if core_ids != list(range(len(cores))):
            doc["core_ids"] = core_ids
        die_cpus = [machine.cpus[cpu] for core in cores for cpu in core]
        if any(c.cluster != c.core for c in die_cpus):
            clusters: dict[int, set[int]] = {}
            for c in die_cpus:
                clusters.setdefault(c.cluster, set()).add(c.id)
            doc["clusters"] = {str(k): cpuset.format(v) for k, v in sorted(clusters.items())}
        die_docs.append(doc)
    if len(die_docs) == 1 and die_docs[0]["id"] == 0 and die_docs[0].keys() == {"id", "cores"}:
        return {"id": pkg_id, "cores": die_docs[0]["cores"]}
    return {"id": pkg_id, "dies": die_docs}


def _caches_doc(machine: Machine) -> dict[str, list[str]]:
    """The L2 and L3 groups where they differ from threads and dies."""
    doc: dict[str, list[str]] = {}
    die_of: dict[tuple[int, int], set[int]] = {}
    for c in machine.cpus.values():
        die_of.setdefault((c.package, c.die), set()).add(c.id)
    for level, derived in (
        ("l2", lambda c: c.threads),
        ("l3", lambda c: frozenset(die_of[(c.package, c.die)])),
    ):
        cpus = machine.cpus.values()
        if any(getattr(c, level) != derived(c) for c in cpus):
            groups = {getattr(c, level) for c in cpus}
            doc[level] = [cpuset.format(g) for g in sorted(groups, key=min)]
    return doc


def dumps(doc: Mapping[str, Any]) -> str:
    """JSON text with one package/node per line, so diffs of bundled machines stay readable."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            for j, item in enumerate(value):
                item_comma = "," if j < len(value) - 1 else ""
                lines.append(f"    {json.dumps(item)}{item_comma}")
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _data_dir() -> Traversable:
    return resources.files("nri_topology") / "data" / "machines"


def bundled_names() -> tuple[str, ...]:
    """Names of the machines shipped inside the package."""
    folder = _data_dir()
    return tuple(
        sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))
    )


def load_bundled(name: str) -> tuple[MachineSpec, Machine]:
    """A bundled machine by name (see `bundled_names`)."""
    if name not in bundled_names():
        raise MachineSpecError(
            f"no bundled machine {name!r}; bundled: {', '.join(bundled_names())}"
        )
    text = (_data_dir() / f"{name}.json").read_text()
    spec = parse_spec(json.loads(text), origin=f"bundled machine {name}")
    return spec, to_machine(spec, origin=f"bundled machine {name}")
