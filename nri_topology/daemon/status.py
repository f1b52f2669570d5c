"""What `nri-topology status` and `nri-topology explain` show of the running daemon.

The live node is drawn with the simulator's renderers (tree, JSON, SVG), so a node and a
simulation of it read alike. Pages are built on the daemon's event loop between two decisions,
from the policy's own views; nothing here is kept or cached.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from nri_topology import __version__
from nri_topology.daemon.coexist import memory_words
from nri_topology.daemon.explain import Explained
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.policy.accounts import hugepages
from nri_topology.policy.types import qualified_name
from nri_topology.policy.views import PoolView
from nri_topology.simulate import render_json, render_svg, render_text
from nri_topology.simulate.runner import NodeAssignment
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

STATUS_SCHEMA = "nri-topology/status/v1"
EXPLAIN_SCHEMA = "nri-topology/explain/v1"

Page = tuple[HTTPStatus, str, bytes]  # status, content type, body

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_SVG = "image/svg+xml"


@dataclass(frozen=True, slots=True)
class LiveNode:
    """The node as the policy holds it now, in the shape the simulator's renderers draw."""

    machine: Machine
    machine_name: str
    assignments: Mapping[str, NodeAssignment]  # by namespace/pod/container
    pools: tuple[PoolView, ...]
    container_ids: Mapping[str, str]  # namespace/pod/container -> runtime container id


def live_node(machine: Machine, name: str, plugin: TopologyPlugin) -> LiveNode:
    assignments: dict[str, NodeAssignment] = {}
    ids: dict[str, str] = {}
    for a in plugin.policy.assignments().values():
        shown = qualified_name(a.namespace, a.pod_name, a.name)
        if shown in assignments:  # the same name twice (a restart in flight): keep both apart
            shown = f"{shown}@{a.container_id[:12]}"
        ids[shown] = a.container_id
        assignments[shown] = NodeAssignment(
            id=shown,
            namespace=a.namespace,
            pod=a.pod_name,
            name=a.name,
            qos=a.qos,
            pool=a.pool,
            kind=a.kind,
            cpus=a.cpus,
            mems=a.mems,
            exclusive=a.exclusive,
            cpu_shares=None,
            memory_tiers=frozenset(
                machine.nodes[n].tier for n in a.memory_nodes if n in machine.nodes
            ),
            hugepages=a.hugepages,
        )
    return LiveNode(machine, name, assignments, tuple(plugin.policy.pools()), ids)


class StatusPages:
    """`/status` and `/explain` for the status endpoint (`routes`)."""

    def __init__(
        self,
        plugin: TopologyPlugin,
        machine: Machine,
        node_name: str,
        kubelet: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self._plugin = plugin
        self._machine = machine
        self._node = node_name
        self._kubelet = kubelet  # what the kubelet's own managers do (`coexist`)

    def routes(self) -> dict[str, Callable[[Mapping[str, str]], Page]]:
        return {
            "/status": lambda q: self.status(q.get("format", "text")),
            "/explain": lambda q: self.explain(q.get("container", ""), q.get("format", "text")),
        }

    def status(self, fmt: str) -> Page:
        node = live_node(self._machine, self._node, self._plugin)
        ready, why = self._plugin.ready()
        if fmt == "json":
            doc = {
                "schema": STATUS_SCHEMA,
                "version": __version__,
                "registered": ready,
                "updates": self._updates(),
                **({"kubelet": dict(self._kubelet())} if self._kubelet is not None else {}),
                "machine": render_json.machine(self._machine, self._node),
                **render_json.node(node),
            }
            for c in doc["containers"]:
                c["container_id"] = node.container_ids[c["id"]]
            return HTTPStatus.OK, _JSON, _dump(doc)
        if fmt == "svg":
            title = f"nri-topology status: {self._node}"
            return HTTPStatus.OK, _SVG, render_svg.render(node, title).encode()
        if fmt != "text":
            return _error(HTTPStatus.BAD_REQUEST, f"format must be text, json or svg, not {fmt!r}")
        state = "registered with the runtime" if ready else f"not ready: {why}"
        lines = [
            f"nri-topology {__version__} on {self._node}, {state}",
            render_text.describe_machine(self._machine, self._node),
            *_kubelet_lines(self._kubelet() if self._kubelet is not None else {}),
            _updates_line(self._updates()),
            "",
        ]
        text = "\n".join(lines) + render_text.pool_tree(node, heading="Pools:")
        return HTTPStatus.OK, _TEXT, text.encode()

    def _updates(self) -> dict[str, Any]:
        path = self._plugin.updates
        client = path.transports.cri
        cri = client.socket if client is not None and path.transport == "cri" else None
        return {
            "transport": path.transport,
            "paced": path.paced,
            "cri_socket": cri,
            "cgroup_first": path.writes_cgroups(),
            "cgroup_writes_off": path.writes_off(),
        }

    def explain(self, target: str, fmt: str) -> Page:
        parts = target.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            return _error(
                HTTPStatus.BAD_REQUEST,
                f"expected NAMESPACE/POD or NAMESPACE/POD/CONTAINER, got {target!r}",
            )
        if fmt not in ("text", "json"):
            return _error(HTTPStatus.BAD_REQUEST, f"format must be text or json, not {fmt!r}")
        node = live_node(self._machine, self._node, self._plugin)
        wanted = tuple(parts)
        chosen = sorted(
            name
            for name, a in node.assignments.items()
            if (a.namespace, a.pod, a.name)[: len(wanted)] == wanted
        )
        if not chosen:
            return _error(HTTPStatus.NOT_FOUND, f"no container {target} is placed on this node")
        entries = []
        for name in chosen:
            cid = node.container_ids[name]
            entries.append((node.assignments[name], cid, self._plugin.decisions.get(cid)))
        if fmt == "json":
            doc = {
                "schema": EXPLAIN_SCHEMA,
                "containers": [_explained_doc(a, cid, e) for a, cid, e in entries],
            }
            return HTTPStatus.OK, _JSON, _dump(doc)
        text = "\n".join(line for a, cid, e in entries for line in _explained_text(a, cid, e))
        return HTTPStatus.OK, _TEXT, (text + "\n").encode()


def _updates_line(doc: Mapping[str, Any]) -> str:
    """How re-pins of other containers reach the runtime."""
    how = {
        "cri": f"through the runtime's CRI ({doc['cri_socket']})",
        "nri": "through NRI UpdateContainers",
        "reply": "in replies (no safe transport)",
    }[doc["transport"]]
    when = "after the reply, paced" if doc["paced"] else "in the reply"
    if doc["paced"] and doc.get("cgroup_first"):
        when += ", written to the cgroups first"
    elif doc["paced"] and doc.get("cgroup_writes_off"):
        when += f", not written to the cgroups first: {doc['cgroup_writes_off']}"
    return f"Re-pins: {when}; other updates {how}"


def _kubelet_lines(doc: Mapping[str, Any]) -> list[str]:
    """A plain line when the kubelet's own managers pin containers on this node."""
    running = [
        name
        for key, name in (
            ("static_cpu_manager", "static CPU manager"),
            ("memory_manager", "Memory Manager"),
        )
        if doc.get(key)
    ]
    if not running:
        return []
    taken = doc.get("cpus_taken") or "none"
    memory = memory_words(doc.get("memory_taken") or {}) or "none"
    return [
        f"Kubelet: its {' and '.join(running)} is on and pins Guaranteed containers itself; "
        f"CPUs it pinned containers to: {taken}; memory it reserved for them: {memory}"
    ]


def _when(at_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at_ns / 1e9))


