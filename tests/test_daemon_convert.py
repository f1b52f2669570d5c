"""NRI messages to policy values and back: every field the policy reads, every field we set."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.daemon import convert
from nri_topology.nri import api_pb2, stub
from nri_topology.policy.types import CpuKind, Decision, Placement, Resources, Update
from nri_topology.topology import cpuset


def _container(**linux: object) -> api_pb2.Container:
    ctr = api_pb2.Container(
        id="c1",
        pod_sandbox_id="p1",
        name="app",
        labels={"l": "1"},
        annotations={"a": "2"},
        created_at=1_700_000_000_000_000_000,
    )
    res = ctr.linux.resources
    for key, value in linux.items():
        if key in ("cpus", "mems"):
            setattr(res.cpu, key, value)
        elif key == "limit":
            res.memory.limit.value = value
        elif key == "oom":
            ctr.linux.oom_score_adj.value = value
        else:
            getattr(res.cpu, key).value = value
    return ctr


def test_pod_carries_identity_metadata_and_cgroup_parent() -> None:
    pod = api_pb2.PodSandbox(
        id="p1", name="web", namespace="default", uid="u1", labels={"app": "web"},
        annotations={"x": "y"},
    )  # fmt: skip
    pod.linux.cgroup_parent = "/kubepods/burstable/podu1"
    info = convert.pod_info(pod)
    assert (info.id, info.name, info.namespace, info.uid) == ("p1", "web", "default", "u1")
    assert info.labels == {"app": "web"} and info.annotations == {"x": "y"}
    assert info.cgroup_parent == "/kubepods/burstable/podu1"


@pytest.mark.parametrize(
    ("linux", "want"),
    [
        ({}, Resources()),
        (
            {"shares": 2048, "quota": 200000, "period": 100000, "limit": 1 << 30},
            Resources(cpu_shares=2048, cpu_quota=200000, cpu_period=100000, memory_limit=1 << 30),
        ),
        ({"cpus": "0-3", "mems": "0"}, Resources(cpuset_cpus="0-3", cpuset_mems="0")),
        ({"shares": 0, "quota": -1}, Resources(cpu_shares=0, cpu_quota=-1)),  # set, not absent
    ],
)
def test_container_resources_keep_set_and_unset_apart(linux: dict, want: Resources) -> None:
    info = convert.container_info(_container(**linux))
    assert info.resources == want
    assert (info.id, info.pod_id, info.name) == ("c1", "p1", "app")
    assert info.labels == {"l": "1"} and info.annotations == {"a": "2"}
    assert info.created_at == 1_700_000_000_000_000_000
    assert info.oom_score_adj is None


def test_update_request_resources_override_the_containers_own() -> None:
    new = api_pb2.LinuxResources()
    new.cpu.shares.value = 4096
    info = convert.container_info(_container(shares=1024, oom=-997), new)
    assert info.resources.cpu_shares == 4096 and info.oom_score_adj == -997


@settings(max_examples=50)
@given(
    cpus=st.frozensets(st.integers(0, 511), max_size=40),
    mems=st.frozensets(st.integers(0, 63), max_size=8),
    shares=st.none() | st.integers(2, 262144),
)
def test_placement_round_trips_through_an_update(cpus, mems, shares) -> None:
    placement = Placement(cpus, mems, shares)
    wire = api_pb2.ContainerUpdate.FromString(
        convert.container_update("c9", placement).SerializeToString()
    )
    back = convert.resources(wire.linux.resources)
    assert cpuset.parse(back.cpuset_cpus) == cpus and cpuset.parse(back.cpuset_mems) == mems
    assert back.cpu_shares == shares
    assert wire.container_id == "c9" and not wire.ignore_failure


def test_untouched_placement_fields_stay_unset() -> None:
    linux = convert.linux_resources(Placement(None, None))
    assert linux == api_pb2.LinuxResources()


def test_updates_of_others_may_ignore_failures() -> None:
    out = convert.updates([Update("o1", Placement(frozenset({1}), None))], ignore_failure=True)
    assert [(u.container_id, u.ignore_failure, u.linux.resources.cpu.cpus) for u in out] == [
        ("o1", True, "1")
    ]


DECISION = Decision(
    container_id="c1",
    pool="node1",
    kind=CpuKind.MIXED,
    placement=Placement(frozenset({2, 3, 8, 9}), frozenset({1}), cpu_shares=2048),
    exclusive=frozenset({2, 3}),
)


def test_exposure_names_cpus_mems_pool_kind_and_exclusive() -> None:
    assert convert.exposure(DECISION) == {
        "NRI_TOPOLOGY_POOL": "node1",
        "NRI_TOPOLOGY_KIND": "mixed",
        "NRI_TOPOLOGY_CPUS": "2-3,8-9",
        "NRI_TOPOLOGY_MEMS": "1",
        "NRI_TOPOLOGY_EXCLUSIVE_CPUS": "2-3",
    }


@pytest.mark.parametrize("expose", [True, False])
def test_adjustment_sets_cpuset_shares_and_optional_env(expose: bool) -> None:
    env = convert.exposure(DECISION) if expose else {}
    adjust = convert.adjustment(DECISION, env)
    cpu = adjust.linux.resources.cpu
    assert (cpu.cpus, cpu.mems, cpu.shares.value) == ("2-3,8-9", "1", 2048)
    assert {kv.key: kv.value for kv in adjust.env} == env


def test_exposure_prefix_is_configurable() -> None:
    assert sorted(convert.exposure(DECISION, "X_")) == [
        "X_CPUS", "X_EXCLUSIVE_CPUS", "X_KIND", "X_MEMS", "X_POOL"
    ]  # fmt: skip


def test_one_update_per_container_last_wins() -> None:
    items = [
        Update("a", Placement(frozenset({1}), None)),
        Update("b", Placement(frozenset({2}), None)),
        Update("a", Placement(frozenset({3}), None)),
    ]
    out = convert.updates(items)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in out] == [("a", "3"), ("b", "2")]


placements = st.builds(
    Placement,
    st.none() | st.frozensets(st.integers(0, 300), max_size=40),
    st.none() | st.frozensets(st.integers(0, 7), max_size=4),
    st.none() | st.integers(2, 262144),
)


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), placements, st.booleans()), max_size=12)
)
def test_remembered_updates_equal_fresh_ones(calls: list[tuple[str, Placement, bool]]) -> None:
    for cid, placement, ignore in calls:
        (got,) = convert.updates([Update(cid, placement)], ignore_failure=ignore)
        assert got == convert.container_update(cid, placement, ignore)
        if placement.cpus:
            assert got.linux.resources.cpu.cpus == cpuset.format(placement.cpus)


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), placements), max_size=12),
    st.booleans(),
)
def test_remembered_batches_equal_fresh_ones(
    batch: list[tuple[str, Placement]], ignore: bool
) -> None:
    """Several updates in one call, some sharing one placement object as the engine's do."""
    shared = Placement(frozenset({1, 2}), None)
    items = [Update(cid, shared if n % 3 == 0 else pl) for n, (cid, pl) in enumerate(batch)]
    latest = {u.container_id: u.placement for u in items}
    got = convert.updates(items, ignore_failure=ignore)
    assert list(got) == [convert.container_update(c, pl, ignore) for c, pl in latest.items()]
    assert got.delimited == tuple(stub.delimited(m) for m in got)


