"""Why each container holds what it holds: the decisions kept for `nri-topology explain`.

Kept apart from the plugin's event handling: a decision is logged and kept after the reply that
carries it is out, and its exclusivity window joins it when the update schedule closes it, which
may come first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from nri_topology.daemon import logs
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import (
    ContainerInfo,
    Decision,
    Placement,
    PodInfo,
    PoolScore,
    Verdict,
)

_log = structlog.get_logger("nri_topology.daemon")
_TRACE_PARTS_MAX = 8192  # distinct sort keys (and verdicts) shared among kept traces


@dataclass(frozen=True, slots=True)
class Explained:
    """Why a container holds what it holds: the decision that placed it, and when."""

    what: str  # created, resized, adopted (kept as found at a restart), re-placed
    at_ns: int  # wall clock
    decision: Decision
    window_s: float | None = None  # exclusivity window of its grant, once closed


class Explanations:
    """The last decision for each placed container (`decisions`), without the updates of other
    containers and with its trace's parts shared among the kept traces."""

    def __init__(self, policy: PolicyPort, now_ns: Callable[[], int]) -> None:
        self._policy = policy
        self._now_ns = now_ns
        self.decisions: dict[str, Explained] = {}
        self._windows: dict[str, float] = {}  # closed before their decision was kept
        # Sort keys and verdicts of the kept traces, by value, so that equal ones are kept once:
        # a fill of 1000 containers made 7000 keys, 2621 of them distinct, and few verdicts.
        self._keys: dict[tuple[object, ...], tuple[object, ...]] = {}
        self._verdicts: dict[Verdict, Verdict] = {}

    def log(self, decision: Decision, what: str, why: str = "") -> None:
        """Log and keep a decision once the reply carrying it is out: its fields (the cpusets of
        dozens of updated containers) are a visible share of a reply's time."""
        known = self._policy.container(decision.container_id)  # as it is now: names are values
        asyncio.get_running_loop().call_soon(self._after_reply, decision, what, known, why)

    def window_closed(self, owner: str, seconds: float) -> None:
        """The exclusivity window of `owner`'s grant closed: kept with its decision, or until
        that is kept."""
        known = self.decisions.get(owner)
        if known is None:  # its decision is kept once the reply is out
            self._windows[owner] = seconds
        else:
            self.decisions[owner] = dataclasses.replace(known, window_s=seconds)

    def adopted(self, adopted: Sequence[str]) -> None:
        """Containers kept as found have no decision of this run: `explain` shows what they hold,
        without a trace. One placed by this process earlier (a reconnection) keeps its decision."""
        new = [cid for cid in adopted if cid not in self.decisions]
        if not new:
            return
        held, now = self._policy.assignments(), self._now_ns()
        for cid in new:
            a = held.get(cid)
            if a is not None:
                placed = Decision(
                    cid,
                    a.pool,
                    a.kind,
                    Placement(a.cpus, a.mems),
                    a.exclusive,
                    hugepages=a.hugepages,
                )
                self.decisions[cid] = Explained("adopted", now, placed)

    def synchronized(self) -> None:
        """At Synchronize: the decisions of containers still placed stay; windows awaiting theirs
        are gone with the replies they were for."""
        self.decisions = {c: e for c, e in self.decisions.items() if self._placed(c)}
        self._windows.clear()

    def forget(self, container_id: str) -> None:
        """A container released, or no longer placed: nothing of it is kept."""
        self.decisions.pop(container_id, None)
        self._windows.pop(container_id, None)

    def _placed(self, container_id: str) -> bool:
        return self._policy.container(container_id) is not None

    def _after_reply(
        self,
        decision: Decision,
        what: str,
        known: tuple[PodInfo, ContainerInfo] | None,
        why: str,
    ) -> None:
        if logs.enabled(logging.INFO):
            pod_name = f"{known[0].namespace}/{known[0].name}" if known else ""
            name = f"{pod_name}/{known[1].name}" if known else decision.container_id
            fields = logs.decision_fields(decision, name, pod_name)
            if why:
                fields["why"] = why
            _log.info(f"container {what}", **fields)
        cid = decision.container_id
        if self._placed(cid):  # not released meanwhile
            # Without the other containers' updates, which explain nothing about this one.
            kept = dataclasses.replace(decision, updates=(), trace=self._shared(decision.trace))
            window = self._windows.pop(cid, None)
            self.decisions[cid] = Explained(what, self._now_ns(), kept, window)

    def _shared(self, trace: tuple[PoolScore, ...]) -> tuple[PoolScore, ...]:
        """The trace with each sort key and verdict replaced by an equal one kept before."""
        keys, verdicts = self._keys, self._verdicts
        if len(keys) >= _TRACE_PARTS_MAX or len(verdicts) >= _TRACE_PARTS_MAX:
            keys.clear()  # the kept traces keep theirs; later ones start sharing anew
            verdicts.clear()
        return tuple(
            PoolScore(
                s.pool, keys.setdefault(s.key, s.key), verdicts.setdefault(s.result, s.result)
            )
            for s in trace
        )
