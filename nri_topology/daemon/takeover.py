"""Whether an instance standing by for the state file could take over now (`/readyz`).

A DaemonSet's surge update stops the old pod as soon as the new one is ready, so a standby is
ready only when what it would need once the lock is free is there already; otherwise the rollout
stalls and the old instance keeps serving. Configuration and sysfs are proven before it stands
by (the daemon does not start without them); what is left is checked here, without acting:

* the runtime's NRI socket accepts a connection. It is closed at once, before registering: the
  old instance serves, and the runtime drops a connection that never registers;
* the runtime's CRI answers Version, where updates are to go through it (`updates.transport:
  cri`, or `auto` with `updates.cri_socket` set); with `cri` and no socket set, the runtime's is
  known only at Configure, so any runtime's default socket answering will do;
* the cgroup hierarchy where the containers' cgroups are read and written is a cgroup hierarchy
  and holds a `kubepods` tree (the kubelet's, `kubepods` with the cgroupfs driver,
  `kubepods.slice` with systemd's). Which containers the runtime runs is told only by
  Synchronize, after registering; the tree the kubelet puts every pod under is what can be seen
  before, and it is missing exactly when the host's hierarchy is not the one mounted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nri_topology.cri.client import DEFAULT_SOCKETS, CriClient, CriError
from nri_topology.nri.stub import unreachable

CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class Needs:
    """What taking over needs: the NRI socket, the CRI sockets of which one must answer (none:
    no CRI needed), and the cgroup root (None: cgroups are not read)."""

    nri_socket: str
    cri_sockets: tuple[str, ...] = ()
    cgroup_root: Path | None = None


def cri_sockets(transport: str, configured: str | None) -> tuple[str, ...]:
    """The CRI sockets of which one must answer for updates to go the configured way."""
    if configured and transport in ("cri", "auto"):
        return (configured,)
    if transport == "cri":
        return tuple(DEFAULT_SOCKETS.values())
    return ()


async def nri_problem(path: str) -> str:
    """Why the NRI socket at `path` takes no connection ("" when it takes one)."""
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(path), CONNECT_TIMEOUT_S
        )
    except TimeoutError:
        return f"the NRI socket at {path} does not accept a connection within {CONNECT_TIMEOUT_S} s"
    except OSError as exc:
        return unreachable(path, exc)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ""


async def cri_problem(paths: Iterable[str]) -> str:
    """Why none of the CRI sockets `paths` answers ("" when one does)."""
    tried = []
    for path in paths:
        if not Path(path).exists():
            tried.append(f"no CRI socket at {path}")
            continue
        client = CriClient(path)
        try:
            await client.version(CONNECT_TIMEOUT_S)
            return ""
        except CriError as exc:
            tried.append(str(exc))
        finally:
            await client.close()
    return "the runtime's CRI does not answer (updates.cri_socket): " + "; ".join(tried)


def cgroup_problem(root: Path) -> str:
    """Why the containers' cgroups cannot be under `root` ("" when they can): no cgroup
    hierarchy there, or none holding the kubelet's pods."""
    try:
        names = [p.name for p in root.iterdir() if p.is_dir()]
    except OSError as exc:
        return f"no cgroup hierarchy at {root}: {exc.strerror or exc} (mount the host's)"
    if not any((root / f).is_file() for f in ("cgroup.controllers", "cpuset.cpus")):
        return f"{root} is not a cgroup hierarchy with the cpuset controller (mount the host's)"
    if not any(name.startswith("kubepods") for name in names):
        return (
            f"no kubepods cgroup under {root}: the runtime's pod containers are not visible here "
            "(mount the host's cgroup hierarchy)"
        )
    return ""


async def problem(needs: Needs) -> str:
    """Why this instance could not take over now, every reason ("" when it could)."""
    found = [await nri_problem(needs.nri_socket)]
    if needs.cri_sockets:
        found.append(await cri_problem(needs.cri_sockets))
    if needs.cgroup_root is not None:
        found.append(cgroup_problem(needs.cgroup_root))
    return "; ".join(p for p in found if p)
