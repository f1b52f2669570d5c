"""Checkpoint writes kept off the request path: coalesced, taken when the policy is idle.

A snapshot of the policy at 1000 containers and its encoding are too slow to do after every
change: they put themselves into every CreateContainer reply. Instead a change only marks the
state dirty. A background task waits until no change came for `quiet_s` (or the first unsaved
change is `max_delay_s` old, so a busy node still saves), takes the lock briefly for the
snapshot, encodes it in slices the event loop interleaves with requests (`Encoder`), and writes
the file in a thread. `flush` writes at once; the daemon calls it on shutdown.

A snapshot need not hold every entry of the body's large map (`entries_at`): it may give only
the entries changed since the previous one (`Snapshot.changed`), which the encoder keeps the text
of. The first snapshot, and the next one after a snapshot or its encoding failed, is asked whole.

A crash loses at most the last `max_delay_s` of changes from the file, never a placement: the
runtime's Synchronize reports every container with its cpuset, and the policy adopts containers
missing from the checkpoint from those cpusets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from nri_topology.daemon.checkpoint import Checkpoint, Encoder

_log = structlog.get_logger("nri_topology.checkpoint")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The body to save; `changed`: the entries of its map changed since the previous snapshot
    (None for one removed), the map in `body` then left unread; None: `body` is complete."""

    body: Mapping[str, Any]
    changed: Mapping[str, Any] | None = None


class CheckpointWriter:
    """Saves `snapshot(whole)` (taken under `lock`) to `checkpoint` some time after `changed()`.

    `whole` asks for a complete body; otherwise the snapshot may give only the entries of the map
    at `entries_at` that changed since the previous call.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        snapshot: Callable[[bool], Snapshot],
        lock: asyncio.Lock,
        on_failure: Callable[[], None],
        *,
        entries_at: tuple[str, ...] = (),
        quiet_s: float = 0.05,
        max_delay_s: float = 1.0,
        retry_s: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self._snapshot = snapshot
        self._lock = lock
        self._on_failure = on_failure
        self._quiet_s = quiet_s
        self._max_delay_s = max_delay_s
        self._retry_s = retry_s
        # The event loop's clock by default: the one its timers wait on, so quiet periods and
        # the waits for them agree (and tests can run both on a virtual clock).
        self._clock = clock or _loop_time
        self._encoder = Encoder(entries_at)
        self._whole = True  # the encoder's entries are not known to be current
        self._dirty_since: float | None = None  # first change not in a snapshot yet
        self._last_change = 0.0
        self._flushing = 0  # flushes waiting: no quiet period while any does
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None

    def changed(self) -> None:
        """The state changed; cheap, so it can run on the request path."""
        now = self._clock()
        if self._dirty_since is None:
            self._dirty_since = now
        self._last_change = now
        self._start()

    async def flush(self) -> None:
        """Write the latest state now and wait until it is on disk (or its write failed)."""
        if self._dirty_since is None and (self._task is None or self._task.done()):
            return
        self._flushing += 1
        self._wake.set()
        self._start()
        try:
            while self._task is not None and not self._task.done():
                await asyncio.shield(self._task)
        finally:
            self._flushing -= 1

    def close(self) -> None:
        """Cancel a scheduled retry of a failed write (after the final `flush`)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._dirty_since is not None:
            await self._due()
            try:
                data = await self._encoded_snapshot()
            except Exception as exc:  # a faulty snapshot must not end checkpointing for good
                _log.error("checkpoint snapshot failed, retrying later", error=repr(exc))
                self._failed()
                continue
            if await asyncio.to_thread(self.checkpoint.save_encoded, data):
                self.close()  # a pending retry has nothing left to do
            else:
                self._failed()

    async def _encoded_snapshot(self) -> bytes:
        async with self._lock:
            self._dirty_since = None
            whole, self._whole = self._whole, True  # again, unless this one is encoded
            snapshot = self._snapshot(whole)
        steps = self._encoder.steps(snapshot.body, None if whole else snapshot.changed)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                self._whole = False
                return done.value
            await asyncio.sleep(0)  # let requests in between slices of encoding

    def _failed(self) -> None:
        self._on_failure()
        if self._retry is None:
            # Try again later even if nothing changes, so a quiet node's checkpoint
            # recovers without waiting for the next container event.
            self._retry = asyncio.get_running_loop().call_later(self._retry_s, self._again)

    async def _due(self) -> None:
        """Return once the state was quiet for `quiet_s`, is `max_delay_s` old, or on flush."""
        while not self._flushing and self._dirty_since is not None:
            due = min(self._last_change + self._quiet_s, self._dirty_since + self._max_delay_s)
            delay = due - self._clock()
            if delay <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def _again(self) -> None:
        self._retry = None
        self.changed()


def _loop_time() -> float:
    return asyncio.get_running_loop().time()
