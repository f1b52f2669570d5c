"""Pod-level resources (KEP-2837): a container stating nothing gets its pod's budget, one
container per pod; a resized pod resizes it; a restart gives the same result."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nri_topology.policy.intake import podlevel
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, CpuKind, PodInfo, Resources
from nri_topology.testing.invariants import check
from nri_topology.topology.model import Machine
from tests import machines

GIB = 1 << 30
OPTS = Options(reserved_resources=CpuAmount(milli=0))
NONE = Resources(cpu_shares=2)  # what the kubelet writes for a container stating nothing


def cpus(n: float) -> Resources:
    """A Guaranteed container's (or pod's) cgroup settings for `n` CPUs and 1 GiB."""
    return Resources(
        cpu_shares=int(n * 1024),
        cpu_quota=int(n * 100_000),
        cpu_period=100_000,
        memory_limit=GIB,
    )


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    return machines.synthetic(tmp_path_factory.mktemp("m"), sockets=1, nodes=2, cores=4, threads=1)


def pod(resources: Resources | None, uid: str = "u1") -> PodInfo:
    """A Guaranteed pod (its cgroup parent says so) with pod-level `resources`."""
    return PodInfo(
        id=f"p-{uid}",
        name=f"pod-{uid}",
        namespace="ns",
        uid=uid,
        cgroup_parent=f"/kubepods/pod{uid}",
        resources=resources,
    )


def ctr(cid: str, res: Resources, p: PodInfo, at: int = 0) -> ContainerInfo:
    return ContainerInfo(id=cid, pod_id=p.id, name=cid, resources=res, created_at=at)


@pytest.mark.parametrize(
    ("res", "none"),
    [
        (Resources(), True),
        (NONE, True),
        (Resources(cpu_shares=2, cpu_period=100_000), True),  # a period alone states nothing
        (Resources(cpu_shares=3), False),
        (Resources(cpu_shares=2, cpu_quota=50_000, cpu_period=100_000), False),
        (Resources(cpu_shares=2, memory_limit=GIB), False),
        (cpus(1), False),
    ],
)
def test_what_states_nothing(res: Resources, none: bool) -> None:
    assert podlevel.states_none(res) is none


@pytest.mark.parametrize(
    ("pod_res", "others", "want"),
    [
        (cpus(2), [], cpus(2)),
        (
            cpus(3),
            [cpus(1)],
            Resources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=None),
        ),  # 1 GiB pod memory all stated by the other
        (cpus(1), [cpus(1)], Resources(cpu_shares=2)),  # nothing left: the least the kubelet writes
        (Resources(cpu_shares=512), [], Resources(cpu_shares=512)),  # Burstable: a request only
        (
            Resources(cpu_shares=2048, hugepages=((2048, 8 << 20),)),
            [Resources(cpu_shares=2, hugepages=((2048, 2 << 20),))],
            Resources(cpu_shares=2048, hugepages=((2048, 6 << 20),)),
        ),
    ],
)
def test_budget_is_the_pod_less_what_the_others_state(
    pod_res: Resources, others: list[Resources], want: Resources
) -> None:
    assert podlevel.budget(pod_res, others) == want


def test_the_earliest_container_stating_nothing_holds_the_budget() -> None:
    p = pod(cpus(2))
    a, b, c = ctr("a", NONE, p, 5), ctr("b", NONE, p, 3), ctr("c", cpus(1), p, 1)
    assert podlevel.holder(p, [a, b, c]) == "b"
    assert podlevel.holder(p, [c]) is None
    assert podlevel.holder(pod(None), [a, b]) is None
    assert podlevel.with_budget(p, a, [b, c]) is a
    given = podlevel.with_budget(p, b, [a, c])
    assert given.resources.cpu_shares == 1024 and given.resources.cpu_quota == 100_000


def test_a_container_stating_nothing_gets_the_pods_cpus(machine: Machine) -> None:
    policy = Policy(machine, OPTS)
    p = pod(cpus(2))
    d = policy.create(p, ctr("app", NONE, p, 1))
    assert d.kind is CpuKind.EXCLUSIVE and len(d.exclusive) == 2
    side = policy.create(p, ctr("side", NONE, p, 2))  # the budget is held: it asks for nothing
    assert side.kind is CpuKind.SHARED and not side.exclusive
    # without pod-level resources the same container shares CPUs, asking for nothing
    q = pod(None, "u2")
    plain = policy.create(q, ctr("plain", NONE, q, 1))
    assert plain.kind is CpuKind.SHARED and not plain.exclusive


def test_stated_containers_keep_theirs_and_the_rest_goes_to_the_holder(machine: Machine) -> None:
    policy = Policy(machine, OPTS)
    p = pod(cpus(3))
    own = policy.create(p, ctr("own", cpus(1), p, 1))
    assert len(own.exclusive) == 1
    d = policy.create(p, ctr("app", NONE, p, 2))
    assert d.kind is CpuKind.EXCLUSIVE and len(d.exclusive) == 2


def test_a_sibling_created_later_takes_its_amounts_from_the_holder(machine: Machine) -> None:
    """A pod without pod-level amounts reports the sum of its containers': a container stating
    nothing, created before one that states 1 CPU, first gets that CPU, then gives it back."""
    policy = Policy(machine, OPTS)
    p = pod(cpus(3))
    first = policy.create(p, ctr("app", NONE, p, 1))
    assert len(first.exclusive) == 3
    d = policy.create(p, ctr("own", cpus(1), p, 2))
    assert len(d.exclusive) == 1
    (holder,) = [u for u in d.updates if u.container_id == "app"]
    held = policy.assignments()["app"]
    assert len(held.exclusive) == 2 and holder.placement.cpus == held.cpus
    assert not held.exclusive & d.exclusive
    check(policy, machine)


def test_a_resized_pod_resizes_its_holder_and_a_restart_agrees(machine: Machine) -> None:
    policy = Policy(machine, OPTS)
    p = pod(cpus(2))
    app, side = ctr("app", NONE, p, 1), ctr("side", NONE, p, 2)
    policy.create(p, app)
    policy.create(p, side)
    bigger = replace(p, resources=cpus(4))
    d = policy.resize(bigger, app, app.resources)
    assert len(d.exclusive) == 4 and "resized" in d.reason
    assert policy.container("side") == (bigger, side)  # the pod's new data kept for all
    held = {cid: a.exclusive for cid, a in policy.assignments().items()}
    # a restart: the runtime reports the pod (new resources) and both containers
    running = [
        replace(
            c,
            resources=replace(
                c.resources,
                cpuset_cpus=",".join(map(str, sorted(a.cpus or ()))),
                cpuset_mems=",".join(map(str, sorted(a.mems or ()))),
            ),
        )
        for c in (app, side)
        for a in [policy.assignments()[c.id]]
    ]
    again = Policy(machine, OPTS)
    report = again.restore([bigger], running)
    assert not report.failed and set(report.adopted) == {"app", "side"}
    assert {cid: a.exclusive for cid, a in again.assignments().items()} == held
