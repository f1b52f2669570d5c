"""Publishing the NodeResourceTopology object and keeping it current.

One task does it all: it waits for a change, builds the object from the policy's state at that
moment (so a burst of placements is one update), applies it with server-side apply (field
manager `nri-topology`, forced: this plugin owns the object), then waits `min_interval_s`
before the next update. A failure (API server unreachable, no permission, CRD not installed) is
logged and counted, and retried after a backoff doubling from one second to `max_backoff_s`;
placements never wait for any of it. The object is owned by the Node (an ownerReference with the
node's uid, read once), so the garbage collector removes it with the node.

Client: lightkube (asyncio, generic resources for the CRD, server-side apply), configured from
the pod's service account in a cluster or from a kubeconfig file (systemd mode).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from lightkube import AsyncClient, KubeConfig
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
        on_error: Callable[[], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self._build = build
        self._min_interval = min_interval_s
        self._max_backoff = max_backoff_s
        self._on_error = on_error
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._owner: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self.published = 0  # successful updates
        self.failures = 0  # failed attempts

    def changed(self) -> None:
        """The policy's state changed: publish again soon (never blocks)."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._wake.set()  # the first update: the object as it is now
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.client.close()

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._publish()
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
            backoff = 1.0
            await self._sleep(self._min_interval)

    async def _publish(self) -> None:
        if self._owner is None:
            node = await self.client.get(Node, name=self.node_name)
            assert node.metadata is not None
            self._owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": node.metadata.uid,
            }
        obj = self._build()
        obj["metadata"] = {**obj["metadata"], "ownerReferences": [self._owner]}
        await self.client.apply(
            NodeResourceTopology.from_dict(obj), field_manager=FIELD_MANAGER, force=True
        )
        first = self.published == 0
        self.published += 1
        if first:
            _log.info("NodeResourceTopology published", node=self.node_name)
