"""The update schedule's own cost per event at a full node (CPU µs, medians), without I/O.

Run: ``.venv/bin/python benchmarks/bench_schedule.py [--live 1000] [--pending 900]
[--shared 238] [--samples 300]``; with ``PYTHONPATH=DIR`` the schedule of the source tree DIR.

A node with `live` containers, of which `pending` have written re-pins the runtime's record does
not hold yet (the runtime's bookkeeping waits for quiet moments, so on a busy node they pile up),
takes turns granting 2 exclusive CPUs of a pool whose `shared` containers are re-pinned off
them, and releasing them. Per grant, what the plugin asks of the schedule as it does:
`decided` (the shrinks handed over, the window opened, the writes handed out), the writes'
return (`written`), and one pass of the pump (`plan`); per release the same
with the growth. The placements of one decision share their CPU sets, as the policy's do.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time
from collections.abc import Iterable

from nri_topology.daemon.updates.schedule import PACED, Schedule
from nri_topology.policy.types import Placement, Update

CPUS = frozenset(range(144))
MEMS = frozenset({0})
PHASES = ("decided", "written", "pump")


def _to_write(s: Schedule, ids: Iterable[str]) -> dict[str, Placement]:
    """`to_write` as the plugin asks it; a schedule from before it took the ids looks at all."""
    if "ids" in inspect.signature(s.to_write).parameters:
        return s.to_write(ids)
    return s.to_write()


def _pump(s: Schedule, now: float) -> None:
    """One pass of the pump as the plugin makes it; a schedule from before `plan` was asked
    for a batch, then, with none, when to ask again."""
    if hasattr(s, "plan"):
        s.plan(now)
    elif not s.next_batch(now):
        s.wakeup(now)


def _event(
    s: Schedule,
    updates: list[Update],
    now: float,
    times: dict[str, list[float]],
    grant: tuple[str, frozenset[int]] | None = None,
) -> None:
    """One event's work, as `UpdatePath.decided` (with `grant`) or `defer` asks it."""
    ids = [u.container_id for u in updates]
    started = time.perf_counter()
    s.change(updates, now)
    if grant is not None:
        owner, cpus = grant
        s.holds(owner, Placement(cpus, MEMS))
        s.grant(owner, cpus, now)
    handed = _to_write(s, ids)
    decided = time.perf_counter()
    s.written(handed, (), now)
    written = time.perf_counter()
    _pump(s, now)
    pumped = time.perf_counter()
    times["decided"].append(decided - started)
    times["written"].append(written - decided)
    times["pump"].append(pumped - written)


def run(live: int, pending: int, shared: int, samples: int) -> dict[str, float]:
    s = Schedule(PACED)
    s.reset((f"c{i}", Placement(CPUS, MEMS)) for i in range(live))
    now = 0.0
    waiting = Placement(CPUS - {0}, None)  # written, not yet on the runtime's record
    s.change([Update(f"c{i}", waiting) for i in range(pending)], now)
    s.written(s.to_write(), (), now)
    grants: dict[str, list[float]] = {p: [] for p in PHASES}
    releases: dict[str, list[float]] = {p: [] for p in PHASES}
    pool = [f"c{i}" for i in range(shared)]
    for n in range(samples):
        now += 0.001
        s.event(now)
        owner, cpus = f"g{n}", frozenset({10 + 2 * (n % 8), 11 + 2 * (n % 8)})
        shrunk = Placement(CPUS - cpus, None)
        _event(s, [Update(c, shrunk) for c in pool], now, grants, (owner, cpus))
        now += 0.001
        s.event(now)
        s.forget(owner, now)
        grown = Placement(frozenset(CPUS), None)
        _event(s, [Update(c, grown) for c in pool], now, releases)
    return {
        f"{kind} {phase}": round(statistics.median(times[phase]) * 1e6, 1)
        for kind, times in (("grant", grants), ("release", releases))
        for phase in PHASES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=900)
    parser.add_argument("--shared", type=int, default=238)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    if not args.shared <= args.live or not args.pending <= args.live:
        parser.error("--shared and --pending are containers of the --live ones")
    print(json.dumps(run(args.live, args.pending, args.shared, args.samples)))


if __name__ == "__main__":
    main()
