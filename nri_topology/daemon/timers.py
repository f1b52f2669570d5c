"""What waits on the clock in the daemon: cold starts and the holds of stopped containers' CPUs.

`Timers` keeps when each ends and the asyncio timers that end it; the work done then (a policy
call under the plugin's lock) is the plugin's, handed in as callbacks, so this module knows neither
the policy nor the lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from nri_topology.policy.types import ColdStart


def _is_ns(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mapping(value: Any) -> Mapping[str, Any]:
    """A checkpoint part that should be a mapping; anything else counts as empty."""
    return value if isinstance(value, Mapping) else {}


class Timers:
    """Cold-start deadlines (wall clock, so they survive a restart) and holds of stopped
    containers' CPUs for their next attempt, each with the asyncio timer that ends it.

    `cold_start_over` and `hold_over` are called with the container's id when a timer fires; the
    plugin does the work under its lock (`cold_start_due` says whether it is still to be done).
    """

    def __init__(
        self,
        now_ns: Callable[[], int],
        cold_start_over: Callable[[str], None],
        hold_over: Callable[[str], None],
    ) -> None:
        self._now_ns = now_ns
        self._cold_start_over = cold_start_over
        self._hold_over = hold_over
        self._pending: dict[str, int] = {}  # container -> delay in ns, timer not started yet
        self._deadlines: dict[str, int] = {}  # container -> wall-clock deadline in ns
        self._handles: dict[str, asyncio.TimerHandle] = {}
        # Stopped containers whose CPUs the policy holds for their next attempt (`policy.hold`),
        # and the timer that ends each hold.
        self._holds: dict[str, asyncio.TimerHandle] = {}

    # --- cold starts --------------------------------------------------------------------------

    def created(self, container_id: str, delay_ns: int) -> None:
        """A container placed in cold start: its timer starts when the container does."""
        self._pending[container_id] = delay_ns

    def started(self, container_id: str) -> bool:
        """Start the cold-start timer of a container that started; False when it has none."""
        delay = self._pending.pop(container_id, None)
        if delay is None:
            return False
        self._deadlines[container_id] = self._now_ns() + delay
        self._arm(container_id, delay / 1e9)
        return True

    def cold_start_due(self, container_id: str) -> bool:
        """Whether a fired cold-start timer still has work: not when released meanwhile."""
        self._handles.pop(container_id, None)
        return self._deadlines.pop(container_id, None) is not None

    def restore(
        self, saved: object, cold_starts: Mapping[str, ColdStart], created: Collection[str]
    ) -> None:
        """Keep the cold-start timers of the containers still in cold start.

        A cold start belongs to the container, so a saved deadline is kept whether the container
        was adopted or re-placed; one that passed while the plugin was down fires now. A
        container not started yet (`created`) waits for StartContainer as before. A started one
        without a saved deadline (no checkpoint, or a crash before it was written) gets the full
        duration from now: when it started is not known, and widening too early defeats the
        cold start. Deadlines are wall-clock (they must outlive the process); one further away
        than the full duration (the clock was set back) is cut to it.
        """
        for handle in self._handles.values():
            handle.cancel()
        now = self._now_ns()
        kept = _mapping(saved)
        pending = _mapping(kept.get("pending_ns"))
        deadlines = _mapping(kept.get("deadline_ns"))
        self._pending, self._deadlines, self._handles = {}, {}, {}
        for cid, cold in cold_starts.items():
            if cid in created:
                delay = pending.get(cid)
                self._pending[cid] = delay if _is_ns(delay) else cold.delay_ns
                continue
            deadline = deadlines.get(cid)
            if not _is_ns(deadline):
                deadline = now + cold.delay_ns
            deadline = min(deadline, now + cold.delay_ns)
            self._deadlines[cid] = deadline
            self._arm(cid, max(0.0, (deadline - now) / 1e9))

    def reconfigured(self, cold_starts: Mapping[str, ColdStart]) -> None:
        """The policy's cold starts after new options: each keeps its deadline, or its wait for
        the container's start."""
        self.restore(self.to_json(), cold_starts, set(self._pending))

    def to_json(self) -> dict[str, Any]:
        """The checkpoint's part: what each cold start waits for."""
        return {"pending_ns": dict(self._pending), "deadline_ns": dict(self._deadlines)}

    def _arm(self, container_id: str, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        old = self._handles.pop(container_id, None)
        if old is not None:
            old.cancel()
        self._handles[container_id] = loop.call_later(
            delay_s, lambda: self._cold_start_over(container_id)
        )

    def _cancel(self, container_id: str) -> None:
        self._pending.pop(container_id, None)
        self._deadlines.pop(container_id, None)
        handle = self._handles.pop(container_id, None)
        if handle is not None:
            handle.cancel()

    # --- holds --------------------------------------------------------------------------------

    @property
    def held(self) -> Collection[str]:
        """The stopped containers whose CPUs are held."""
        return self._holds.keys()

    def hold(self, container_id: str, seconds: float) -> None:
        """A stopped container's CPUs held for its next attempt, for `seconds`; its cold start
        and any earlier hold end."""
        self._cancel(container_id)
        self.end_holds([container_id])
        self._holds[container_id] = asyncio.get_running_loop().call_later(
            seconds, lambda: self._hold_over(container_id)
        )

    def end_holds(self, ids: Iterable[str]) -> None:
        """Forget the holds of these containers (released, or taken over by a next attempt)."""
        for cid in ids:
            handle = self._holds.pop(cid, None)
            if handle is not None:
                handle.cancel()

    # --- both ---------------------------------------------------------------------------------

    def forget(self, container_id: str) -> None:
        """A released container: its cold start and its hold end."""
        self._cancel(container_id)
        self.end_holds([container_id])

    def stop(self) -> None:
        """At shutdown: no timer fires any more. Deadlines stay in the checkpoint; the next run
        re-arms them."""
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        for handle in self._holds.values():
            handle.cancel()
