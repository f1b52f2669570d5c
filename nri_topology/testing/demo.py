"""A short pod/container life cycle through the real NRI socket against the test runtime.

Needs no container runtime: `python -m nri_topology.testing.demo` serves the event-logging plugin
to an in-process test runtime on a temporary socket, prints what was exchanged and exits 0 when
the runtime saw no protocol error. `demo(plugin)` does the same for any plugin.
"""

from __future__ import annotations

import asyncio
import sys

from nri_topology.daemon import logs
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin
from nri_topology.testing.event_logger import EventLogger
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer


def _pod(i: int) -> api_pb2.PodSandbox:
    return api_pb2.PodSandbox(id=f"pod-{i}", name=f"demo-{i}", uid=f"uid-{i}", namespace="demo")


def _container(pod: api_pb2.PodSandbox, i: int, cpus: str) -> api_pb2.Container:
    ctr = api_pb2.Container(id=f"{pod.id}-ctr-{i}", pod_sandbox_id=pod.id, name=f"app-{i}")
    ctr.linux.resources.cpu.cpus = cpus
    return ctr


async def scenario(peer: RuntimePeer, pods: int = 2, containers: int = 2) -> None:
    """Every lifecycle event once per pod/container, in the order a runtime sends them."""
    for i in range(1, pods + 1):
        pod = _pod(i)
        await peer.run_pod_sandbox(pod)
        ctrs = [_container(pod, n, f"{2 * n}-{2 * n + 1}") for n in range(containers)]
        for ctr in ctrs:
            await peer.create_container(pod, ctr)
            await peer.post_create_container(pod, ctr)
            await peer.start_container(pod, ctr)
            await peer.post_start_container(pod, ctr)
        resources = api_pb2.LinuxResources()
        resources.cpu.cpus = "0-3"
        await peer.update_container(pod, ctrs[0], resources)
        await peer.post_update_container(pod, ctrs[0])
        await peer.update_pod_sandbox(pod)
        await peer.post_update_pod_sandbox(pod)
        for ctr in ctrs:
            await peer.stop_container(pod, ctr)
            await peer.remove_container(pod, ctr)
        await peer.stop_pod_sandbox(pod)
        await peer.remove_pod_sandbox(pod)


async def demo(plugin: Plugin, name: str = "demo", idx: str = "90") -> int:
    """Run `scenario` for `plugin` and print a summary; 0 when the runtime saw no error."""
    existing = _pod(0)
    peer = RuntimePeer(pods=[existing], containers=[_container(existing, 0, "0-1")])
    try:
        async with connected(plugin, peer, name=name, idx=idx) as (peer, _):
            await scenario(peer)
    except (PluginError, TimeoutError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    methods = [call.method for call in peer.calls]
    print(
        f"demo: {len(methods)} requests to plugin {idx}-{name}, runtime errors: {len(peer.errors)}"
    )
    for method in dict.fromkeys(methods):
        print(f"  {method:<22} {methods.count(method)}")
    return 0 if not peer.errors else 1


def main() -> int:
    logs.configure(level="info")
    return asyncio.run(demo(EventLogger()))


if __name__ == "__main__":
    sys.exit(main())
