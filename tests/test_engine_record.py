"""The record of placed containers (`engine/record.py`): one map, its pod index and affinity
index kept in step by its one way in and one way out; and the engine's transactions keep it
the one answer to "which containers are placed" (`Policy.container`, `pod_containers`)."""

from __future__ import annotations

import pytest

from nri_topology.policy.accounts.grant import Grant
from nri_topology.policy.engine.record import Record
from nri_topology.policy.intake import affinity
from nri_topology.policy.types import CpuKind, PolicyError
from tests.test_policy_engine import req


def grant(cid: str, pod: str, **labels: str) -> Grant:
    r = req(cid, pod_id=pod, labels=labels)
    return Grant(r, 0, CpuKind.SHARED, frozenset(), False, 0, frozenset(), 0, False, None)


# (containers added as (id, pod), ids removed) -> pods' containers after
CASES = [
    ([("a", "p")], [], {"p": ("a",)}),
    ([("b", "p"), ("a", "p"), ("c", "q")], [], {"p": ("a", "b"), "q": ("c",)}),
    ([("a", "p"), ("b", "p")], ["a"], {"p": ("b",)}),
    ([("a", "p"), ("b", "q")], ["a", "b"], {}),
    ([("a", "p"), ("a", "p")], [], {"p": ("a",)}),  # added again: replaced, not doubled
]


@pytest.mark.parametrize(("added", "removed", "pods"), CASES)
def test_pod_index_follows_the_grants(
    added: list[tuple[str, str]], removed: list[str], pods: dict[str, tuple[str, ...]]
) -> None:
    record = Record()
    for cid, pod in added:
        record.add(grant(cid, pod))
    for cid in removed:
        record.remove(cid)
    assert {p: record.of_pod(p) for p in ("p", "q") if record.of_pod(p)} == pods
    assert sorted(record.grants) == sorted({c for ps in pods.values() for c in ps})
    with pytest.raises(TypeError):
        record.grants["x"] = grant("x", "p")  # type: ignore[index]  # read-only outside


def test_a_removed_container_leaves_the_affinity_index() -> None:
    record = Record()
    record.add(grant("a", "p", app="web"))
    record.add(grant("b", "q", app="web"))
    rules = affinity.parse(
        "n:\n  - scope: {key: namespace, operator: Equals, values: [default]}\n"
        "    match: {key: labels/app, operator: Equals, values: [web]}",
        container="n",
        pod_id="r",
        anti=False,
        annotation="affinity",
        who="n",
    )
    wants = req("n", affinities=rules)
    assert set(record.by_attribute.weights(wants)) == {"a", "b"}
    record.remove("a")
    assert set(record.by_attribute.weights(wants)) == {"b"}


def test_removing_what_is_not_recorded_is_an_error() -> None:
    with pytest.raises(KeyError):
        Record().remove("x")


def test_a_refused_placement_leaves_the_record_as_it_was() -> None:
    from nri_topology.policy.engine.engine import Engine
    from nri_topology.policy.options import Options
    from tests import machines

    e = Engine(machines.load("server"), Options())
    e.place(req("a", shared=100))
    with pytest.raises(PolicyError):
        e.place(req("b", CpuKind.EXCLUSIVE, exclusive=10_000))
    assert list(e.grants) == ["a"] and e.pod_containers("pod-b") == ()
    e.release("a")
    assert not e.grants and e.pod_containers("pod-a") == ()
