"""The kubelet's own CPU and memory managers, as their state files and its configuration show them.

A node where the kubelet's static CPU manager or its Memory Manager runs beside this plugin has two
owners of `cpuset.cpus` and `cpuset.mems`: the kubelet pins Guaranteed containers and reconciles
their cgroups back to its choice. This module reads what the kubelet wrote, so the daemon can say
so and keep off the CPUs the kubelet handed out, or refuse to run.

The state files are the kubelet's checkpoints: JSON with a `checksum`, the FNV-1a (32 bit) of the
checkpoint structure as the Go `spew` printer writes it with types (`%#v`, keys sorted, no
pointer addresses). `cpu_checksum` and `memory_checksum` write that text for the two formats the
kubelet writes (CPU manager checkpoint v2, memory manager checkpoint), so a file the kubelet wrote
is told from one edited by hand. Newer kubelets may add a `data` field carrying the same
document as a string; its content is read the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from nri_topology.topology import cpuset

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a32(data: bytes) -> int:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def cpu_checksum(policy: str, default: str, entries: Mapping[str, Mapping[str, str]]) -> int:
    """The checksum the kubelet writes into `cpu_manager_state` for this content."""
    pods = " ".join(
        f"{pod}:map[{' '.join(f'{c}:{entries[pod][c]}' for c in sorted(entries[pod]))}]"
        for pod in sorted(entries)
    )
    text = (
        f"(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} "
        f"DefaultCPUSet:(string){default} "
        f"Entries:(map[string]map[string]string)map[{pods}] Checksum:(checksum.Checksum)0}}"
    )
    return fnv1a32(text.encode())


def _ints(values: list[int] | None) -> str:
    return "<nil>" if values is None else f"[{' '.join(str(v) for v in values)}]"


def memory_checksum(
    policy: str,
    machine: Mapping[int, Mapping[str, Any]],
    entries: Mapping[str, Mapping[str, list[Mapping[str, Any]]]],
) -> int:
    """The checksum the kubelet writes into `memory_manager_state` for this content (`machine`
    and `entries` as the file's `machineState` and `entries`, node keys as integers)."""
    nodes = []
    for node in sorted(machine):
        state = machine[node]
        tables = " ".join(
            f"{kind}:<*>{{TotalMemSize:(uint64){t['total']} "
            f"SystemReserved:(uint64){t['systemReserved']} Allocatable:(uint64){t['allocatable']} "
            f"Reserved:(uint64){t['reserved']} Free:(uint64){t['free']}}}"
            for kind, t in sorted(state.get("memoryMap", {}).items())
        )
        nodes.append(
            f"{node}:<*>{{NumberOfAssignments:(int){state.get('numberOfAssignments', 0)} "
            f"MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[{tables}] "
            f"Cells:([]int){_ints(state.get('cells'))}}}"
        )
    pods = []
    for pod in sorted(entries):
        ctrs = []
        for ctr in sorted(entries[pod]):
            blocks = " ".join(
                f"{{NUMAAffinity:([]int){_ints(b.get('numaAffinity'))} "
                f"Type:(v1.ResourceName){b['type']} Size:(uint64){b['size']}}}"
                for b in entries[pod][ctr]
            )
            ctrs.append(f"{ctr}:[{blocks}]")
        pods.append(f"{pod}:map[{' '.join(ctrs)}]")
    text = (
        f"(*state.MemoryManagerCheckpoint){{PolicyName:(string){policy} "
        f"MachineState:(state.NUMANodeMap)map[{' '.join(nodes)}] "
        f"Entries:(state.ContainerMemoryAssignments)map[{' '.join(pods)}] "
        f"Checksum:(checksum.Checksum)0}}"
    )
    return fnv1a32(text.encode())


@dataclass(frozen=True, slots=True)
class CpuManagerState:
    """`cpu_manager_state`: the policy, the shared (default) CPUs and each pinned container's."""

    policy: str
    default: frozenset[int]
    assigned: Mapping[tuple[str, str], frozenset[int]]  # (pod uid, container) -> CPUs
    checksum_ok: bool

    @property
    def static(self) -> bool:
        return self.policy == "static"

    @property
    def taken(self) -> frozenset[int]:
        """The CPUs the kubelet gave containers exclusively."""
        return frozenset().union(*self.assigned.values())


@dataclass(frozen=True, slots=True)
class MemoryManagerState:
    """`memory_manager_state`: the policy, each pinned container's NUMA nodes and bytes, and
    what the kubelet reserved for its containers per NUMA node and resource (`memory`,
    `hugepages-2Mi`, ...): its `machineState` tables' `reserved`, in bytes. The kubelet fills
    the nodes of a container's affinity one after the other, so only these tables say how much
    of a block spanning several nodes sits on each."""

    policy: str
    assigned: Mapping[tuple[str, str], tuple[frozenset[int], int]]  # -> (nodes, memory bytes)
    checksum_ok: bool
    reserved: Mapping[tuple[int, str], int] = field(default_factory=dict)  # (node, resource)

    @property
    def static(self) -> bool:
        return self.policy.lower() == "static"


def _document(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    data = doc.get("data")
    if isinstance(data, str):  # newer kubelets: the checkpoint again, as a string
        inner = json.loads(data)
        if not isinstance(inner, dict):
            raise ValueError("its data is not a JSON object")
        return {**inner, "checksum": doc.get("checksum")}
    return doc


def _key(doc: Mapping[str, Any], name: str) -> Any:
    """A field as Go's JSON reads it: the name in any letter case."""
    for k, v in doc.items():
        if k.lower() == name.lower():
            return v
    return None


def parse_cpu_manager_state(text: str) -> CpuManagerState:
    """The content of `cpu_manager_state`; ValueError when it is not one."""
    doc = _document(text)
    policy = str(_key(doc, "policyName") or "")
    default = str(_key(doc, "defaultCpuSet") or "")
    entries = _key(doc, "entries") or {}
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise ValueError("entries is not a map of pods to containers")
    assigned = {
        (str(pod), str(ctr)): cpuset.parse(str(cpus))
        for pod, ctrs in entries.items()
        for ctr, cpus in ctrs.items()
    }
    checksum = _key(doc, "checksum")
    names = {p: {c: str(v) for c, v in ctrs.items()} for p, ctrs in entries.items()}
    ok = checksum == cpu_checksum(policy, default, names)
    return CpuManagerState(policy, cpuset.parse(default), assigned, ok)


def parse_memory_manager_state(text: str) -> MemoryManagerState:
    """The content of `memory_manager_state`; ValueError when it is not one."""
    doc = _document(text)
    policy = str(_key(doc, "policyName") or "")
    machine = _key(doc, "machineState") or {}
    entries = _key(doc, "entries") or {}
    if not isinstance(machine, dict) or not isinstance(entries, dict):
        raise ValueError("machineState or entries is not a map")
    assigned: dict[tuple[str, str], tuple[frozenset[int], int]] = {}
    for pod, ctrs in entries.items():
        for ctr, blocks in (ctrs or {}).items():
            nodes: set[int] = set()
            size = 0
            for b in blocks or ():
                nodes.update(int(n) for n in b.get("numaAffinity") or ())
                if b.get("type") == "memory":
                    size += int(b.get("size", 0))
            assigned[(str(pod), str(ctr))] = (frozenset(nodes), size)
    reserved: dict[tuple[int, str], int] = {}
    for node, state in machine.items():
        for resource, table in ((state or {}).get("memoryMap") or {}).items():
            size = int((table or {}).get("reserved") or 0)
            if size > 0:
                reserved[int(node), str(resource)] = size
    try:
        ok = _key(doc, "checksum") == memory_checksum(
            policy, {int(n): s for n, s in machine.items()}, entries
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        ok = False
    return MemoryManagerState(policy, assigned, ok, reserved)


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    """What of a KubeletConfiguration file concerns the placement of containers."""

    cpu_manager_policy: str = "none"
    memory_manager_policy: str = "None"
    reserved_cpus: frozenset[int] | None = None  # reservedSystemCPUs
    strict_reservation: bool = False  # cpuManagerPolicyOptions strict-cpu-reservation


def parse_kubelet_config(text: str) -> KubeletConfig:
    """A KubeletConfiguration (YAML or JSON); ValueError when it is not one."""
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise ValueError("not a KubeletConfiguration mapping")
    reserved = doc.get("reservedSystemCPUs")
    options = doc.get("cpuManagerPolicyOptions") or {}
    strict = str(options.get("strict-cpu-reservation", "false")).lower() == "true"
    return KubeletConfig(
        cpu_manager_policy=str(doc.get("cpuManagerPolicy") or "none"),
        memory_manager_policy=str(doc.get("memoryManagerPolicy") or "None"),
        reserved_cpus=cpuset.parse(str(reserved)) if reserved else None,
        strict_reservation=strict,
    )


def memory_by_node(taken: Mapping[tuple[int, str], int]) -> dict[str, dict[str, int]]:
    """Bytes per (node, resource) as JSON keeps them: node -> resource -> bytes."""
    out: dict[str, dict[str, int]] = {}
    for (node, resource), size in sorted(taken.items()):
        out.setdefault(str(node), {})[resource] = size
    return out


@dataclass(frozen=True, slots=True)
class KubeletView:
    """What the plugin knows of the kubelet's managers; `problems` says what could not be read."""

    cpu: CpuManagerState | None = None
    memory: MemoryManagerState | None = None
    config: KubeletConfig | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def static_cpu(self) -> bool:
        """The static CPU manager runs (its state file says so, or the configuration does)."""
        if self.cpu is not None and self.cpu.static:
            return True
        return self.config is not None and self.config.cpu_manager_policy == "static"

    @property
    def static_memory(self) -> bool:
        if self.memory is not None and self.memory.static:
            return True
        return self.config is not None and self.config.memory_manager_policy.lower() == "static"

    @property
    def taken(self) -> frozenset[int]:
        """The CPUs the kubelet pinned containers to exclusively."""
        return self.cpu.taken if self.cpu is not None and self.cpu.static else frozenset()

    @property
    def memory_taken(self) -> Mapping[tuple[int, str], int]:
        """Bytes the Memory Manager reserved for its containers, per (NUMA node, resource)."""
        return self.memory.reserved if self.memory is not None and self.memory.static else {}

    def summary(self) -> dict[str, Any]:
        """For the log, `status` and its JSON."""
        doc: dict[str, Any] = {
            "static_cpu_manager": self.static_cpu,
            "memory_manager": self.static_memory,
        }
        if self.cpu is not None:
            doc["cpu_containers"] = len(self.cpu.assigned)
            doc["cpus_taken"] = cpuset.format(self.taken)
            doc["cpu_state_checksum_ok"] = self.cpu.checksum_ok
        if self.memory is not None:
            doc["memory_containers"] = len(self.memory.assigned)
            doc["memory_state_checksum_ok"] = self.memory.checksum_ok
            doc["memory_taken"] = memory_by_node(self.memory_taken)
        if self.config is not None and self.config.reserved_cpus is not None:
            doc["reserved_system_cpus"] = cpuset.format(self.config.reserved_cpus)
            doc["strict_cpu_reservation"] = self.config.strict_reservation
        if self.problems:
            doc["problems"] = list(self.problems)
        return doc
