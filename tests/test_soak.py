"""A short random soak of the policy with the invariants checked at every step (the long one is
`benchmarks/soak.py`), and proof that the invariant checks catch what they are meant to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pytest

from benchmarks.soak import soak
from benchmarks.workload import Spec, policy_pair
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import CpuKind, Placement, QoS, Update
from nri_topology.policy.views import Assignment, PoolView
from nri_topology.testing.invariants import InvariantError, RuntimeView, check
from nri_topology.topology.model import Machine
from tests import machines

SOAK_MACHINES = ("server", "4-socket", "desktop", "amd16", "offline-cpu0", "heteromem")


@pytest.mark.parametrize("seed", [1, 2])
def test_short_soak_keeps_every_invariant(seed: int) -> None:
    report = soak({name: machines.load(name) for name in SOAK_MACHINES}, 1200, seed)
    assert report.steps == 1200
    # every kind of step really ran, refusals included
    for op in ("create", "release", "resize", "restart", "invalid annotation"):
        assert report.operations[op] > 0, op


# --- the checks themselves -------------------------------------------------------------------


@dataclass
class FakeViews:
    """Views put together by hand, to break one rule at a time."""

    given: dict[str, Assignment]
    pool_list: list[PoolView]

    def assignments(self) -> Mapping[str, Assignment]:
        return self.given

    def pools(self) -> Sequence[PoolView]:
        return self.pool_list


@pytest.fixture(scope="module")
def machine() -> Machine:
    return machines.load("desktop")


@pytest.fixture
def good(machine: Machine) -> FakeViews:
    """A real, valid state: one exclusive and one shared container."""
    policy = Policy(machine, Options())
    policy.create(*policy_pair("excl", Spec(QoS.GUARANTEED, cpu=2000, memory=1 << 20)))
    policy.create(*policy_pair("shrd", Spec(QoS.BURSTABLE, cpu=500, memory=1 << 20)))
    check(policy, machine)
    return FakeViews(dict(policy.assignments()), list(policy.pools()))


def _pool(views: FakeViews, name: str) -> tuple[int, PoolView]:
    return next((i, p) for i, p in enumerate(views.pool_list) if p.name == name)


def test_valid_state_passes(good: FakeViews, machine: Machine) -> None:
    check(good, machine)


def _shared_cpu_taken(v: FakeViews) -> None:
    shrd = v.given["shrd"]
    v.given["shrd"] = replace(shrd, kind=CpuKind.EXCLUSIVE, exclusive=v.given["excl"].exclusive)


def _shared_pinned_elsewhere(v: FakeViews) -> None:
    shrd = v.given["shrd"]
    v.given["shrd"] = replace(shrd, cpus=v.given["excl"].exclusive)


def _pool_overcommitted(v: FakeViews) -> None:
    i, p = _pool(v, v.given["shrd"].pool)
    v.pool_list[i] = replace(p, assigned_milli=p.capacity_milli + 1, free_milli=-1)


def _accounting_off(v: FakeViews) -> None:
    v.given["shrd"] = replace(v.given["shrd"], shared=v.given["shrd"].shared + 100)


def _pool_shares_exclusive(v: FakeViews) -> None:
    i, p = _pool(v, v.given["shrd"].pool)
    v.pool_list[i] = replace(p, shared=p.shared | v.given["excl"].exclusive)


def _memory_unknown(v: FakeViews) -> None:
    v.given["shrd"] = replace(v.given["shrd"], mems=frozenset({99}))


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_shared_cpu_taken, "exclusive to both"),
        (_shared_pinned_elsewhere, "expected"),
        (_pool_overcommitted, "over-committed"),
        (_accounting_off, "accounts"),
        (_pool_shares_exclusive, "held exclusively"),
        (_memory_unknown, "memory nodes"),
    ],
)
def test_each_broken_rule_is_caught(good: FakeViews, machine: Machine, breakage, message) -> None:
    breakage(good)
    with pytest.raises(InvariantError, match=message):
        check(good, machine)


def test_runtime_view_notices_a_lost_update(good: FakeViews) -> None:
    view = RuntimeView()
    for cid, a in good.given.items():
        view.cpus[cid], view.mems[cid] = a.cpus, a.mems
    view.agrees(good)
    view.cpus["shrd"] = frozenset({0})
    with pytest.raises(InvariantError, match="update was lost"):
        view.agrees(good)
    with pytest.raises(InvariantError, match="unknown container"):
        view.apply([Update("ghost", Placement(cpus=frozenset({0}), mems=None))])
