"""The capacity rule has one owner, `Ledger.short`; the pool choice's inlined walk (`room`) is its
fast path and must agree with it on any accounts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.accounts.ledger import Ledger
from nri_topology.policy.choice.choose import Demand, room
from nri_topology.policy.pools import ancestors, build_pools
from tests import machines

MACHINE = machines.load("server")
POOLS = build_pools(MACHINE, frozenset(MACHINE.cpus), frozenset(), frozenset())
CHAIN = tuple((i, *ancestors(POOLS, i)) for i in range(len(POOLS)))


def _ledger(data: st.DataObject) -> Ledger:
    partial = frozenset({max(MACHINE.cpus)})  # half reserved: it counts as it stays shared
    reserved_in = tuple(500 if partial & p.cpus else 0 for p in POOLS)
    ledger = Ledger(POOLS, CHAIN, partial, reserved_in)
    for i, p in enumerate(POOLS):
        cpus = sorted(p.cpus)
        keep = data.draw(st.integers(0, min(len(cpus), 6)))  # few: the boundaries are hit
        ledger.shared_cpus[i] = frozenset(cpus[-keep:] if keep else ())
        ledger.sub_shared[i] = data.draw(st.sampled_from((0, 0, 999, 1000, 1001, 2500, 5000)))
        ledger.sub_users[i] = data.draw(st.integers(0, 1))
    return ledger


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(0, 4), st.sampled_from((0, 0, 1, 500, 1000, 2001)), st.integers(0, 1))
def test_the_choices_walk_is_the_ledgers_rule(
    data: st.DataObject, exclusive: int, shared: int, new_user: int
) -> None:
    ledger = _ledger(data)
    d = Demand(exclusive, shared, new_user, False, False, exclusive, shared)
    for i, pool in enumerate(POOLS):
        if len(ledger.shared_cpus[i] - ledger.partial) < exclusive:
            continue  # refused before the walk: too few CPUs to slice
        why, left = room(d, pool, ledger)
        short = ledger.short(i, exclusive, shared, new_user)
        walked = why is not None and ("shared capacity left" in why or "keeps too few" in why)
        assert walked == (short is not None), (pool.name, why, short)
        if why is None:
            assert left == ledger.allocatable(i)
