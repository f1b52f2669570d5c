"""A small Kubernetes API server for tests: the requests the NRT publisher makes (GET a Node, GET
and server-side apply of a NodeResourceTopology) and those of `nri-topology uninstall` (GET and
DELETE a DaemonSet, list its pods, list and DELETE NodeResourceTopology objects), over real HTTP,
with failures on demand.

What the publisher relies on behaves as on a real server: an apply answers 201 when it creates
the object and 200 when it updates it, the stored object carries the fields the server adds
(uid, resourceVersion, creationTimestamp, managedFields), a GET of a missing object is a 404
Status, and a Node deleted and registered again has a new uid. The garbage collector is modelled
by its effect: an object whose ownerReference names no existing Node with that uid is deleted
(after every change of nodes and every apply; the real one does it within moments).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class ApiServer:
    nodes: dict[str, str] = field(default_factory=dict)  # node name -> uid
    fail: list[int] = field(default_factory=list)  # status codes for the next applies
    requests: list[Request] = field(default_factory=list)
    objects: dict[str, Any] = field(default_factory=dict)  # NRT objects by name
    collected: list[str] = field(default_factory=list)  # NRT objects the collector deleted
    delay: float = 0.0  # seconds before each answer
    written: int = 0  # applies stored so far (counted when stored, not when received)
    url: str = ""
    daemonsets: dict[str, dict[str, str]] = field(default_factory=dict)  # ns/name -> selector
    pods: dict[str, dict[str, str]] = field(default_factory=dict)  # ns/name -> labels
    # Pod lists that still show a deleted DaemonSet's pods (they take a while to stop).
    pods_linger: int = 1
    _serial: int = 0

    def applies(self) -> list[Request]:
        return [r for r in self.requests if r.method == "PATCH"]

    def delete_node(self, name: str) -> None:
        del self.nodes[name]
        self._collect()

    def register_node(self, name: str, uid: str) -> None:
        self.nodes[name] = uid
        self._collect()

    def _collect(self) -> None:
        """The garbage collector: delete objects whose owner is not there with that uid."""
        for name, obj in list(self.objects.items()):
            owners = obj.get("metadata", {}).get("ownerReferences", [])
            if any(self.nodes.get(o.get("name")) != o.get("uid") for o in owners):
                del self.objects[name]
                self.collected.append(name)

    def _answer(self, req: Request) -> tuple[int, Any]:
        if req.method == "GET" and req.path.startswith("/api/v1/nodes/"):
            name = req.path.rsplit("/", 1)[1]
            if name not in self.nodes:
                return 404, _status(404, f'nodes "{name}" not found', "NotFound")
            meta = {"name": name, "uid": self.nodes[name]}
            return 200, {"apiVersion": "v1", "kind": "Node", "metadata": meta}
        if req.method == "GET" and req.path.startswith(NRT_PATH):
            name = req.path.removeprefix(NRT_PATH)
            if name not in self.objects:
                return 404, _status(404, f'noderesourcetopologies "{name}" not found', "NotFound")
            return 200, self.objects[name]
        if req.method == "PATCH" and req.path.startswith(NRT_PATH):
            if self.fail:
                code = self.fail.pop(0)
                return code, _status(code, "injected failure", "InternalError")
            name = req.path.removeprefix(NRT_PATH)
            old = self.objects.get(name)
            self._serial += 1
            server_meta = {
                "uid": old["metadata"]["uid"] if old else f"nrt-uid-{self._serial}",
                "resourceVersion": str(self._serial),
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": req.query.get("fieldManager", [""])[0]}],
            }
            stored = {**req.body, "metadata": {**req.body["metadata"], **server_meta}}
            self.objects[name] = stored
            self.written += 1
            self._collect()
            return (200 if old else 201), stored
        if req.method == "GET" and req.path == NRT_PATH.rstrip("/"):
            items = list(self.objects.values())
            return 200, {
                "apiVersion": "topology.node.k8s.io/v1alpha2",
                "kind": "NodeResourceTopologyList",
                "metadata": {},
                "items": items,
            }
        if req.method == "DELETE" and req.path.startswith(NRT_PATH):
            name = req.path.removeprefix(NRT_PATH)
            if self.objects.pop(name, None) is None:
                return 404, _status(404, f'noderesourcetopologies "{name}" not found', "NotFound")
            return 200, _status(200, "deleted", "")
        if m := re.fullmatch(r"/apis/apps/v1/namespaces/([^/]+)/daemonsets/([^/]+)", req.path):
            key = f"{m[1]}/{m[2]}"
            if key not in self.daemonsets:
                return 404, _status(404, f'daemonsets.apps "{m[2]}" not found', "NotFound")
            if req.method == "DELETE":
                del self.daemonsets[key]
                return 200, _status(200, "deleted", "")
            meta = {"name": m[2], "namespace": m[1]}
            spec = {"selector": {"matchLabels": self.daemonsets[key]}, "template": {}}
            return 200, {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": meta,
                "spec": spec,
            }
        if req.method == "GET" and (
            m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", req.path)
        ):
            return 200, self._pod_list(m[1], req.query.get("labelSelector", [""])[0])
        return 404, _status(404, "no such path", "NotFound")

    def _pod_list(self, namespace: str, selector: str) -> dict[str, Any]:
        """The pods matching `k=v,...`; those no DaemonSet selects any more go after
        `pods_linger` lists."""
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        found = [
            key for key, labels in self.pods.items()
            if key.startswith(namespace + "/") and wanted.items() <= labels.items()
        ]  # fmt: skip
        orphans = [
            key for key in found
            if not any(sel.items() <= self.pods[key].items() for sel in self.daemonsets.values())
        ]  # fmt: skip
        if orphans and self.pods_linger > 0:
            self.pods_linger -= 1
        elif orphans:
            for key in orphans:
                del self.pods[key]
            found = [key for key in found if key not in orphans]
        items = [
            {"metadata": {"name": key.split("/", 1)[1], "namespace": namespace}} for key in found
        ]
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                size = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(size) if size else b""
                parts = urlsplit(target)
                body = json.loads(raw) if raw else None
                req = Request(method, parts.path, parse_qs(parts.query), headers, body)
                self.requests.append(req)
                if self.delay:
                    await asyncio.sleep(self.delay)
                code, payload = self._answer(req)
                data = json.dumps(payload).encode()
                writer.write(
                    f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


def _status(code: int, message: str, reason: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@asynccontextmanager
async def serve(api: ApiServer) -> AsyncIterator[ApiServer]:
    server = await asyncio.start_server(api._serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    api.url = f"http://127.0.0.1:{port}"
    try:
        yield api
    finally:
        server.close()
        await server.wait_closed()
