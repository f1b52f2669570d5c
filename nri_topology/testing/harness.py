"""A plugin and the test runtime connected over a real unix socket, for tests, demos, benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from nri_topology.nri.stub import Plugin, Stub
from nri_topology.testing.runtime import RuntimePeer


@contextlib.asynccontextmanager
async def connected(
    plugin: Plugin,
    peer: RuntimePeer | None = None,
    *,
    name: str = "test",
    idx: str = "50",
    **stub_options: Any,
) -> AsyncIterator[tuple[RuntimePeer, Stub]]:
    """Yield `(peer, stub)` once `plugin` is registered, configured and synchronized.

    The socket lives in a fresh temporary directory (unix socket paths must stay short); the
    stub ignores the process environment and reconnects quickly.
    """
    peer = RuntimePeer() if peer is None else peer
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        await peer.listen(path)
        options: dict[str, Any] = {"environ": {}, "backoff_initial": 0.01, "backoff_max": 0.05}
        options.update(stub_options)
        stub = Stub(plugin, name, idx, path, **options)
        task = asyncio.get_running_loop().create_task(stub.run())
        try:
            await peer.wait_plugin()
            if hasattr(plugin, "stub"):  # the daemon's plugin sends re-pins through it
                plugin.stub = stub
            yield peer, stub
        finally:
            await stub.stop()
            await asyncio.wait_for(task, 5)
            await peer.close()
