"""The degradation ladder: the steps tried, in order, for a container that does not fit as asked.

`LADDER` is the whole rule, one row per step: its name, what the container gets less of there
(`Degradation`, None when nothing), and the requests it applies to; `climb` walks it. Why each
step exists, and the kubelet's rules behind them, are in `parity`. Before the first step the
request is tried as asked; a container the kubelet would not admit is refused there, and so is
one that may not be degraded (`parity.may_degrade`) after the moves, the one step that places it
as asked. The steps themselves (`Rungs`) are the engine's: the ladder only orders them and says
what each grant lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from nri_topology.policy.accounts.grant import Grant, Op
from nri_topology.policy.admission import parity
from nri_topology.policy.types import (
    EXCLUSIVE_KINDS,
    CpuKind,
    Degradation,
    PolicyError,
    PoolScore,
    Request,
)


class Placed(NamedTuple):
    """A committed grant, its trace, and the old grants of the shared containers moved for it."""

    grant: Grant
    trace: tuple[PoolScore, ...]
    moved: dict[str, Grant]


@dataclass(frozen=True, slots=True)
class Rungs:
    """What the engine does at each step; every grant returned is committed but `on_reserved`'s
    (`commit` does that), None when the step does not hold the request, the state unchanged."""

    as_asked: Callable[[Request, int | None, frozenset[int], Op], Placed]  # PolicyError: no pool
    after_moves: Callable[[Request, int | None, frozenset[int], Op], Placed | None]
    on_isolated: Callable[[Request, Op], Grant | None]
    on_isolated_mixed: Callable[[Request, Op], Grant | None]
    on_reserved: Callable[[Request], Grant | None]
    on_overcommit: Callable[[Request, Op], Grant | None]
    commit: Callable[[Grant, Op], None]
    note: Callable[[Grant, Request], None]  # set the grant's degradations against what was asked
    chosen: Callable[[Grant], tuple[PoolScore, ...]]  # the trace of a grant made without choice
    kubelet_admits: Callable[[Request], bool]
    may_degrade: Callable[[Request], bool]


class Climb(NamedTuple):
    """One request's way up the ladder."""

    rungs: Rungs
    req: Request
    hint: int | None  # the pool to try first (a resize's old pool)
    keep: frozenset[int]  # the CPUs to keep when they still fit (a resize's old ones)
    op: Op
    overcommit: bool  # the last step may be taken (not inside the shared-CPUs step)


def _moves(c: Climb) -> Placed | None:
    placed = c.rungs.after_moves(c.req, c.hint, c.keep, c.op)
    if placed is not None:
        c.rungs.note(placed.grant, c.req)
    return placed


def _isolated(c: Climb) -> Placed | None:
    g = c.rungs.on_isolated(c.req, c.op)
    return None if g is None else Placed(g, c.rungs.chosen(g), {})


def _shared(c: Climb) -> Placed | None:
    try:
        shared = parity.as_kind(c.req, CpuKind.SHARED)
        g, trace, moved = climb(Climb(c.rungs, shared, None, frozenset(), c.op, False))
    except PolicyError:
        return None
    g.reason = f"{c.req.exclusive} exclusive CPUs do not fit anywhere; {g.reason}"
    c.rungs.note(g, c.req)
    return Placed(g, trace, moved)


def _isolated_mixed(c: Climb) -> Placed | None:
    g = c.rungs.on_isolated_mixed(c.req, c.op)
    if g is None:
        return None
    c.rungs.note(g, c.req)
    return Placed(g, c.rungs.chosen(g), {})


def _reserved(c: Climb) -> Placed | None:
    g = c.rungs.on_reserved(c.req)
    if g is None:
        return None
    c.rungs.commit(g, c.op)
    c.rungs.note(g, c.req)
    return Placed(g, c.rungs.chosen(g), {})


def _overcommit(c: Climb) -> Placed | None:
    if not c.overcommit:
        return None
    exclusive = c.req.kind in EXCLUSIVE_KINDS
    g = c.rungs.on_overcommit(parity.as_kind(c.req, CpuKind.SHARED) if exclusive else c.req, c.op)
    if g is None:
        return None
    if exclusive:
        g.reason = f"{c.req.exclusive} exclusive CPUs fit nowhere; {g.reason}"
    c.rungs.note(g, c.req)
    return Placed(g, c.rungs.chosen(g), {})


ANY = frozenset(CpuKind)
SHARING = frozenset({CpuKind.SHARED, CpuKind.RESERVED})


@dataclass(frozen=True, slots=True)
class Step:
    """One row of the ladder."""

    name: str
    degradation: Degradation | None  # what the container gets less of here
    kinds: frozenset[CpuKind]  # the kinds of request the step is for
    degrades: bool  # gives something else than asked: only when the request may be degraded
    take: Callable[[Climb], Placed | None]


LADDER: tuple[Step, ...] = (
    # as asked, after moving a few shared containers out of the way (`moves`)
    Step("moves", None, ANY, False, _moves),
    # exclusive CPUs from the kernel-isolated ones when no ordinary ones are left
    Step("isolated-cpus", None, frozenset({CpuKind.EXCLUSIVE, CpuKind.MIXED}), True, _isolated),
    # the same amount of shared CPUs, up this ladder again (without over-commit)
    Step("shared-cpus", Degradation.SHARED_CPUS, EXCLUSIVE_KINDS, True, _shared),
    # ordinary CPUs that can be sliced plus isolated ones, in one grant at the root
    Step("isolated-mixed", Degradation.ISOLATED_MIXED, EXCLUSIVE_KINDS, True, _isolated_mixed),
    # the reserved CPUs, the kubelet's shared CPUs of last resort
    Step("reserved-cpus", Degradation.RESERVED_CPUS, SHARING, True, _reserved),
    # the root's shared CPUs, charged only the shared milli-CPU left there
    Step(
        "shared-overcommit",
        Degradation.SHARED_OVERCOMMIT,
        SHARING | EXCLUSIVE_KINDS,
        True,
        _overcommit,
    ),
)


def steps(kind: CpuKind) -> tuple[str, ...]:
    """The names of the steps a request of `kind` may take, in order."""
    return tuple(s.name for s in LADDER if kind in s.kinds)


def climb(c: Climb) -> Placed:
    """Place the request as asked, else by the first step of the ladder that holds it;
    the refusal of the request as asked when none does."""
    r, req = c.rungs, c.req
    try:
        placed = r.as_asked(req, c.hint, c.keep, c.op)
    except PolicyError as e:
        refusal = e
    else:
        r.note(placed.grant, req)
        return placed
    if not r.kubelet_admits(req):
        raise refusal
    degradable: bool | None = None  # asked once, when a step would degrade
    for step in LADDER:
        if req.kind not in step.kinds:
            continue
        if step.degrades:
            if degradable is None:
                degradable = r.may_degrade(req)
            if not degradable:
                raise refusal
        found = step.take(c)
        if found is not None:
            return found
    raise refusal
