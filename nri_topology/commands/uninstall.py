"""`nri-topology uninstall --daemonset NAMESPACE/NAME`: the chart's pre-delete hook.

A NodeResourceTopology object outlives the plugin that published it (it is owned by the Node, so
only a deleted node takes it along), and a topology-aware scheduler would go on trusting it. The
plugins cannot remove their own objects on the way out: `helm uninstall` deletes their RBAC and
ServiceAccount at the same moment as their DaemonSet, so a plugin told to stop may no longer be
allowed to. This runs before any of that: it deletes the DaemonSet, waits until its pods are
gone (a running plugin would write its object again), then deletes every NodeResourceTopology
object the plugins' field manager wrote, and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

HELP = "delete the DaemonSet, wait for its plugins to stop, delete their NodeResourceTopology"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--daemonset", required=True, metavar="NAMESPACE/NAME", help="the plugins' DaemonSet"
    )
    parser.add_argument(
        "--kubeconfig", help="a kubeconfig file (default: the pod's service account)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the plugins to stop"
    )


def published_by_plugin(meta: Mapping[str, Any] | None) -> bool:
    """Whether the plugins' field manager wrote the object (theirs to remove)."""
    from nri_topology.nrt.publish import FIELD_MANAGER

    fields = (meta or {}).get("managedFields") or []
    return any(entry.get("manager") == FIELD_MANAGER for entry in fields)


async def uninstall(client, namespace: str, name: str, timeout: float) -> list[str]:
    """The names of the objects deleted; TimeoutError if the plugins' pods did not go."""
    from lightkube import ApiError
    from lightkube.resources.apps_v1 import DaemonSet
    from lightkube.resources.core_v1 import Pod
    from lightkube.types import CascadeType

    from nri_topology.nrt.publish import NodeResourceTopology

    try:
        daemonset = await client.get(DaemonSet, name, namespace=namespace)
    except ApiError as err:
        if err.status.code != 404:
            raise
        selector = None
    else:
        selector = dict(daemonset.spec.selector.matchLabels or {})
        await client.delete(DaemonSet, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
    deadline = time.monotonic() + timeout
    while selector:
        pods = [p async for p in client.list(Pod, namespace=namespace, labels=selector)]
        if not pods:
            break
        if time.monotonic() > deadline:
            names = ", ".join(p.metadata.name for p in pods)
            raise TimeoutError(f"the plugins' pods did not stop within {timeout:g}s: {names}")
        await asyncio.sleep(1)
    deleted = []
    async for nrt in client.list(NodeResourceTopology):
        meta = nrt.get("metadata") or {}
        if not isinstance(meta, Mapping):
            meta = meta.to_dict()
        if published_by_plugin(meta):
            try:
                await client.delete(NodeResourceTopology, meta["name"])
            except ApiError as err:
                if err.status.code != 404:
                    raise
            deleted.append(meta["name"])
    return deleted


def main(args: argparse.Namespace) -> int:
    from nri_topology.nrt.publish import make_client

    namespace, sep, name = args.daemonset.partition("/")
    if not sep or not namespace or not name:
        print("nri-topology uninstall: --daemonset must be NAMESPACE/NAME", file=sys.stderr)
        return 2

    async def go() -> list[str]:
        client = make_client(args.kubeconfig)
        try:
            return await uninstall(client, namespace, name, args.timeout)
        finally:
            await client.close()

    try:
        deleted = asyncio.run(go())
    except Exception as err:
        print(f"nri-topology uninstall: {err}", file=sys.stderr)
        return 1
    print(f"DaemonSet {args.daemonset} gone; NodeResourceTopology deleted: "
          f"{', '.join(deleted) or 'none'}")  # fmt: skip
    return 0
