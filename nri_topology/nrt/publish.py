"""Publishing the NodeResourceTopology object and keeping it current.

One task does it all: it waits for a change, builds the object from the policy's state at that
moment (so a burst of placements is one update), applies it with server-side apply (field
manager `nri-topology`, forced: this plugin owns the object), then waits `min_interval_s`
before the next update. A failure (API server unreachable, no permission, CRD not installed, the
Node not registered) is logged and counted, and retried after a backoff doubling from one second
to `max_backoff_s`; placements never wait for any of it.

The object is owned by the Node (an ownerReference with the node's uid), so the garbage collector
removes it with the node. A Node deleted and registered again has a new uid, and an object that
names the old one is deleted at once by the collector: so the uid is read before every write. And
since the object can go missing without any change here (the collector, a hand, an apiserver
outage), every `resync_s` the object on the server is read and written again if it is missing or
differs from what the plugin would write. Closing lets a write in flight finish (up to
`close_grace_s`) and writes nothing after.

Client: lightkube (asyncio, generic resources for the CRD, server-side apply), configured from
the pod's service account in a cluster or from a kubeconfig file (systemd mode).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node

from nri_topology.nrt.build import API_VERSION, KIND, PLURAL

FIELD_MANAGER = "nri-topology"

_log = structlog.get_logger("nri_topology.nrt")

NodeResourceTopology = create_global_resource(
    API_VERSION.split("/")[0], API_VERSION.split("/")[1], KIND, PLURAL
)


def make_client(kubeconfig: str | None) -> AsyncClient:
    """A client from the kubeconfig file, else from the pod's service account."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    return AsyncClient(config, field_manager=FIELD_MANAGER)


def differs(current: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> str:
    """Why the object on the server is not the one to write ("" when it is): missing, or a
    field the plugin writes has another value (fields the server adds do not count)."""
    if current is None:
        return "missing"
    for key, value in wanted.items():
        if key == "metadata":
            meta = current.get("metadata") or {}
            for mkey, mvalue in value.items():
                if meta.get(mkey) != mvalue:
                    return f"metadata.{mkey}"
        elif current.get(key) != value:
            return key
    return ""


class Publisher:
    """Keeps one node's NodeResourceTopology object current; see the module docstring."""

    def __init__(
        self,
        client: AsyncClient,
        node_name: str,
        build: Callable[[], dict[str, Any]],
        *,
        min_interval_s: float = 5.0,
        max_backoff_s: float = 60.0,
        resync_s: float = 60.0,
        close_grace_s: float = 5.0,
        on_error: Callable[[], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self._build = build
        self._min_interval = min_interval_s
        self._max_backoff = max_backoff_s
        self._resync = resync_s  # 0: never
        self._grace = close_grace_s
        self._on_error = on_error
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._write: asyncio.Task[None] | None = None  # the publication in flight
        self._closed = False
        self.published = 0  # successful updates
        self.failures = 0  # failed attempts
        self.resyncs = 0  # objects found missing or different and written again

    def changed(self) -> None:
        """The policy's state changed: publish again soon (never blocks)."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._wake.set()  # the first update: the object as it is now
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop publishing: a write in flight may finish, none starts after this returns."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        write, self._write = self._write, None
        if write is not None and not write.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(write, self._grace)
        await self.client.close()

    async def _changed_or_due(self) -> bool:
        """Wait for a change (False) or, with none for `resync_s`, for a resync (True)."""
        if self._resync <= 0:
            await self._wake.wait()
            return False
        try:
            await asyncio.wait_for(self._wake.wait(), self._resync)
        except TimeoutError:
            return True
        return False

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            resync = await self._changed_or_due()
            self._wake.clear()
            # shielded: a close() during the write lets it finish rather than cut it mid-request
            self._write = asyncio.get_running_loop().create_task(self._publish(resync))
            try:
                await asyncio.shield(self._write)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: log, count, retry later
                self.failures += 1
                if self._on_error is not None:
                    self._on_error()
                _log.warning(
                    "NodeResourceTopology not published, retrying",
                    node=self.node_name,
                    retry_in_s=backoff,
                    error=f"{type(exc).__name__}: {exc}",
                )
                self._wake.set()
                await self._sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            finally:
                if self._write is not None and self._write.done():
                    self._write = None
            backoff = 1.0
            await self._sleep(self._min_interval)

    async def _owner(self) -> dict[str, Any]:
        """The ownerReference to the Node as it is now (a re-registered Node has a new uid)."""
        node = await self.client.get(Node, name=self.node_name)
        assert node.metadata is not None
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.node_name,
            "uid": node.metadata.uid,
        }

    async def _current(self) -> Mapping[str, Any] | None:
        """The object on the server; None when there is none."""
        try:
            obj = await self.client.get(NodeResourceTopology, name=self.node_name)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        return obj.to_dict()

    async def _publish(self, resync: bool) -> None:
        owner = await self._owner()
        obj = self._build()
        obj["metadata"] = {**obj["metadata"], "ownerReferences": [owner]}
        if resync:
            why = differs(await self._current(), obj)
            if not why:
                return
            self.resyncs += 1
            _log.info("NodeResourceTopology written again", node=self.node_name, differs=why)
        if self._closed:
            return
        await self.client.apply(
            NodeResourceTopology.from_dict(obj), field_manager=FIELD_MANAGER, force=True
        )
        first = self.published == 0
        self.published += 1
        if first:
            _log.info("NodeResourceTopology published", node=self.node_name)
