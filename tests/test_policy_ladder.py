"""The degradation ladder as a table: its rows in order, and the climb over them.

The engine's own steps are tested by behaviour in test_policy_admission.py; here the ladder's
rule alone: which step a request of each kind may take, in which order, behind which gates, and
what the grant of each says it lost.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from nri_topology.policy.accounts.grant import Grant, Op
from nri_topology.policy.admission import ladder
from nri_topology.policy.types import CpuKind, Degradation, PolicyError, QoS, Request


def test_the_ladder_names_each_step_and_what_it_loses() -> None:
    assert [(s.name, s.degradation) for s in ladder.LADDER] == [
        ("moves", None),
        ("isolated-cpus", None),
        ("shared-cpus", Degradation.SHARED_CPUS),
        ("isolated-mixed", Degradation.ISOLATED_MIXED),
        ("reserved-cpus", Degradation.RESERVED_CPUS),
        ("shared-overcommit", Degradation.SHARED_OVERCOMMIT),
    ]


@pytest.mark.parametrize(
    ("kind", "steps"),
    [
        (
            CpuKind.EXCLUSIVE,
            ("moves", "isolated-cpus", "shared-cpus", "isolated-mixed", "shared-overcommit"),
        ),
        (
            CpuKind.MIXED,
            ("moves", "isolated-cpus", "shared-cpus", "isolated-mixed", "shared-overcommit"),
        ),
        (CpuKind.ISOLATED, ("moves", "shared-cpus", "isolated-mixed", "shared-overcommit")),
        (CpuKind.SHARED, ("moves", "reserved-cpus", "shared-overcommit")),
        (CpuKind.RESERVED, ("moves", "reserved-cpus", "shared-overcommit")),
        (CpuKind.PRESERVE, ("moves",)),
    ],
)
def test_the_steps_of_each_kind_in_order(kind: CpuKind, steps: tuple[str, ...]) -> None:
    assert ladder.steps(kind) == steps


class Rig:
    """Rungs that record what the climb asks and hold at the steps named in `holds`."""

    def __init__(self, holds: set[str], admits: bool = True, degradable: bool = True) -> None:
        self.holds = holds
        self.admits = admits
        self.degradable = degradable
        self.asked: list[tuple[str, CpuKind]] = []

    def _grant(self, step: str, req: Request, kind: CpuKind | None = None) -> Grant | None:
        self.asked.append((step, req.kind))
        if step not in self.holds:
            return None
        return Grant(req, 0, kind or req.kind, frozenset(), False, 0, frozenset(), 0, False, None)

    def as_asked(self, req: Request, hint, keep, op) -> ladder.Placed:
        g = self._grant(f"as-asked/{req.kind}", req)
        if g is None:
            raise PolicyError(f"{req.kind} does not fit")
        return ladder.Placed(g, (), {})

    def after_moves(self, req: Request, hint, keep, op) -> ladder.Placed | None:
        g = self._grant(f"moves/{req.kind}", req)
        return None if g is None else ladder.Placed(g, (), {"moved": g})

    def note(self, g: Grant, asked: Request) -> None:
        g.degraded += ((asked.kind, g.kind),)  # type: ignore[operator]  # (asked, granted) pairs

    def rungs(self) -> ladder.Rungs:
        return ladder.Rungs(
            as_asked=self.as_asked,
            after_moves=self.after_moves,
            on_isolated=lambda req, op: self._grant("isolated-cpus", req),
            on_isolated_mixed=lambda req, op: self._grant("isolated-mixed", req),
            on_reserved=lambda req: self._grant("reserved-cpus", req, CpuKind.RESERVED),
            on_overcommit=lambda req, op: self._grant("shared-overcommit", req),
            commit=lambda g, op: self.asked.append(("commit", g.kind)),
            note=self.note,
            chosen=lambda g: (),
            kubelet_admits=lambda req: self.admits,
            may_degrade=lambda req: self.degradable,
        )


EXCLUSIVE = Request(
    container_id="c",
    pod_id="p",
    name="app",
    pod_name="pod",
    namespace="ns",
    qos=QoS.GUARANTEED,
    kind=CpuKind.EXCLUSIVE,
    cpu_request=2000,
    cpu_limit=2000,
    memory_request=0,
    memory_limit=None,
    exclusive=2,
    shared=0,
)
SHARED = replace(EXCLUSIVE, kind=CpuKind.SHARED, exclusive=0, shared=500, cpu_request=500)
E, S, R = CpuKind.EXCLUSIVE, CpuKind.SHARED, CpuKind.RESERVED


def climb(rig: Rig, req: Request) -> ladder.Placed:
    return ladder.climb(ladder.Climb(rig.rungs(), req, None, frozenset(), Op(), True))


@pytest.mark.parametrize(
    ("req", "holds", "asked", "granted", "noted", "reason"),
    [
        (EXCLUSIVE, {"as-asked/exclusive"}, [("as-asked/exclusive", E)], E, [(E, E)], ""),
        (
            EXCLUSIVE,
            {"moves/exclusive"},
            [("as-asked/exclusive", E), ("moves/exclusive", E)],
            E,
            [(E, E)],
            "",
        ),
        (
            EXCLUSIVE,
            {"isolated-cpus"},
            [("as-asked/exclusive", E), ("moves/exclusive", E), ("isolated-cpus", E)],
            E,
            [],  # isolated CPUs are CPUs as asked: nothing lost
            "",
        ),
        (  # shared CPUs: the ladder again for the shared request, which notes it first
            EXCLUSIVE,
            {"reserved-cpus"},
            [
                ("as-asked/exclusive", E),
                ("moves/exclusive", E),
                ("isolated-cpus", E),
                ("as-asked/shared", S),
                ("moves/shared", S),
                ("reserved-cpus", S),
                ("commit", R),
            ],
            R,
            [(S, R), (E, R)],
            "2 exclusive CPUs do not fit anywhere; ",
        ),
        (  # ... and never over-commits inside it, but after the mixed grant
            EXCLUSIVE,
            {"shared-overcommit"},
            [
                ("as-asked/exclusive", E),
                ("moves/exclusive", E),
                ("isolated-cpus", E),
                ("as-asked/shared", S),
                ("moves/shared", S),
                ("reserved-cpus", S),
                ("isolated-mixed", E),
                ("shared-overcommit", S),
            ],
            S,
            [(E, S)],
            "2 exclusive CPUs fit nowhere; ",
        ),
        (
            SHARED,
            {"shared-overcommit"},
            [
                ("as-asked/shared", S),
                ("moves/shared", S),
                ("reserved-cpus", S),
                ("shared-overcommit", S),
            ],
            S,
            [(S, S)],
            "",
        ),
    ],
)
def test_the_first_step_that_holds_places_it(
    req: Request,
    holds: set[str],
    asked: list[tuple[str, CpuKind]],
    granted: CpuKind,
    noted: list[tuple[CpuKind, CpuKind]],
    reason: str,
) -> None:
    rig = Rig(holds)
    placed = climb(rig, req)
    assert rig.asked == asked
    assert placed.grant.kind is granted
    assert list(placed.grant.degraded) == noted
    assert placed.grant.reason == reason


def test_nothing_holds_it_refused_as_asked() -> None:
    with pytest.raises(PolicyError, match="exclusive does not fit"):
        climb(Rig(set()), EXCLUSIVE)


def test_a_container_the_kubelet_would_not_admit_is_not_moved_for() -> None:
    rig = Rig({"moves/exclusive"}, admits=False)
    with pytest.raises(PolicyError, match="exclusive does not fit"):
        climb(rig, EXCLUSIVE)
    assert rig.asked == [("as-asked/exclusive", E)]


def test_a_container_that_may_not_be_degraded_is_only_moved_for() -> None:
    rig = Rig({"isolated-cpus", "reserved-cpus"}, degradable=False)
    with pytest.raises(PolicyError, match="exclusive does not fit"):
        climb(rig, EXCLUSIVE)
    assert rig.asked == [("as-asked/exclusive", E), ("moves/exclusive", E)]
