"""The NodeResourceTopology object (topology.node.k8s.io/v1alpha2) of a node: a pure function of
the machine and the policy's per-node capacity.

The scheduler-plugins NodeResourceTopologyMatch plugin reads zones of type `Node` named
`node-<id>` (the id is parsed from the name), each with `cpu`, `memory` and `hugepages-<size>`
resources (capacity, allocatable, available) and `costs` (NUMA distances to the other nodes),
and the node's topology manager policy and scope from the top-level `attributes` (older versions
from the deprecated `topologyPolicies`). Zones of type `Socket` (`socket-<package>`) are the
parents of the node zones, with their nodes' sums (memory of every tier); the scheduler ignores
them, people and other tools read them.

A NUMA node without CPUs (PMEM, HBM, CXL, device memory) is a zone of its own with memory only,
under the socket of its closest CPU node; its tier is the zone attribute `memory.tier` (every
node zone has one). Hugepages are booked per node and page size by the policy: their capacity and
allocatable amount are the pages the kernel holds there, their available amount the pages no
container has booked.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from nri_topology.policy.accounts.hugepages import resource_name
from nri_topology.policy.views import NodeCapacity
from nri_topology.quantity import format_milli
from nri_topology.topology.model import Machine

API_VERSION = "topology.node.k8s.io/v1alpha2"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"

# topology manager policy -> the deprecated v1alpha1 policy names, per scope
_LEGACY = {
    ("none", "container"): "None",
    ("none", "pod"): "None",
    ("best-effort", "container"): "BestEffort",
    ("best-effort", "pod"): "BestEffort",
    ("restricted", "container"): "Restricted",
    ("restricted", "pod"): "Restricted",
    ("single-numa-node", "container"): "SingleNUMANodeContainerLevel",
    ("single-numa-node", "pod"): "SingleNUMANodePodLevel",
}
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")


def node_name(configured: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The node's name: configured, else $NODE_NAME (the DaemonSet sets it from spec.nodeName),
    else the host name (which the kubelet registers by default); trimmed and lower-cased as the
    kubelet does, since node names are lower-case DNS subdomains."""
    environ = os.environ if environ is None else environ
    return (configured or environ.get("NODE_NAME") or socket.gethostname()).strip().lower()


_Amounts = dict[str, tuple[int, int, int]]  # resource -> (capacity, allocatable, available)


def _resources(amounts: _Amounts) -> list[dict[str, str]]:
    """ResourceInfo entries: cpu first (a CPU quantity from milli-CPU), memory, hugepages."""
    out = []
    for name in sorted(amounts, key=lambda n: (n != "cpu", n != "memory", n)):
        fmt = format_milli if name == "cpu" else str
        c, a, v = amounts[name]
        out.append({"name": name, "capacity": fmt(c), "allocatable": fmt(a), "available": fmt(v)})
    return out


def _socket_of(machine: Machine, node: int) -> int:
    """The package of a node's CPUs, or of its closest CPU node when it has none."""
    cpus = machine.nodes[node].cpus
    if cpus:
        return machine.cpus[min(cpus)].package
    cpu_nodes = machine.cpu_nodes
    if not cpu_nodes:
        return min(machine.packages, default=0)
    dist = machine.nodes[node].distances
    near = min(cpu_nodes, key=lambda n: (dist.get(n, 255), n))
    return machine.cpus[min(machine.nodes[near].cpus)].package


def _node_amounts(machine: Machine, cap: NodeCapacity | None, n: int) -> _Amounts:
    node = machine.nodes[n]
    out: _Amounts = {}
    if cap is not None and node.cpus:
        out["cpu"] = (cap.cpu_capacity, cap.cpu_allocatable, cap.cpu_available)
    if cap is not None and cap.memory_capacity > 0:
        out["memory"] = (cap.memory_capacity, cap.memory_capacity, cap.memory_available)
    booked = cap.hugepages if cap is not None else {}
    for size_kb, pages in sorted(node.hugepages.items()):
        if pages > 0:
            page = size_kb * 1024
            total = page * pages
            free = booked[size_kb][1] if size_kb in booked else pages
            out[resource_name(size_kb)] = (total, total, page * free)
    return out


def _summed(parts: Iterable[_Amounts]) -> _Amounts:
    totals: dict[str, tuple[int, int, int]] = {}
    for amounts in parts:
        for name, (c, a, v) in amounts.items():
            tc, ta, tv = totals.get(name, (0, 0, 0))
            totals[name] = (tc + c, ta + a, tv + v)
    return totals


def node_resource_topology(
    machine: Machine,
    capacity: Iterable[NodeCapacity],
    node_name: str,
    *,
    policy: str = "best-effort",
    scope: str = "container",
) -> dict[str, Any]:
    """The NodeResourceTopology object of the node, as a JSON-able dict."""
    if policy not in POLICIES or scope not in SCOPES:
        raise ValueError(f"unknown topology manager policy/scope {policy}/{scope}")
    caps: Mapping[int, NodeCapacity] = {c.node: c for c in capacity}
    node_zones: dict[int, list[dict[str, Any]]] = {}
    socket_parts: dict[int, list[_Amounts]] = {}
    for n in sorted(machine.nodes):
        node = machine.nodes[n]
        socket = _socket_of(machine, n)
        amounts = _node_amounts(machine, caps.get(n), n)
        socket_parts.setdefault(socket, []).append(amounts)
        node_zones.setdefault(socket, []).append(
            {
                "name": f"node-{n}",
                "type": "Node",
                "parent": f"socket-{socket}",
                "costs": [
                    {"name": f"node-{m}", "value": node.distances[m]}
                    for m in sorted(node.distances)
                    if m in machine.nodes
                ],
                "attributes": [{"name": "memory.tier", "value": str(node.tier)}],
                "resources": _resources(amounts),
            }
        )
    zones: list[dict[str, Any]] = []
    for socket in sorted(node_zones):
        zones.append(
            {
                "name": f"socket-{socket}",
                "type": "Socket",
                "resources": _resources(_summed(socket_parts[socket])),
            }
        )
        zones.extend(node_zones[socket])
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node_name},
        "topologyPolicies": [_LEGACY[policy, scope]],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": policy},
            {"name": "topologyManagerScope", "value": scope},
        ],
        "zones": zones,
    }