def _held() -> int:
    return sum(len(per_container) for per_container in convert._updates.values())


def test_remembered_messages_and_texts_stay_bounded() -> None:
    for n in range(convert._UPDATES_MAX + 10):
        convert.updates([Update(f"c{n}", Placement(frozenset({n}), None))])
    assert 0 < _held() == convert._updates_held <= convert._UPDATES_MAX
    info = cpuset.text.cache_info()
    assert 0 < info.currsize <= info.maxsize


def test_a_batch_that_fills_the_bound_is_answered_whole() -> None:
    """Forgetting everything in the middle of a batch keeps the batch's answer right and the
    count true."""
    shared = Placement(frozenset({5, 6}), None)
    n = 0
    while convert._updates_held != convert._UPDATES_MAX - 2:  # 2 left: the batch crosses it
        convert.updates([Update(f"fill{n}", Placement(frozenset({n % 300}), None))])
        n += 1
    items = [Update(f"x{n}", shared) for n in range(6)]
    got = convert.updates(items)
    assert [u.container_id for u in got] == [f"x{n}" for n in range(6)]
    assert all(u.linux.resources.cpu.cpus == "5-6" for u in got)
    assert _held() == convert._updates_held <= convert._UPDATES_MAX
    assert list(convert.updates(items)) == list(got)  # and remembered after it
