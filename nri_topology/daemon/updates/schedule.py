"""When other containers' re-pins reach the runtime: after the reply, in small paced batches.

The runtime applies each update with one `runc update` while it holds its NRI lock, so updates
carried by a reply delay the new container and every other pod's NRI event alike. This schedule
holds the re-pins of containers other than the one an event is about, and hands them out as
small UpdateContainers batches (docs/architecture.md, "Update schedule"). It is sans-IO: the
plugin tells it what changed, what holds what, and what the runtime acknowledged, with the time,
and asks it which batch to send and when to ask again. Its rules:

* one pending placement per container, the latest; one equal to what the container will hold
  anyway is dropped, so a set that grows and shrinks back before it is sent touches nobody;
* a change that takes CPUs or memory nodes away (a shrink) is due at once; one that only adds
  (growth, after a release) waits `grow_delay_s`, for a grant that takes them back;
* one batch in flight at a time, at most `batch` updates, and `gap_s` between two, so the
  runtime's other events get its lock between two batches;
* none while a container that was just granted exclusive CPUs starts (until it has started, or
  `start_wait_s`): each re-pin costs the runtime a `runc update`, which would compete with that
  start, and the container runs on its CPUs only once started;
* after a batch the plugin says which containers to retry (still live, cgroup not as sent) and
  which to drop (gone); retries are bounded, the periodic cgroup check repairs the rest;
* with cgroup writes on, every pending placement is written to the container's cgroup at once
  (`to_write`), not waiting for a start, a delay, a batch or a gap; the runtime still applies
  it later through the transport, which keeps its own record of the container's resources,
  after `grow_delay_s` (no longer urgent, and moot if the placement returns to that record
  meanwhile: a shrink undone by a release needs no runtime call at all), one container at a
  time and only when no runtime event came for `quiet_s` (at most `quiet_max_s` late): that
  bookkeeping never holds up a pod's event by more than one re-pin. A container with a
  re-pin in flight is written only once that batch is acknowledged, so the runtime never
  applies an older placement over a newer written one;
* one ordered writer per container: a container has at most one write on its way; while it is,
  what its cgroup holds is unknown (the old placement or the one being written), so nothing
  counts as done for it and no window it may hold closes. A write that lands after a newer
  decision is stale: the latest is handed out at once behind it, and a container placed anew
  by a reply meanwhile is written back to that placement;
* a container whose cgroup was not found is not written again until it is known to have one
  (`has_cgroup`, after its start): its re-pins wait for the runtime;
* what was written and is not yet on the runtime's record (`unrecorded`) can be undone by
  another writer (systemd re-applying a scope's old `AllowedCPUs`): the plugin reads it back
  and says which were reverted, and those are written again;
* an exclusivity window per exclusive grant: open from the reply until no container that may
  still hold the granted CPUs waits for its re-pin, in its cgroup (written) or through the
  runtime. Its length is counted from the workload's start (`running`): 0 when the writes
  came first. Until then `writes_due` says whether a write it waits for is still to come.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from nri_topology.daemon.updates.holding import batch_shrinks, covers, may_hold
from nri_topology.policy.pinning import merged
from nri_topology.policy.types import Placement, Update


@dataclass(frozen=True, slots=True)
class Pacing:
    """How re-pins go out after the reply."""

    batch: int = 3  # updates per UpdateContainers: other events wait at most one batch
    gap_s: float = 0.01  # pause between two batches, for the runtime's other events
    grow_delay_s: float = 0.5  # growth waits this long for a grant that may take it back
    retries: int = 2  # sends of a re-pin that did not land, after the first
    retry_delay_s: float = 0.2
    start_wait_s: float = 1.0  # re-pins wait this long at most for a granted container's start
    # Re-pins the cgroups hold already (written) only bring the runtime's record up to date: one
    # at a time, once no runtime event came for `quiet_s`, or `quiet_max_s` after they fell due.
    quiet_s: float = 0.1
    quiet_max_s: float = 10.0
    # A granted container's start waits this long at most for the writes its window waits for.
    write_wait_s: float = 0.25
    # How often what was written, and is not on the runtime's record yet, is read back.
    recheck_s: float = 0.5


PACED = Pacing()
"""The default: re-pins after the reply."""


@dataclass(slots=True)
class _Pending:
    placement: Placement
    due: float
    attempts: int = 0
    unwritable: bool = False  # its write failed: the runtime applies it


@dataclass(slots=True)
class _Window:
    cpus: frozenset[int]
    waiting: set[str]
    started: float | None = None  # when its workload started (the StartContainer reply)
    freed: bool = True  # no re-pin it waited for was given up


@dataclass(frozen=True, slots=True)
class Closed:
    """An exclusivity window that closed: its owner's CPUs are its own now; `seconds` its
    workload ran beside others on them (0: it had not started). Not `freed`: closed because a
    re-pin was given up, so a container may still run on them."""

    owner: str
    seconds: float
    freed: bool = True


@dataclass(frozen=True, slots=True)
class Done:
    """What acknowledging a batch settled."""

    closed: tuple[Closed, ...] = ()
    retried: tuple[str, ...] = ()
    given_up: tuple[str, ...] = ()  # still not as sent after the last retry
    dropped: tuple[str, ...] = ()  # gone meanwhile


@dataclass(slots=True)
class Schedule:
    """Pending re-pins, the batch in flight, and the open exclusivity windows."""

    pacing: Pacing = PACED
    _held: dict[str, Placement] = field(default_factory=dict)  # as acknowledged or created
    # written to the container's cgroup, not yet acknowledged by the runtime
    _written: dict[str, Placement] = field(default_factory=dict)
    # of those, the fields our writes set: all a read-back may judge (the rest is the record's)
    _wrote: dict[str, Placement] = field(default_factory=dict)
    # handed out by `to_write`, not yet told: what the cgroup holds is unknown until then
    _writing: dict[str, Placement] = field(default_factory=dict)
    _no_cgroup: set[str] = field(default_factory=set)  # none found: not written until it has
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _in_flight: dict[str, _Pending] = field(default_factory=dict)
    _windows: dict[str, _Window] = field(default_factory=dict)  # by owner
    _ready_at: float = 0.0
    _starting: dict[str, float] = field(default_factory=dict)  # owner -> waited for until
    _last_event: float = float("-inf")  # the runtime's last event for a pod

    # --- what the plugin tells ---------------------------------------------------------------

    def reset(self, held: Iterable[tuple[str, Placement]]) -> None:
        """Start over from what the runtime reported (Synchronize); nothing pending."""
        self._held = dict(held)
        self._written.clear()
        self._wrote.clear()
        self._pending.clear()
        self._windows.clear()
        self._starting.clear()
        self._no_cgroup.clear()

    def holds(self, container_id: str, placement: Placement) -> None:
        """A container got `placement` without us (created with it, or in a reply)."""
        self._held[container_id] = placement
        self._unwritten(container_id)
        self._pending.pop(container_id, None)

    def change(self, updates: Iterable[Update], now: float) -> None:
        """Other containers' new placements, to send after the reply."""
        shrunk = batch_shrinks()
        for u in updates:
            cid, placement = u.container_id, u.placement
            flying = self._in_flight.get(cid)
            base = flying.placement if flying is not None else self._held.get(cid)
            runs_on = self._runs_on(cid)
            if covers(base, placement) and (flying is not None or covers(runs_on, placement)):
                self._pending.pop(cid, None)  # grew and shrank back (or the reverse) unsent
                continue
            urgent = shrunk(base, placement) or shrunk(runs_on, placement)
            due = now if urgent else now + self.pacing.grow_delay_s
            old = self._pending.get(cid)
            if old is not None:
                due = min(due, old.due)
            self._pending[cid] = _Pending(placement, due)

    def grant(self, owner: str, cpus: frozenset[int], now: float) -> Closed | None:
        """`owner` got `cpus` for itself: open its window; closed at once when nobody waits.
        None got, no window: a container being written may hold any CPU, but none of none."""
        if not cpus:
            return None
        candidates = self._pending.keys() | self._in_flight.keys() | self._writing.keys()
        candidates.discard(owner)
        waiting = self._may_run_on(candidates, cpus)
        if not waiting:
            return Closed(owner, 0.0)
        self._windows[owner] = _Window(cpus, waiting)
        return None

    def running(self, owner: str, now: float) -> None:
        """`owner`'s workload starts now: an open window counts from here."""
        if (w := self._windows.get(owner)) is not None and w.started is None:
            w.started = now

    def has_cgroup(self, container_id: str) -> None:
        """The container has a cgroup now (it started): its re-pins may be written again."""
        if container_id in self._no_cgroup:
            self._no_cgroup.discard(container_id)
            if (entry := self._pending.get(container_id)) is not None:
                entry.unwritable = False

    def reverted(self, ids: Iterable[str]) -> None:
        """Written cgroups found back on the runtime's record (another writer undid ours):
        written again by the next `to_write`."""
        for cid in ids:
            if self._unwritten(cid) is not None and cid in self._pending:
                self._pending[cid].unwritable = False

    def starting(self, owner: str, now: float) -> None:
        """`owner`, just granted exclusive CPUs, is about to start: re-pins wait for it."""
        if self.pacing.start_wait_s > 0:
            self._starting[owner] = now + self.pacing.start_wait_s

    def event(self, now: float) -> None:
        """The runtime handles an event for a pod: re-pins the cgroups hold wait for quiet."""
        self._last_event = now

    def started(self, owner: str) -> bool:
        """`owner` has started (or will not): re-pins may go. Whether they waited for it."""
        return self._starting.pop(owner, None) is not None

    def forget(self, container_id: str, now: float) -> tuple[Closed, ...]:
        """The container is gone: nothing to send to it; its own window is void."""
        self._starting.pop(container_id, None)
        self._held.pop(container_id, None)
        self._unwritten(container_id)
        self._pending.pop(container_id, None)
        self._windows.pop(container_id, None)
        self._no_cgroup.discard(container_id)
        return self._leave(container_id, now)

    # --- what the plugin asks ----------------------------------------------------------------

    def busy(self, container_id: str) -> bool:
        """Whether a re-pin of the container is pending, being written or in flight."""
        return (
            container_id in self._pending
            or container_id in self._in_flight
            or container_id in self._writing
        )

    def open_windows(self) -> int:
        return len(self._windows)

    def writes_due(self, owner: str) -> bool:
        """Whether `owner`'s open window waits for a write still to come (handed out, or to be
        handed out); False once it waits for the runtime alone, or is closed. A container whose
        re-pin is in flight is written only once the runtime answered, which may wait for the
        very event whose answer waits here: not counted."""
        w = self._windows.get(owner)
        if w is None:
            return False
        return any(
            cid in self._writing
            or (
                (e := self._pending.get(cid)) is not None
                and not e.unwritable
                and cid not in self._in_flight
                and cid not in self._no_cgroup
            )
            for cid in w.waiting
        )

    def unrecorded(self) -> dict[str, Placement]:
        """What our writes set in the cgroups and the runtime's record does not hold yet
        (nothing on its way to them): the fields another writer could undo. Only those: a
        field the writes leave alone is the record's, whatever the cgroup holds."""
        busy = self._writing.keys() | self._in_flight.keys()
        return {cid: self._wrote[cid] for cid in self._written if cid not in busy}

    def to_write(self, ids: Iterable[str] | None = None) -> dict[str, Placement]:
        """Pending placements to write to the containers' cgroups now, whatever they are due:
        not in flight (the runtime could apply the older placement after the write), not
        written or being written, not refused before. `ids`: only those may have become
        writable since the last call (those just changed, written, acknowledged or started),
        so only those are looked at; a full node holds hundreds pending for the record."""
        pending = self._pending
        if ids is None:
            entries: Iterable[tuple[str, _Pending]] = pending.items()
        else:
            entries = ((cid, entry) for cid in ids if (entry := pending.get(cid)) is not None)
        out = {
            cid: entry.placement
            for cid, entry in entries
            if not entry.unwritable
            and cid not in self._in_flight
            and cid not in self._writing
            and cid not in self._no_cgroup
            and not covers(self._runs_on(cid), entry.placement)
        }
        self._writing.update(out)
        return out

    def written(
        self,
        placements: Mapping[str, Placement],
        failed: Collection[str],
        now: float,
        *,
        absent: Collection[str] = (),
    ) -> tuple[Closed, ...]:
        """What `to_write` handed out: `placements` are in the cgroups now, `failed` are not
        (they wait for the runtime), nor `absent`, which have no cgroup (until `has_cgroup`).
        Closes the windows that waited only for them."""
        for cid in (*failed, *absent):
            self._writing.pop(cid, None)
            if (entry := self._pending.get(cid)) is not None:
                entry.unwritable = True
        self._no_cgroup.update(c for c in absent if c in self._held or c in self._pending)
        closed: list[Closed] = []
        for cid, placement in placements.items():
            self._writing.pop(cid, None)
            if cid not in self._held and cid not in self._pending:
                continue  # forgotten meanwhile
            held = self._held.get(cid)
            holds = merged(self._runs_on(cid), placement)
            if covers(held, holds):
                self._unwritten(cid)  # back to the runtime's record
            else:
                self._written[cid] = holds
                self._wrote[cid] = merged(self._wrote.get(cid), placement)
            entry = self._pending.get(cid)
            if entry is None:
                if not covers(held, holds) and held is not None:
                    # placed anew by a reply while this was written: write that back
                    self._pending[cid] = _Pending(held, now)
            elif entry.placement == placement:
                if covers(held, placement):
                    del self._pending[cid]  # nothing to send: the record holds it
                else:  # no longer urgent: a later change may make it moot
                    entry.due = max(entry.due, now + self.pacing.grow_delay_s)
            # else stale: a newer decision came meanwhile; `to_write` hands it out next
            if self._windows:
                closed += self._settled(cid, placement, now)
        return tuple(closed)

    def next_batch(self, now: float) -> dict[str, Placement]:
        """The updates to send now (empty: none due, or a batch is still in flight): up to
        `batch` re-pins the cgroups do not hold yet, else one they hold."""
        return self.plan(now)[0]

    def wakeup(self, now: float) -> float | None:
        """Seconds until `next_batch` has something; None while nothing is pending or a batch
        is in flight (`change`, `done` and `written` are the next moments to ask)."""
        return None if self._in_flight else self._wait(now, self._ready(now)[2])

    def plan(self, now: float) -> tuple[dict[str, Placement], float | None]:
        """`next_batch`, and when it has nothing, `wakeup`, from one pass over what is
        pending: the pump asks both at every event of a full node."""
        if self._in_flight or not self._pending:
            return {}, None
        urgent, recorded, earliest = self._ready(now)
        if urgent and now >= self._ready_at:
            chosen = [cid for _, cid in heapq.nsmallest(self.pacing.batch, urgent)]
        elif recorded is not None and now >= self._ready_at:
            chosen = [recorded[1]]
        else:
            return {}, self._wait(now, earliest)
        batch = {}
        for cid in chosen:
            entry = self._pending.pop(cid)
            self._in_flight[cid] = entry
            batch[cid] = entry.placement
        return batch, None

    def _wait(self, now: float, earliest: float | None) -> float | None:
        if earliest is None:
            return None  # (or all being written: `written` is the next moment to ask)
        return max(0.0, max(earliest, self._ready_at) - now)

    def done(self, now: float, retry: Collection[str] = (), drop: Collection[str] = ()) -> Done:
        """The batch in flight was acknowledged; `retry` did not land, `drop` are gone."""
        closed: list[Closed] = []
        retried, given_up, dropped = [], [], []
        flown, self._in_flight = self._in_flight, {}
        self._ready_at = now + self.pacing.gap_s
        for cid, entry in flown.items():
            if cid in drop:
                dropped.append(cid)
                self._held.pop(cid, None)
                self._unwritten(cid)
                self._pending.pop(cid, None)
                closed += self._leave(cid, now)
            elif cid in retry:
                if cid in self._pending:
                    continue  # a newer placement goes out anyway
                if entry.attempts >= self.pacing.retries:
                    given_up.append(cid)
                    closed += self._leave(cid, now, freed=False)
                    continue
                retried.append(cid)
                due = now + self.pacing.retry_delay_s
                self._pending[cid] = _Pending(entry.placement, due, entry.attempts + 1)
            else:
                self._held[cid] = merged(self._held.get(cid), entry.placement)
                self._unwritten(cid)
                closed += self._settled(cid, entry.placement, now)
        return Done(tuple(closed), tuple(retried), tuple(given_up), tuple(dropped))

    def lost(self, now: float) -> None:
        """The batch in flight may not have reached the runtime (connection lost): forget it;
        Synchronize on reconnect reports what each container holds."""
        self._in_flight.clear()
        self._ready_at = now

    # --- internals ---------------------------------------------------------------------------

    def _may_run_on(self, ids: Iterable[str], cpus: frozenset[int]) -> set[str]:
        """Those of `ids` that run, or may soon, on some of `cpus`: by what the cgroup holds,
        or by a re-pin in flight, which the runtime may apply at any moment."""
        flying = self._in_flight
        return {
            cid
            for cid in ids
            if may_hold(self._runs_on(cid), cpus)
            or ((f := flying.get(cid)) is not None and may_hold(f.placement, cpus))
        }

    def _unwritten(self, cid: str) -> Placement | None:
        """The cgroup holds the runtime's record again (or the container is gone)."""
        self._wrote.pop(cid, None)
        return self._written.pop(cid, None)

    def _runs_on(self, cid: str) -> Placement | None:
        """What the container's cgroup holds: written by us, else as the runtime applied it;
        unknown (None) while a write is on its way."""
        if cid in self._writing:
            return None
        written = self._written.get(cid)
        return written if written is not None else self._held.get(cid)

    def _ready(
        self, now: float
    ) -> tuple[list[tuple[float, str]], tuple[float, str] | None, float | None]:
        """When each pending re-pin (not being written) may go, in one pass, as `next_batch`
        and `wakeup` ask it at every event of a full node: one the cgroup lacks when due, but
        not while a granted container starts; one it holds (written) only in a quiet moment.
        Returns those the cgroups lack that may go now (time, id), the first that may go now
        of those they hold, and the earliest time any may go."""
        start = max(self._starting.values()) if self._waits(now) else 0.0
        quiet = self._last_event + self.pacing.quiet_s
        quiet_max = self.pacing.quiet_max_s
        writing, written = self._writing, self._written
        urgent: list[tuple[float, str]] = []
        recorded: tuple[float, str] | None = None
        earliest: float | None = None
        for cid, p in self._pending.items():
            if cid in writing:
                continue
            due = p.due  # the times below spelled out, not with min and max: hundreds per event
            if (w := written.get(cid)) is not None and covers(w, p.placement):
                t = due + quiet_max  # when due, in a quiet moment or quiet_max_s later
                if quiet < t:
                    t = quiet if quiet > due else due
                if t <= now and (recorded is None or (t, cid) < recorded):
                    recorded = (t, cid)
            else:
                t = due if due >= start else start
                if t <= now:
                    urgent.append((t, cid))
            if earliest is None or t < earliest:
                earliest = t
        return urgent, recorded, earliest

    def _waits(self, now: float) -> bool:
        """Whether a granted container's start still holds the re-pins back."""
        if self._starting:
            self._starting = {o: until for o, until in self._starting.items() if until > now}
        return bool(self._starting)

    def _settled(self, cid: str, placement: Placement, now: float) -> list[Closed]:
        """Close the windows that waited only for `cid`, now holding none of their CPUs."""
        return [
            c
            for owner, w in list(self._windows.items())
            if cid in w.waiting and not may_hold(placement, w.cpus)
            for c in self._discard(owner, w, cid, now)
        ]

    def _leave(self, cid: str, now: float, *, freed: bool = True) -> tuple[Closed, ...]:
        return tuple(
            c
            for owner, w in list(self._windows.items())
            if cid in w.waiting
            for c in self._discard(owner, w, cid, now, freed)
        )

    def _discard(
        self, owner: str, w: _Window, cid: str, now: float, freed: bool = True
    ) -> list[Closed]:
        w.waiting.discard(cid)
        w.freed = w.freed and freed
        if w.waiting:
            return []
        del self._windows[owner]
        return [Closed(owner, 0.0 if w.started is None else now - w.started, w.freed)]
