"""Compact machine descriptions: a `Machine` as a small JSON/YAML document, both ways.

An installed package has no sysfs dumps to read, so the simulator ships machines in this form
(`nri_topology/data/machines/*.json`) and `bundle.py` generates them from real dumps. The format
is documented in docs/simulate.md. What it keeps: packages, dies, cores (as thread lists), NUMA
nodes with CPUs, memory, tier, hugepages and distances, isolated and offline CPUs. What it
derives: a core's L2 is its threads, L3 is its die; clusters equal cores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from nri_topology.quantity import memory_bytes
from nri_topology.topology import cpuset
from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode

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


CpuList = Annotated[frozenset[int], BeforeValidator(_cpu_list)]
Bytes = Annotated[int, BeforeValidator(_bytes)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DieSpec(_Strict):
    id: int = 0
    cores: list[CpuList] = Field(min_length=1)  # each core: the list of its hardware threads


class PackageSpec(_Strict):
    id: int
    dies: list[DieSpec] | None = None
    cores: list[CpuList] | None = None  # shorthand for a single die 0

    def all_dies(self) -> list[DieSpec]:
        if (self.dies is None) == (self.cores is None):
            raise ValueError(f"package {self.id}: give exactly one of 'dies' or 'cores'")
        return self.dies if self.dies is not None else [DieSpec(id=0, cores=self.cores or [])]


class NodeSpec(_Strict):
    id: int
    cpus: CpuList = frozenset()
    memory: Bytes = 0
    tier: MemoryTier | None = None  # default: dram for nodes with CPUs; required otherwise
    hugepages: dict[int, int] = Field(default_factory=dict)  # page size in kB -> pages
    normal_memory: bool = True  # false: movable-only memory, not in has_normal_memory


class MachineSpec(_Strict):
    format: int = FORMAT_VERSION
    name: str
    description: str = ""
    source: str = ""  # where the description came from (a dump, or "hand-written")
    isolated: CpuList = frozenset()
    offline: CpuList = frozenset()
    packages: list[PackageSpec] = Field(min_length=1)
    nodes: list[NodeSpec] = Field(min_length=1)
    distances: list[list[int]]  # rows and columns in the order of `nodes`


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
            die_cpus = frozenset().union(*die.cores)
            for core_id, threads in enumerate(die.cores):
                if not threads:
                    raise MachineSpecError(
                        f"packages[id={pkg.id}].dies[id={die.id}].cores[{core_id}]: empty core"
                    )
                for cpu in sorted(threads):
                    if cpu in cpus:
                        raise MachineSpecError(
                            f"packages[id={pkg.id}]: CPU {cpu} appears in more than one core"
                        )
                    cpus[cpu] = Cpu(
                        id=cpu,
                        package=pkg.id,
                        die=die.id,
                        cluster=core_id,
                        core=core_id,
                        node=node_of.get(cpu, -1),
                        threads=threads,
                        l2=threads,
                        l3=die_cpus,
                    )
    unknown = set(node_of) - set(cpus)
    if unknown:
        raise MachineSpecError(f"nodes: CPUs {cpuset.format(unknown)} are in no package's cores")
    if not spec.isolated <= cpus.keys():
        missing = cpuset.format(spec.isolated - cpus.keys())
        raise MachineSpecError(f"isolated: CPUs {missing} are in no package's cores")
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
        nodes[node.id] = NumaNode(
            id=node.id,
            cpus=node.cpus,
            memory=node.memory,
            tier=tier,
            tier_source="cpu" if node.cpus and tier is MemoryTier.DRAM else "config",
            distances=dict(zip(node_ids, row, strict=True)),
            hugepages=dict(node.hugepages),
            normal=node.normal_memory,
        )
    return Machine(cpus=cpus, nodes=nodes, isolated=spec.isolated, offline=spec.offline)


def _errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"{where}: {err['msg']}")
    return "; ".join(lines)


def parse_spec(data: Mapping[str, Any], *, origin: str = "machine description") -> MachineSpec:
    """Validate a decoded document; the error names the origin and the key."""
    try:
        return MachineSpec.model_validate(data)
    except ValidationError as exc:
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
    """Describe a Machine in the compact form (JSON-ready, deterministic key order)."""
    packages: dict[int, dict[int, list[frozenset[int]]]] = {}
    for core in machine.cores:
        first = machine.cpus[min(core)]
        packages.setdefault(first.package, {}).setdefault(first.die, []).append(core)
    pkg_docs: list[dict[str, Any]] = []
    for pkg_id in sorted(packages):
        dies = packages[pkg_id]
        core_lists = {
            die: [cpuset.format(c) for c in sorted(cores, key=min)] for die, cores in dies.items()
        }
        if set(core_lists) == {0}:
            pkg_docs.append({"id": pkg_id, "cores": core_lists[0]})
        else:
            pkg_docs.append(
                {
                    "id": pkg_id,
                    "dies": [{"id": d, "cores": core_lists[d]} for d in sorted(core_lists)],
                }
            )
    node_ids = sorted(machine.nodes)
    node_docs: list[dict[str, Any]] = []
    for nid in node_ids:
        node = machine.nodes[nid]
        doc: dict[str, Any] = {"id": nid, "cpus": cpuset.format(node.cpus), "memory": node.memory}
        doc["tier"] = str(node.tier)
        if node.hugepages:
            doc["hugepages"] = {str(k): v for k, v in sorted(node.hugepages.items())}
        if not node.normal:
            doc["normal_memory"] = False
        node_docs.append(doc)
    return {
        "format": FORMAT_VERSION,
        "name": name,
        "description": description,
        "source": source,
        "isolated": cpuset.format(machine.isolated),
        "offline": cpuset.format(machine.offline),
        "packages": pkg_docs,
        "nodes": node_docs,
        "distances": [[machine.distance(a, b) for b in node_ids] for a in node_ids],
    }


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
