"""Configuration reload: on SIGHUP and when the file's content changes, never with a bad file.

The file is polled by content digest rather than watched by inotify: Kubernetes updates a mounted
ConfigMap by swapping a symlink, which inotify watches on the file itself miss, and a two-second
poll of one small file costs nothing. A file that fails to parse or validate, or options the
policy refuses, are logged and counted, and the configuration in force stays as it is.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Generic, TypeVar

import structlog

from nri_topology.bounded_read import TooLarge, read_bounded
from nri_topology.daemon.metrics import Metrics

T = TypeVar("T")

_log = structlog.get_logger("nri_topology.reload")


class Reloader(Generic[T]):
    """Loads `path` with `parse` and hands the result to `apply`, refusing bad input.

    `refusals` are the exception types that mean "bad configuration" (parse and apply errors);
    anything else is a bug and propagates.
    """

    def __init__(
        self,
        path: Path,
        parse: Callable[[bytes], T],
        apply: Callable[[T], Awaitable[None]],
        refusals: tuple[type[Exception], ...],
        metrics: Metrics,
        interval: float = 2.0,
        max_bytes: int = 1 << 20,
    ) -> None:
        self.path = path
        self._parse = parse
        self._apply = apply
        self._refusals = refusals
        self._metrics = metrics
        self._interval = interval
        self._max_bytes = max_bytes  # a larger file is refused unread past this
        self._digest: str | None = None  # of the content last looked at, applied or refused
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[bool]] = set()

    def mark_current(self) -> None:
        """Take the file's present content as applied (it was loaded at start-up)."""
        try:
            self._digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            self._digest = None

    async def reload(self, why: str, force: bool = True) -> bool:
        """Re-read and apply the file; False when it was refused or unchanged (unless `force`)."""
        async with self._lock:
            too_large: TooLarge | None = None
            try:
                data = read_bounded(self.path, self._max_bytes)
            except TooLarge as exc:
                data, too_large = exc.head, exc
            except OSError as exc:
                return self._refuse(why, f"cannot read {self.path}: {exc.strerror or exc}")
            digest = hashlib.sha256(data).hexdigest()
            if not force and digest == self._digest:
                return False
            self._digest = digest
            if too_large is not None:
                return self._refuse(why, str(too_large))
            return await self._apply_bytes(data, why)

    async def _apply_bytes(self, data: bytes, why: str) -> bool:
        try:
            value = self._parse(data)
            await self._apply(value)
        except self._refusals as exc:
            return self._refuse(why, str(exc))
        self._metrics.reloads.labels("applied").inc()
        _log.info("configuration applied", source=why, path=str(self.path))
        return True

    def _refuse(self, why: str, error: str) -> bool:
        self._metrics.reloads.labels("rejected").inc()
        self._metrics.error("config")
        _log.error("configuration refused, keeping the one in force", source=why, error=error)
        return False

    async def watch(self) -> None:
        """Poll the file until cancelled; apply each new content once."""
        while True:
            await asyncio.sleep(self._interval)
            await self.reload("file change", force=False)

    def install_sighup(self, loop: asyncio.AbstractEventLoop) -> None:
        """Reload on SIGHUP (systemctl reload)."""
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)

    def _on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self.reload("SIGHUP"))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
