"""The update path: other containers' re-pins from a decision to their cgroups and the runtime.

`schedule.Schedule` (sans-IO) decides what goes when; this room does its I/O. Re-pins are
written into the containers' cgroups first, on a writer thread of their own (never the default
executor, which checkpoint saves and hint lookups share), in the order the schedule hands them
out: at most one write per container on its way, a stale one followed at once by the latest.
The runtime's record follows in paced batches through the transport (`transport.Transports`),
never awaited by an event's handler nor under the policy's lock, because the runtime holds its
own lock while it waits for our reply (docs/architecture.md, "Update schedule").

A container just granted exclusive CPUs starts only once the writes its window waits for have
landed (`before_start`, bounded by `Pacing.write_wait_s`): the runtime awaits the reply to
StartContainer before it starts the task, so its workload never runs beside a shared container
on them when the writes come first. What was written and is not on the runtime's record yet is
read back every `Pacing.recheck_s`: another writer (systemd re-applying a scope's old
`AllowedCPUs`) may undo it, and is undone in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import structlog

from nri_topology.daemon.cgroupfs import Outcome, Result
from nri_topology.daemon.drift import compare, drifted
from nri_topology.daemon.metrics import Metrics
from nri_topology.daemon.updates.schedule import PACED, Closed, Pacing, Schedule
from nri_topology.daemon.updates.transport import Transports
from nri_topology.daemon.verify import Verifier
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Stub
from nri_topology.policy.types import Decision, Placement, Update

_log = structlog.get_logger("nri_topology.daemon")


class UpdatePath:
    """Re-pins of other containers: after the reply (paced, written first) or in it."""

    def __init__(
        self,
        metrics: Metrics,
        transports: Transports,
        *,
        pacing: Pacing | None,
        cgroups: Verifier | None,
        cgroup_first: bool,
        placed: Callable[[str], bool],
        on_closed: Callable[[Closed], None],
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        self.metrics = metrics
        self.transports = transports
        self._schedule = Schedule(pacing or PACED)
        # Decisions whose re-pins the schedule has not taken yet: taken once the reply is out
        # (`decided`), and before anything else asks the schedule (`schedule`).
        self._waiting: list[Callable[[], None]] = []
        self.cgroups = cgroups
        self._cgroup_first = cgroup_first and cgroups is not None
        self._placed = placed
        self._on_closed = on_closed
        self._spawn = spawn
        self._read_only = False  # the cgroup mount cannot be written
        self._root_holds = True  # the cgroup root holds the runtime's containers (Synchronize)
        self._pool: ThreadPoolExecutor | None = None
        self._kick = asyncio.Event()
        self._landed = asyncio.Event()  # pulsed whenever writes were told to the schedule
        self._pump: asyncio.Task[None] | None = None
        self._recheck: asyncio.Task[None] | None = None
        self._publish_writes()

    # --- state ---------------------------------------------------------------------------------

    @property
    def stub(self) -> Stub | None:
        return self.transports.stub

    @stub.setter
    def stub(self, stub: Stub | None) -> None:
        self.transports.stub = stub

    @property
    def schedule(self) -> Schedule:
        """The schedule, with every decision made so far handed to it: whoever asks it (an
        event, the writes' return, the pump) sees them all, in the order they were made."""
        if self._waiting:
            self.catch_up()
        return self._schedule

    def _after_reply(self, hand_over: Callable[[], None]) -> None:
        """`hand_over` to the schedule once the event's reply is written (the event loop's next
        turn), or sooner when something asks the schedule first."""
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self.catch_up)
        self._waiting.append(hand_over)

    def catch_up(self) -> None:
        """Hand the schedule what waits for a reply to be written, now."""
        taken, self._waiting = self._waiting, []
        for hand_over in taken:
            try:
                hand_over()
            except Exception:  # one decision's failure must not lose the others'
                self.metrics.error("update_schedule")
                _log.exception("handing a decision's re-pins to the schedule failed")

    @property
    def paced(self) -> bool:
        return self.transports.paced

    @property
    def transport(self) -> str:
        return self.transports.chosen

    def writes_cgroups(self) -> bool:
        """Whether paced re-pins go into the containers' cgroups ahead of the runtime."""
        return self.paced and self.writes_off() is None

    def writes_off(self) -> str | None:
        """Why re-pins are not written into the cgroups first; None when they are."""
        if not self._cgroup_first:
            return "updates.cgroup_first is false" if self.cgroups is not None else "no cgroups"
        if not self._root_holds:
            return "the cgroup root holds none of the runtime's containers"
        if self._read_only:
            return "the cgroup mount is read-only"
        return None

    def _publish_writes(self) -> None:
        self.metrics.cgroup_writes_on.set(1 if self.writes_cgroups() else 0)

    def cgroup_root_holds(self, found: int, live: int) -> None:
        """Of `live` running containers the runtime reported, `found` have a cgroup under the
        root: with none found the root is not the runtime's (a pod's own cgroup namespace), and
        nothing is written until the next Synchronize finds them. Only a root that holds them
        is asked whether its mount is read-only (decided from the mount), which turns the
        writes off too: a pod's own cgroups are read-only anyway, and mounting them read-write
        would not help."""
        if self.cgroups is None:
            return
        holds = found > 0 or live == 0
        if holds:
            self._check_mount()
        if not holds and self._root_holds:
            self.metrics.error("cgroup_root")
            _log.warning(
                "none of the runtime's containers has its cgroup under the cgroup root: re-pins "
                "are not written into the cgroups and the cgroup checks see nothing (set "
                "topology.sysfs_root to the host's /sys, mounted with its cgroups)",
                cgroup_root=str(self.cgroups.cgroups.root),
                containers=live,
            )
        self._root_holds = holds
        self._publish_writes()

    def _check_mount(self) -> None:
        assert self.cgroups is not None
        if self.cgroups.cgroups.read_only and not self._read_only:
            self._read_only = True  # decided from the mount, not from one errno
            self._publish_writes()
            _log.warning(
                "the cgroup mount is read-only here (mount it read-write, or set "
                "updates.cgroup_first to false): re-pins wait for the runtime",
                cgroup_root=str(self.cgroups.cgroups.root),
            )

    # --- what the plugin tells -------------------------------------------------------------------

    async def configure(
        self,
        req: api_pb2.ConfigureRequest,
        lock: asyncio.Lock,
        placements: Callable[[], Mapping[str, Placement]],
    ) -> None:
        """Choose the transport; a CRI that answers only later takes over from the replies."""

        async def cri_later() -> None:
            async with lock:
                if not self.paced:  # replies applied everything but what waits for one
                    self.schedule.reset(placements().items())
                riding = self.transports.take_riders()
            self._publish_writes()
            self._spawn(self.transports.send(list(riding.values()), "cri"))

        await self.transports.configure(req, cri_later)
        self._publish_writes()

    def reset(self, held: Iterable[tuple[str, Placement]]) -> None:
        """Synchronize: the reply sets every container's placement anew."""
        self.schedule.reset(held)
        self.transports.riding.clear()

    def event(self) -> None:
        """The runtime handles an event for a pod: the runtime's record re-pins give way."""
        self.schedule.event(_clock())

    def decided(self, decision: Decision) -> tuple[Update, ...]:
        """Hand the decision's re-pins of other containers to the schedule, or, in in-reply
        mode, return them for the reply; open the window of its exclusive CPUs.

        Paced, the reply carries none of them, so the schedule takes them once the reply is
        written (a full node's hundreds of re-pins then cost the runtime's lock nothing), and
        before anything else asks it."""
        if not self.paced:
            cid = decision.container_id
            if decision.exclusive:  # applied before the container runs: no window
                self._closed((Closed(cid, 0.0),))
            return tuple(u for u in decision.updates if u.container_id != cid)
        now = _clock()
        self._after_reply(lambda: self._hand_over(decision, now))
        return ()

    def _hand_over(self, decision: Decision, now: float) -> None:
        cid = decision.container_id
        others = tuple(u for u in decision.updates if u.container_id != cid)
        sched = self._schedule
        sched.change(others, now)
        sched.holds(cid, decision.placement)
        closed = sched.grant(cid, decision.exclusive, now)
        if closed is not None:
            self._closed((closed,))
        elif decision.exclusive:
            sched.starting(cid, now)
        if others:
            self._write_ahead(u.container_id for u in others)
            self._wake()

    def defer(self, updates: Sequence[Update], why: str) -> None:
        """Re-pins with no reply to ride on (or after one): through the schedule, or in in-reply
        mode at once through the transport. Taken before the reply: a release's next event has
        no gap to hide them in, unlike a grant's (`decided`)."""
        if not updates:
            return
        if not self.paced:
            self._spawn(self.transports.send(updates, why))
            return
        self.schedule.change(updates, _clock())
        self._write_ahead(u.container_id for u in updates)
        self._wake()

    async def send(self, updates: Sequence[Update], why: str) -> None:
        """Updates of a container's own placement (a repair, a cold start's end), at once."""
        await self.transports.send(updates, why)

    def forget(self, container_id: str) -> None:
        self._closed(self.schedule.forget(container_id, _clock()))

    async def before_start(self, container_id: str) -> None:
        """A container is about to start: if it was just granted exclusive CPUs, wait (bounded)
        for the writes that free them; its window counts from here."""
        if self.writes_cgroups():
            loop = asyncio.get_running_loop()
            until = loop.time() + self._schedule.pacing.write_wait_s
            while self.schedule.writes_due(container_id) and (left := until - loop.time()) > 0:
                self._landed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._landed.wait(), left)
        self.schedule.running(container_id, _clock())

    def started(self, container_id: str) -> None:
        """The container started: the runtime's re-pins that waited for it may go, and its
        cgroup exists now."""
        self.schedule.has_cgroup(container_id)
        if self.schedule.started(container_id):
            self._wake()
        self._write_ahead((container_id,))

    async def close(self) -> None:
        self._waiting.clear()  # nothing more is written or sent
        for task in (self._pump, self._recheck):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._pump, self._recheck) if t is not None), return_exceptions=True
        )
        await self.transports.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # --- cgroup writes -------------------------------------------------------------------------

    def _writer(self) -> ThreadPoolExecutor:
        """The writes' own thread: one, so they run in the order handed out."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="nri-topology-cgroups")
        return self._pool

    def _write_ahead(self, ids: Iterable[str]) -> None:
        """Re-pins pending in the schedule go into the containers' cgroups now: the runtime
        applies them later, paced, but no container keeps running on CPUs taken from it.
        `ids`: those an event touched, the only ones that can have become writable."""
        if not self.writes_cgroups():
            return
        batch = self.schedule.to_write(ids)
        if batch:
            self._spawn(self._write(batch))

    async def _write(self, batch: dict[str, Placement]) -> None:
        """Write `batch` (handed out by the schedule) and tell the schedule what is written."""
        assert self.cgroups is not None
        try:
            results = await self.cgroups.write(batch, self._writer())
        except Exception as exc:  # the schedule must hear back, or these wait forever
            _log.error("writing cgroups failed", error=str(exc))
            results = dict.fromkeys(batch, Result(Outcome.REFUSED))
        ok = {cid: batch[cid] for cid, r in results.items() if r.outcome is Outcome.WRITTEN}
        absent = {cid for cid, r in results.items() if r.outcome is Outcome.GONE}
        failed = [cid for cid in batch if cid not in ok and cid not in absent]
        self._closed(self.schedule.written(ok, failed, _clock(), absent=absent))
        outcomes = Counter(r.outcome for r in results.values())
        for outcome, n in outcomes.items():
            self.metrics.cgroup_writes.labels(outcome.value).inc(n)
        if Outcome.READ_ONLY in outcomes:
            self._check_mount()
        self._landed.set()
        self._write_ahead(batch)  # the latest behind a stale write, or what came meanwhile
        self._watch()
        self._wake()

    def _watch(self) -> None:
        """Read back what was written until the runtime's record holds it."""
        idle = self._recheck is None or self._recheck.done()
        if idle and self.schedule.unrecorded():
            self._recheck = asyncio.ensure_future(self._rechecks())

    async def _rechecks(self) -> None:
        assert self.cgroups is not None
        while True:
            await asyncio.sleep(self._schedule.pacing.recheck_s)
            if not (written := self.schedule.unrecorded()) or not self.writes_cgroups():
                return
            seen = await self.cgroups.read(written, self._writer())
            sched = self.schedule
            now = sched.unrecorded()  # what changed while reading is not judged
            kept = {cid: p for cid, p in written.items() if now.get(cid) == p}
            reverted = [d.container_id for d in drifted(kept, seen)]
            if reverted:
                self.metrics.cgroup_drift.labels("revert").inc(len(reverted))
                _log.warning(
                    "written cgroups were set back before the runtime's record followed "
                    "(systemd re-applying a unit's properties?), writing them again",
                    containers=sorted(reverted)[:10],
                    count=len(reverted),
                )
                sched.reverted(reverted)
                self._write_ahead(reverted)

    # --- batches through the runtime -------------------------------------------------------------

    def _wake(self) -> None:
        self._kick.set()
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._drain())
            self._spawn(self._pump)

    async def _drain(self) -> None:
        """Send the schedule's batches as they fall due; ends when nothing is pending."""
        while True:
            batch, wait = self.schedule.plan(_clock())
            if batch:
                await self._send_batch(batch)
                continue
            if wait is None:
                return
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), wait)

    async def _send_batch(self, batch: dict[str, Placement]) -> None:
        """One batch of re-pins; then what landed, what to retry, what is gone."""
        started = _clock()
        if not await self.transports.batch(batch):
            self.schedule.lost(_clock())
            self._write_ahead(batch)  # newer placements that waited for these to land
            return
        self.metrics.update_batch.observe(_clock() - started)
        retry, drop = await self._landed_of(batch)
        done = self.schedule.done(_clock(), retry, drop)
        self._write_ahead(batch)  # shrinks that came while these were in flight
        repins = self.metrics.repins
        repins.labels("sent").inc(len(batch))
        for outcome, ids in (
            ("retried", done.retried),
            ("given_up", done.given_up),
            ("dropped", done.dropped),
        ):
            if ids:
                repins.labels(outcome).inc(len(ids))
        if done.given_up:
            _log.warning("re-pins did not land; the periodic check tries again", ids=done.given_up)
        self._closed(done.closed)

    async def _landed_of(self, batch: Mapping[str, Placement]) -> tuple[set[str], set[str]]:
        """Of a sent batch: those to send again (live, cgroup not as sent) and those gone
        (released meanwhile, or no cgroup to read: exited, or not yet created, which the check
        after its start covers)."""
        drop = {cid for cid in batch if not self._placed(cid)}
        if self.cgroups is None:
            return set(), drop
        live = [cid for cid in batch if cid not in drop]
        applied = await self.cgroups.read(live, self._writer())
        retry = set()
        for cid in live:
            seen = applied.get(cid)
            if seen is None:
                drop.add(cid)
            elif compare(cid, batch[cid].cpus, batch[cid].mems, seen) is not None:
                retry.add(cid)
        return retry, drop

    def _closed(self, closed: Iterable[Closed]) -> None:
        """Windows that closed: observed, and handed on (to be kept with their decision)."""
        for c in closed:
            self.metrics.exclusive_window.observe(c.seconds)
            if not c.freed:
                self.metrics.error("window_unfreed")
                _log.warning(
                    "exclusive CPUs may still be shared: a re-pin of a container holding them "
                    "did not land; the periodic check tries again",
                    container_id=c.owner,
                )
            self._on_closed(c)


def _clock() -> float:
    """The schedule's clock: the event loop's, which its timers run on."""
    return asyncio.get_running_loop().time()
