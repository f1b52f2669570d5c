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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from nri_topology.cri.runtimes import DEFAULT_SOCKETS, CriError
from nri_topology.daemon.lock import InstanceLock, LockedError
from nri_topology.nri.stub import unreachable

_log = structlog.get_logger("nri_topology.service")
CONNECT_TIMEOUT_S = 1.0
CHECK_S = 10.0  # how often a standby proves again that it could take over


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
        _, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), CONNECT_TIMEOUT_S)
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
        from nri_topology.cri.client import CriClient  # loads gRPC: only to ask the CRI

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


async def prove(needs: Needs, seen: Callable[[str], None], every_s: float) -> None:
    """Check what taking over needs, now and every `every_s`, telling `seen` the reason it could
    not ("" when it could); a warning each time the reason changes, not at every check."""
    last: str | None = None
    while True:
        why = await problem(needs)
        if why != last:
            if why:
                _log.warning("standing by, but could not take over: not ready", reason=why)
            else:
                _log.info("standing by, could take over: ready")
            last = why
        seen(why)
        await asyncio.sleep(every_s)


class Standby:
    """An instance waiting for the one holding the state file (`holder` says who) to stop."""

    def __init__(self, holder: str) -> None:
        self.holder = holder
        self.cannot: str | None = None  # why it could not take over; "": it could; None: unchecked

    def readiness(self) -> tuple[bool, str]:
        """Ready once shown that it could take over; not while unchecked or when it could not."""
        if self.cannot is None:
            return False, "standby, checking that it could take over"
        if self.cannot:
            return False, f"standby, could not take over: {self.cannot}"
        return True, f"standby, waiting for the state file: {self.holder}"

    async def wait(
        self, lock: InstanceLock, limit: float, needs: Needs, stop: asyncio.Event
    ) -> int | None:
        """Wait for the lock (at most `limit` seconds), proving meanwhile that this instance
        could take over. None once the lock is held; else the exit status: 0 when `stop` was
        set, 2 when the wait ran out or the lock cannot be taken."""
        _log.warning(
            "another instance holds the state file, standing by",
            holder=self.holder,
            wait_seconds=limit,
        )

        def still(exc: LockedError) -> None:
            self.holder = str(exc)

        def seen(why: str) -> None:
            self.cannot = why

        waiter = asyncio.ensure_future(lock.wait(limit, still))
        stopper = asyncio.ensure_future(stop.wait())
        prover = asyncio.ensure_future(prove(needs, seen, CHECK_S))
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            waiter.cancel()
            prover.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prover
        if not waiter.done() or waiter.cancelled():
            _log.info("stopping", reason="signal while standing by")
            return 0
        error = waiter.exception()
        if isinstance(error, LockedError):
            _log.error("the state file stayed locked, giving up", error=str(error))
            return 2
        if error is not None:
            _log.error("cannot lock the state file", error=str(error))
            return 2
        _log.info("took over the state file", after=self.holder)
        return None
