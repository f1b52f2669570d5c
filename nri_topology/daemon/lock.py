"""One instance per state file: an exclusive lock held for the life of the process.

Two daemons on one runtime and one state file both place containers (each with its own view, so
they hand out the same CPUs) and the last writer's checkpoint wins. The lock is `flock` on
`<state file>.lock`, not on the state file itself, which every checkpoint write replaces by a
rename. The holder writes its pid into the lock file so that a second instance can say who holds
it. The kernel drops the lock when the holder exits, however it exits, so a stale lock file
never blocks a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path


class LockedError(Exception):
    """Another process holds the lock; the message names its pid and the lock file."""


def lock_path(state: Path) -> Path:
    return state.with_name(state.name + ".lock")


class InstanceLock:
    """The lock for one state file; `acquire` raises LockedError or OSError, `release` is safe."""

    def __init__(self, state: Path) -> None:
        self.path = lock_path(state)
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process (pid not recorded yet)"
            raise LockedError(
                f"{who} holds {self.path}: another nri-topology instance uses this state file; "
                "only one may run per state file (stop it, or give this one its own --state)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    async def wait(
        self,
        timeout_s: float,
        waiting: Callable[[LockedError], None],
        poll_s: float = 0.2,
    ) -> None:
        """Acquire, waiting up to `timeout_s` while another instance holds the lock (it gives it
        up when it stops); `waiting` hears of each refusal. Raises the last LockedError when the
        time is up."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.acquire()
                return
            except LockedError as exc:
                if time.monotonic() >= deadline:
                    raise
                waiting(exc)
            await asyncio.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def release(self) -> None:
        """Give the lock up (the file stays: removing it could race with a new holder)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
