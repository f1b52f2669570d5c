"""Checking containers' real cgroups against their placements, and repairing drift; writing
shrinks into them ahead of the runtime.

After a container starts (an update that reached it between creation and start may be only in
its spec) and every `interval_s` seconds, each checked container's cpuset.cpus and cpuset.mems
are read (read-only) from the cgroup the runtime reports for it. A difference from the plugin's
current placement is logged, counted and repaired by sending that placement with
UpdateContainers. A difference is confirmed after a short delay first: the runtime applies the
updates carried by a reply only after the reply, so a placement that just changed, or one that
changed while the files were read, is on its way already and is not "repaired".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from pathlib import Path

import structlog

from nri_topology.daemon.cgroupfs import CgroupFS, Outcome, Result
from nri_topology.daemon.drift import Applied, Drift, drifted
from nri_topology.policy.types import Placement, Update
from nri_topology.topology import cpuset

_log = structlog.get_logger("nri_topology.verify")

# container id -> its decided placement, for the ids asked (all when None)
Expected = Callable[[Iterable[str] | None], Awaitable[Mapping[str, Placement]]]
Send = Callable[[list[Update], str], Awaitable[None]]


class Verifier:
    """Knows each container's cgroups path; checks them on request and on a timer, and writes
    shrinks into them ahead of the runtime (`write`), through `cgroups`."""

    def __init__(
        self,
        root: Path,
        expected: Expected,
        send: Send,
        on_drift: Callable[[str], None],
        interval_s: float = 60.0,
        confirm_s: float = 0.2,
    ) -> None:
        self.cgroups = CgroupFS(root)
        self.interval_s = interval_s
        self.confirm_s = confirm_s
        self._expected = expected
        self._send = send
        self._on_drift = on_drift
        self._paths: dict[str, str] = {}
        self._said: dict[str, Outcome] = {}  # writes not done, said once per outcome
        self._drifted: dict[str, Drift] = {}  # the last drift warned about, per container
        self._task: asyncio.Task[None] | None = None

    def track(self, container_id: str, cgroups_path: str) -> None:
        if cgroups_path:
            self._paths[container_id] = cgroups_path

    def forget(self, container_id: str) -> None:
        self._paths.pop(container_id, None)
        self._said.pop(container_id, None)
        self._drifted.pop(container_id, None)

    async def reset(self, paths: Mapping[str, str]) -> int:
        """The containers the runtime reported in Synchronize, replacing what was known; how
        many of them have their cgroup beneath the root (none of many: the root is wrong)."""
        self._paths = {cid: p for cid, p in paths.items() if p}
        self._said.clear()
        self._drifted.clear()
        if not self._paths:
            return 0
        return await asyncio.to_thread(self.cgroups.found, list(self._paths.values()))

    async def check(self, ids: Iterable[str] | None, why: str) -> list[Drift]:
        """Compare and repair; returns the drifts repaired."""
        wanted = await self._expected(None if ids is None else list(ids))
        drifts = drifted(wanted, await self.read(wanted))
        if not drifts:
            return []
        # The runtime applies the updates of a reply after the reply: give a change made just
        # now time to land, then keep only what still differs from an unchanged placement.
        await asyncio.sleep(self.confirm_s)
        now = await self._expected([d.container_id for d in drifts])
        unchanged = {
            d.container_id: wanted[d.container_id]
            for d in drifts
            if now.get(d.container_id) == wanted[d.container_id]
        }
        drifts = drifted(unchanged, await self.read(unchanged))
        updates = []
        for d in drifts:
            self._on_drift(why)
            # the same drift again (a container whose cgroup refuses it): counted, said at info
            again = self._drifted.get(d.container_id) == d
            self._drifted[d.container_id] = d
            _log.log(
                logging.INFO if again else logging.WARNING,
                "cgroup differs from the placement, updating",
                container_id=d.container_id,
                check=why,
                again=again or None,
                **_fields(d),
            )
            updates.append(Update(d.container_id, wanted[d.container_id]))
        if updates:
            await self._send(updates, f"drift_{why}")
        return drifts

    async def read(self, ids: Iterable[str], pool: Executor | None = None) -> dict[str, Applied]:
        """What the cgroups of `ids` hold (those with a readable cgroup), read in a worker
        thread (of `pool`): a periodic check of every container must not hold up the replies."""
        paths = {cid: p for cid in ids if (p := self._paths.get(cid))}
        if not paths:
            return {}
        cgroups = self.cgroups

        def read() -> dict[str, Applied]:
            found = {cid: cgroups.read(p) for cid, p in paths.items()}
            return {cid: a for cid, a in found.items() if a is not None}

        return await asyncio.get_running_loop().run_in_executor(pool, read)

    async def write(
        self, placements: Mapping[str, Placement], pool: Executor | None = None
    ) -> dict[str, Result]:
        """Write each placement into its container's cgroup, in a worker thread (of `pool`); a
        refusal is logged with the container, the file and the errno, once per container and
        outcome (one with cgroups of its own refuses every re-pin alike)."""
        cgroups, paths = self.cgroups, dict(self._paths)

        def write() -> dict[str, Result]:
            return {
                cid: cgroups.write(paths[cid], p) if cid in paths else Result(Outcome.GONE)
                for cid, p in placements.items()
            }

        results = await asyncio.get_running_loop().run_in_executor(pool, write)
        for cid, r in results.items():
            if r.outcome in _SAID and self._said.get(cid) is not r.outcome:
                self._said[cid] = r.outcome
                _log.log(
                    _SAID[r.outcome],
                    "cgroup not written, left to the runtime",
                    container_id=cid,
                    outcome=r.outcome.value,
                    file=r.file,
                    errno=errno.errorcode.get(r.errno or 0),
                    cgroups_path=paths[cid],
                )
        return results

    def start(self) -> None:
        """Start the periodic check (once; interval 0 turns it off)."""
        if self._task is None and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._periodic())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check(None, "periodic")
            except Exception as exc:  # a failed round must not end the checks
                _log.error("cgroup check failed", error=str(exc))


# Outcomes of a write that are logged, at what level: a path leaving the root is suspect.
_SAID = {
    Outcome.BUSY: logging.WARNING,
    Outcome.REFUSED: logging.WARNING,
    Outcome.OUTSIDE: logging.WARNING,
}


def _fields(d: Drift) -> dict[str, str]:
    out = {}
    if d.cpus is not None:
        out["decided_cpus"], out["applied_cpus"] = (cpuset.format(s) for s in d.cpus)
    if d.mems is not None:
        out["decided_mems"], out["applied_mems"] = (cpuset.format(s) for s in d.mems)
    return out