def _set(ids: frozenset[int] | None) -> str:
    return "(left as the runtime set it)" if ids is None else (cpuset.format(ids) or "-")


def _explained_text(a: NodeAssignment, cid: str, e: Explained | None) -> list[str]:
    lines = [
        f"{a.id} (container {cid})",
        f"  now: pool {a.pool}, {a.kind.value}, cpus {_set(a.cpus)}, mems {_set(a.mems)}"
        + (f", exclusive {cpuset.format(a.exclusive)}" if a.exclusive else ""),
    ]
    if e is None:
        lines.append("  no decision recorded yet (its reply is still on its way)")
        return lines
    d = e.decision
    lines.append(f"  {e.what} {_when(e.at_ns)}: {d.reason or '(no reason given)'}")
    if e.window_s is not None:
        lines.append(
            f"  exclusivity window: {e.window_s:.3f} s until no other container was left to lose "
            "its exclusive CPUs"
        )
    if d.memory_relaxed:
        lines.append("  memory widened beyond the pool: its memory ran out")
    if d.hugepages:
        lines.append(f"  hugepages booked: {hugepages.describe(d.hugepages)}")
    if d.degraded:
        lines.append(f"  degraded: {', '.join(d.degraded)}")
    if d.cold_start is not None:
        lines.append(
            f"  cold start: after {d.cold_start.delay_ns / 1e9:g} s memory widens to "
            f"{cpuset.format(d.cold_start.then_mems)}"
        )
    if d.trace:
        lines.extend(render_text.trace_table(d.trace, "  "))
    elif e.what == "adopted":
        lines.append(
            "  kept the CPUs it held when the plugin (re)started; the scoring trace of the run "
            "that placed it is not kept"
        )
    return lines


def _explained_doc(a: NodeAssignment, cid: str, e: Explained | None) -> dict[str, Any]:
    doc = {"id": a.id, "container_id": cid, "pool": a.pool, "kind": a.kind.value}
    doc |= {
        "cpus": None if a.cpus is None else cpuset.format(a.cpus),
        "mems": None if a.mems is None else cpuset.format(a.mems),
        "exclusive": cpuset.format(a.exclusive),
        "decision": None,
    }
    if e is not None:
        d = e.decision
        doc["decision"] = {
            "what": e.what,
            "at": _when(e.at_ns),
            "pool": d.pool,
            "kind": d.kind.value,
            "reason": d.reason,
            "memory_relaxed": d.memory_relaxed,
            "exclusive_window_seconds": e.window_s,
            "hugepages": render_json.hugepages(d.hugepages),
            "degraded": list(d.degraded),
            "cold_start": None
            if d.cold_start is None
            else {
                "delay_ns": d.cold_start.delay_ns,
                "then_mems": cpuset.format(d.cold_start.then_mems),
            },
            "trace": render_json.trace(d.trace),
        }
    return doc


def _dump(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def _error(status: HTTPStatus, message: str) -> Page:
    return status, _TEXT, (message + "\n").encode()
