"""The pool choice on its own: order, failed grants, the trace and the runner-up as data."""

from __future__ import annotations

import pytest

from nri_topology.policy.choice import choose, scoring
from nri_topology.policy.pools import Pool, build_pools
from nri_topology.policy.shaping import shape
from nri_topology.policy.types import Outcome, PoolScore, Verdict
from tests import machines

SERVER = machines.load("server")
POOLS = build_pools(SERVER, frozenset(SERVER.cpus), SERVER.isolated, frozenset())
ORDER = {p.name: p.index for p in POOLS}


def option(pool: Pool, hint_miss: int = 0) -> choose.Option:
    numa = (len(pool.cpu_nodes), 10.0)
    key = scoring.sort_key(
        pool,
        affinity=0.0,
        hint_miss=hint_miss,
        tier_miss=False,
        relaxed=False,
        burst_short=False,
        isolated_short=False,
        numa=numa,
        cores_short=False,
        colocated=0,
        free_shared=1000,
    )
    return choose.Option(key, pool, hint_miss, frozenset(), False, ())


def grant_unless(failing: set[str]):
    def attempt(o: choose.Option) -> str:
        if o.pool.name in failing:
            raise shape.GrantFailed("cannot slice")
        return o.pool.name

    return attempt


def verdicts(c: choose.Chosen[str]) -> dict[str, str]:
    return {s.pool: s.verdict for s in c.trace}


LEAF_A, LEAF_B = [p for p in POOLS if not p.children and p.cpu_nodes][:2]  # two NUMA nodes


@pytest.mark.parametrize(
    ("failing", "hint", "winner", "runner_up", "criterion"),
    [
        (set(), None, LEAF_A.name, LEAF_B.name, "hints"),  # B misses a hinted node
        ({LEAF_A.name}, None, LEAF_B.name, None, ""),  # A fails, nothing left to lose
        (set(), LEAF_B.index, LEAF_B.name, LEAF_A.name, "hints"),  # the hint is tried first
    ],
)
def test_first_grant_in_order_wins_and_the_next_is_runner_up(
    failing: set[str], hint: int | None, winner: str, runner_up: str | None, criterion: str
) -> None:
    options = [option(LEAF_B, hint_miss=1), option(LEAF_A)]
    c = choose.choose(options, [], hint, grant_unless(failing), ORDER)
    assert c.grant == winner
    assert verdicts(c)[winner] == "chosen"
    if runner_up is None:
        assert c.runner_up is None
        assert verdicts(c)[LEAF_A.name] == "grant failed: cannot slice"
    else:
        assert c.runner_up is not None and c.runner_up.pool == runner_up
        assert c.runner_up.result == Verdict(Outcome.LOST, winner=winner, criterion=criterion)
        assert verdicts(c)[runner_up] == f"lost to {winner} on {criterion}"


def test_trace_is_in_pool_order_with_the_unfit_pools() -> None:
    unfit = [PoolScore(POOLS[0].name, (), Verdict(Outcome.UNFIT, "no CPUs"))]
    c = choose.choose([option(LEAF_B), option(LEAF_A)], unfit, None, grant_unless(set()), ORDER)
    assert [s.pool for s in c.trace] == sorted((s.pool for s in c.trace), key=ORDER.__getitem__)
    assert verdicts(c)[POOLS[0].name] == "does not fit: no CPUs"


def test_nothing_granted_leaves_no_winner() -> None:
    c = choose.choose([option(LEAF_A)], [], None, grant_unless({LEAF_A.name}), ORDER)
    assert c.grant is None and c.runner_up is None
    assert verdicts(c) == {LEAF_A.name: "grant failed: cannot slice"}


_WINNER = scoring.SortKey(
    affinity=-0.0,
    hints=0,
    tiers=0,
    memory=0,
    burst=0,
    isolated=0,
    numa=(1, 10.0),
    cores=0,
    depth=-1,
    load=(0, -5000),
    index=1,
)


@pytest.mark.parametrize(
    ("criterion", "value"),
    [
        ("affinity", -1.0),
        ("hints", 1),
        ("tiers", 1),
        ("memory", 1),
        ("burst", 1),
        ("isolated", 1),
        ("numa", (2, 15.0)),
        ("cores", 1),
        ("depth", 0),
        ("load", (1, -5000)),
        ("index", 2),
    ],
)
def test_losing_criterion_is_the_first_field_that_differs(criterion: str, value: object) -> None:
    key = _WINNER._replace(**{criterion: value})
    if criterion != "index":
        key = key._replace(index=7)  # a later difference never wins over the first
    assert scoring.losing_criterion(key, _WINNER) == criterion


def test_the_same_key_loses_on_the_index() -> None:
    assert scoring.losing_criterion(_WINNER, _WINNER) == "index"


def test_the_criteria_are_the_sort_keys_field_names_in_order() -> None:
    assert scoring.SortKey._fields == scoring.CRITERIA
    assert list(scoring.labelled(_WINNER))[:2] == ["affinity", "hint_miss"]


def test_losing_criterion_refuses_keys_of_another_shape() -> None:
    with pytest.raises(ValueError, match="sort keys"):
        scoring.losing_criterion(_WINNER[:-1], _WINNER)
