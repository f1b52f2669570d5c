"""A plugin process launched the way the runtime launches one: socket fd + three env vars only."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

from nri_topology.nri import api_pb2
from nri_topology.testing.runtime import RuntimePeer

PLUGIN = """
import asyncio
from nri_topology.testing.event_logger import EventLogger
from nri_topology.nri.stub import Stub

asyncio.run(Stub(EventLogger(), "unused", "99").run())
"""


async def test_launched_process_serves_and_exits_with_its_socket() -> None:
    runtime_end, plugin_end = socket.socketpair()
    env = {
        "NRI_PLUGIN_NAME": "logger",
        "NRI_PLUGIN_IDX": "07",
        "NRI_PLUGIN_SOCKET": str(plugin_end.fileno()),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PLUGIN,
        env=env,
        pass_fds=(plugin_end.fileno(),),
        cwd=Path(__file__).resolve().parents[1],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    plugin_end.close()
    peer = RuntimePeer(registration_timeout=30)
    try:
        conn = await peer.attach(runtime_end)
        assert (conn.name, conn.idx) == ("logger", "07")
        pod = api_pb2.PodSandbox(id="pod0", name="web", namespace="default")
        await peer.create_container(pod, api_pb2.Container(id="ctr0", pod_sandbox_id="pod0"))
        assert [c.method for c in peer.calls] == ["Configure", "Synchronize", "CreateContainer"]
    finally:
        await peer.close()
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
