"""Admission parity with the kubelet: what the kubelet admits is placed, degraded if it must.

The cases of the issue on the bundled machines (no ../shared needed): whole-CPU reservations on
the 20-CPU desktop, full_pcpus_only with fractional requests, memory tiers on "server", and
consolidation of shared containers that hold CPUs in several pools.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_policy_engine import GiB, req

from nri_topology.policy.checkpoint.restore import Found, restore
from nri_topology.policy.checkpoint.state import snapshot
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    Degradation,
    PodInfo,
    PolicyError,
    QoS,
    Request,
    Resources,
)
from nri_topology.policy.views import RestoreReport
from nri_topology.simulate import machine_spec
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier
from tests import machines
from tests.test_request import pod_and_container


def guaranteed(cid: str, cpus: int, **kw: object) -> tuple[PodInfo, ContainerInfo]:
    """A Guaranteed container of `cpus` whole CPUs: exclusive CPUs by default."""
    return pod_and_container(cpus * 1000, cid=cid, **kw)  # type: ignore[arg-type]


def burstable(cid: str, milli: int, **kw: object) -> tuple[PodInfo, ContainerInfo]:
    """A Burstable container requesting `milli` CPU; `memory=` is its limit, its request unknown."""
    return pod_and_container(milli, QoS.BURSTABLE, cid=cid, **kw)  # type: ignore[arg-type]


def best_effort(cid: str) -> tuple[PodInfo, ContainerInfo]:
    return pod_and_container(0, QoS.BEST_EFFORT, cid=cid)


def reserved_cpus(p: Policy) -> frozenset[int]:
    return p.pools()[0].reserved


DESKTOP = machine_spec.load_bundled("desktop")[1]
SERVER = machine_spec.load_bundled("server")[1]
WHOLE_CPU_RESERVATIONS = [CpuAmount(milli=1000), CpuAmount(cpus=frozenset({1}))]


@pytest.mark.parametrize("reserved", WHOLE_CPU_RESERVATIONS, ids=["quantity", "cpuset"])
def test_guaranteed_then_best_effort_runs_on_the_reserved_cpus(reserved: CpuAmount) -> None:
    p = Policy(DESKTOP, Options(reserved_resources=reserved))
    g = p.create(*guaranteed("g", 19))
    assert len(g.exclusive) == 19 and not g.degraded
    be = p.create(*best_effort("be"))
    assert be.kind is CpuKind.RESERVED and be.placement.cpus == reserved_cpus(p)
    assert be.degraded == (Degradation.RESERVED_CPUS,)


@pytest.mark.parametrize("reserved", WHOLE_CPU_RESERVATIONS, ids=["quantity", "cpuset"])
def test_best_effort_then_guaranteed_moves_the_best_effort_to_the_reserved_cpus(
    reserved: CpuAmount,
) -> None:
    p = Policy(DESKTOP, Options(reserved_resources=reserved))
    p.create(*best_effort("be"))
    g = p.create(*guaranteed("g", 19))
    assert len(g.exclusive) == 19 and g.kind is CpuKind.EXCLUSIVE
    assert g.moved == ("be",)
    assert [(u.container_id, u.placement.cpus) for u in g.updates] == [("be", reserved_cpus(p))]
    assert p.assignments()["be"].kind is CpuKind.RESERVED


def test_strict_reserved_cpus_keeps_them_for_reserved_containers() -> None:
    opts = Options(reserved_resources=CpuAmount(milli=1000), strict_reserved_cpus=True)
    p = Policy(DESKTOP, opts)
    p.create(*guaranteed("g", 19))
    with pytest.raises(PolicyError, match="no pool can hold 0m shared CPU"):
        p.create(*best_effort("be"))
    # the other order: the Guaranteed container shares the 19 CPUs instead
    p = Policy(DESKTOP, opts)
    p.create(*best_effort("be"))
    g = p.create(*guaranteed("g", 19))
    assert g.kind is CpuKind.SHARED and g.degraded == (Degradation.SHARED_CPUS,)
    assert g.placement.cpus is not None and not g.placement.cpus & reserved_cpus(p)


def test_on_unfit_refuse_and_required_isolation_refuse_instead_of_degrading() -> None:
    opts = Options(reserved_resources=CpuAmount(milli=1000), on_unfit="refuse")
    e = Engine(DESKTOP, opts)
    e.place(req("g", CpuKind.EXCLUSIVE, exclusive=19))
    with pytest.raises(PolicyError):
        e.place(req("be", qos=QoS.BEST_EFFORT))
    e = Engine(DESKTOP, Options(reserved_resources=CpuAmount(milli=1000), max_moves=0))
    e.place(req("be", qos=QoS.BEST_EFFORT))
    e.place(req("g", CpuKind.EXCLUSIVE, exclusive=18))
    strict = req("iso", CpuKind.ISOLATED, exclusive=1, require_isolated=True)
    with pytest.raises(PolicyError, match="isolated"):
        e.place(strict)


def test_requests_beyond_what_the_kubelet_admits_are_still_refused() -> None:
    p = Policy(DESKTOP, Options())  # 750m reserved: 19.25 CPUs allocatable
    p.create(*burstable("b", 500))
    with pytest.raises(PolicyError, match="no pool can hold"):
        p.create(*guaranteed("x", 19))
    assert set(p.assignments()) == {"b"}


def _pod(qos: QoS) -> PodInfo:
    parent = {QoS.GUARANTEED: "kubepods", QoS.BURSTABLE: "kubepods-burstable"}.get(
        qos, "kubepods-besteffort"
    )
    return PodInfo(id="p", name="p", namespace="default", cgroup_parent=f"/{parent}/pod")


def _guaranteed(cid: str, milli: int) -> ContainerInfo:
    shares = milli * 1024 // 1000
    return ContainerInfo(
        id=cid,
        pod_id="p",
        name=cid,
        resources=Resources(cpu_shares=shares, cpu_quota=milli * 100, cpu_period=100_000),
    )


def test_full_pcpus_only_shares_fractional_and_refuses_odd_integer_requests() -> None:
    p = Policy(SERVER, Options(full_pcpus_only=True))
    d = p.create(_pod(QoS.GUARANTEED), _guaranteed("frac", 1500))
    assert d.kind is CpuKind.SHARED and not d.exclusive and not d.degraded
    d = p.create(_pod(QoS.GUARANTEED), _guaranteed("whole", 2000))
    assert d.kind is CpuKind.EXCLUSIVE and len(d.exclusive) == 2
    with pytest.raises(PolicyError, match="multiple of the 2 threads"):
        p.create(_pod(QoS.GUARANTEED), _guaranteed("odd", 3000))


# --- memory tiers -----------------------------------------------------------------------------


def test_memory_beyond_all_dram_widens_into_pmem() -> None:
    d = Policy(SERVER, Options()).create(*guaranteed("big", 4, memory=130 * GiB))
    tiers = {SERVER.nodes[n].tier for n in d.placement.mems or ()}
    assert tiers == {MemoryTier.DRAM, MemoryTier.PMEM}
    assert d.degraded == (Degradation.MEMORY_TIER,)
    with pytest.raises(PolicyError, match="memory"):
        Policy(SERVER, Options(on_unfit="refuse")).create(*guaranteed("big", 4, memory=130 * GiB))


def test_burstable_after_dram_is_used_gets_pmem() -> None:
    e = Engine(SERVER, Options())
    for i in range(4):
        d = e.place(req(f"d{i}", CpuKind.EXCLUSIVE, exclusive=2, memory=30 * GiB))
        assert not d.degraded
    d = e.place(req("b", shared=500, memory=20 * GiB))
    assert MemoryTier.PMEM in d.memory_tiers and d.degraded == (Degradation.MEMORY_TIER,)


def _movable_pmem_machine() -> Machine:
    doc = machine_spec.from_machine(SERVER, name="movable", description="", source="test")
    for node in doc["nodes"]:
        if node["tier"] == "pmem":
            node["normal_memory"] = False
    return machine_spec.to_machine(machine_spec.parse_spec(doc))


def test_movable_only_pmem_gets_its_closest_normal_memory_and_no_cold_start() -> None:
    m = _movable_pmem_machine()
    assert not m.nodes[4].normal and m.nodes[0].normal
    e = Engine(m, Options())
    pmem = frozenset({MemoryTier.PMEM})
    d = e.place(req("p", shared=100, memory=GiB, memory_tiers=pmem))
    assert d.placement.mems is not None
    assert {m.nodes[n].tier for n in d.placement.mems} == {MemoryTier.DRAM, MemoryTier.PMEM}
    assert not d.degraded
    cold = e.place(req("c", shared=100, memory=GiB, memory_tiers=pmem, cold_start_ns=10**9))
    assert cold.cold_start is None
    # the same on normal PMEM starts cold
    e = Engine(SERVER, Options())
    cold = e.place(req("c", shared=100, memory=GiB, memory_tiers=pmem, cold_start_ns=10**9))
    assert cold.cold_start is not None


# --- consolidation ----------------------------------------------------------------------------


def _fragmenting() -> list[tuple[PodInfo, ContainerInfo]]:
    """Four Burstable 100m containers, one per NUMA node, then four 24-CPU Guaranteed ones."""
    return [burstable(f"b{i}", 100) for i in range(4)] + [guaranteed(f"g{i}", 24) for i in range(4)]


def _fragmented(opts: Options) -> Policy:
    """SERVER after `_fragmenting`."""
    p = Policy(SERVER, opts)
    for pod, ctr in _fragmenting():
        p.create(pod, ctr)
    return p


def test_six_cpus_fit_after_moving_shared_containers() -> None:
    spread = Options(shared_placement="spread")
    p = _fragmented(spread)
    assert len({p.assignments()[f"b{i}"].pool for i in range(4)}) == 4
    exclusive_before = {cid: a.exclusive for cid, a in p.assignments().items()}
    d = p.create(*guaranteed("x", 6))
    assert len(d.exclusive) == 6 and not d.degraded
    assert 0 < len(d.moved) <= spread.max_moves
    assert set(d.moved) <= {f"b{i}" for i in range(4)}
    moved_updates = {u.container_id for u in d.updates} & set(d.moved)
    assert moved_updates == set(d.moved)
    for cid, excl in exclusive_before.items():
        assert p.assignments()[cid].exclusive == excl  # no exclusive CPU moved


def test_without_moves_the_fragmented_case_degrades_or_refuses() -> None:
    p = _fragmented(Options(shared_placement="spread", max_moves=0))
    d = p.create(*guaranteed("x", 6))
    # the kernel-isolated CPUs 4-7 and 60-63 are free: taken as the kubelet would take them
    assert d.kind is CpuKind.ISOLATED and d.exclusive <= SERVER.isolated and not d.degraded
    d = p.create(*guaranteed("y", 6))
    assert d.kind is CpuKind.SHARED and d.degraded == (Degradation.SHARED_CPUS,)
    p = _fragmented(Options(shared_placement="spread", max_moves=0, on_unfit="refuse"))
    with pytest.raises(PolicyError, match="6 needed"):
        p.create(*guaranteed("x", 6))


def test_packing_shared_containers_leaves_room_without_moves() -> None:
    p = _fragmented(Options(shared_placement="pack", max_moves=0))
    assert len({p.assignments()[f"b{i}"].pool for i in range(4)}) == 1
    d = p.create(*guaranteed("x", 6))
    assert len(d.exclusive) == 6 and d.moved == () and not d.degraded
    # with moves allowed, they are made for whole cores on fewer NUMA nodes, not for room
    d = _fragmented(Options(shared_placement="pack")).create(*guaranteed("x", 6))
    assert len(d.exclusive) == 6 and "made room" not in d.reason
    assert "for whole cores on fewer NUMA nodes" in d.reason


def test_moves_are_undone_when_they_do_not_help() -> None:
    p = _fragmented(Options(shared_placement="spread", on_unfit="refuse"))
    before = (p.assignments(), p.pools())
    with pytest.raises(PolicyError):
        p.create(*guaranteed("x", 9))
    assert (p.assignments(), p.pools()) == before


def test_degradation_survives_a_restore() -> None:
    opts = Options(reserved_resources=CpuAmount(milli=1000))
    p = Policy(DESKTOP, opts)
    pod = _pod(QoS.GUARANTEED)
    p.create(pod, _guaranteed("g", 19000))
    be_pod = replace(_pod(QoS.BEST_EFFORT), id="q", name="q")
    be = ContainerInfo(id="be", pod_id="q", name="be")
    d = p.create(be_pod, be)
    assert d.kind is CpuKind.RESERVED
    saved = p.snapshot()
    assignments = p.assignments()
    running = [
        replace(
            c,
            resources=replace(
                c.resources,
                cpuset_cpus=",".join(map(str, sorted(assignments[c.id].cpus or ()))),
            ),
        )
        for c in (_guaranteed("g", 19000), be)
    ]
    report = Policy(DESKTOP, opts).restore([pod, be_pod], running, saved)
    assert set(report.adopted) == {"g", "be"} and not report.failed


def test_exclusive_on_isolated_cpus_is_adopted_after_a_restart() -> None:
    opts = Options(shared_placement="spread", max_moves=0)
    p = Policy(SERVER, opts)
    made = [*_fragmenting(), guaranteed("x", 6)]
    for pod, ctr in made:
        d = p.create(pod, ctr)
    assert d.kind is CpuKind.ISOLATED  # x, on CPUs it was not asked to be isolated on
    placed = p.placements()
    running = [
        replace(
            c,
            resources=replace(
                c.resources,
                cpuset_cpus=cpuset.format(placed[c.id].cpus or frozenset()),
                cpuset_mems=cpuset.format(placed[c.id].mems or frozenset()),
            ),
        )
        for _, c in made
    ]
    fresh = Policy(SERVER, opts)
    report = fresh.restore([pod for pod, _ in made], running, p.snapshot())
    assert set(report.adopted) == set(p.assignments()) and not report.updates
    assert fresh.assignments()["x"].exclusive == d.exclusive


def test_moves_undone_leave_the_movers_pinning_as_the_runtime_holds_it() -> None:
    """A resize that fails after a trial of moves: the shared container taken out and put back
    keeps the cpuset the runtime holds, so the next diff still sees what changed."""
    big = 29_398_453_504
    e = Engine(DESKTOP, Options())
    e.place(req("c1", shared=1, memory=big))
    e.place(req("c2", CpuKind.EXCLUSIVE, exclusive=1, memory_preserve=True))
    e.place(req("c3", shared=1, memory=big))
    before = e.grants["c1"].cpus
    with pytest.raises(PolicyError):
        e.resize(req("c2", shared=0, memory=12_599_337_216))
    assert e.grants["c1"].cpus == before == e.pin(e.grants["c1"])


# --- exclusive CPUs partly from the isolated ones ---------------------------------------------


def _ordinary_left(opts: Options, free: int) -> Engine:
    """SERVER with all but `free` of its 104 ordinary CPUs held exclusively, no shared user."""
    e = Engine(SERVER, opts)
    e.place(req("big", CpuKind.EXCLUSIVE, exclusive=104 - free))
    return e


@pytest.mark.parametrize("whole_cores", [False, True])
def test_ordinary_and_isolated_cpus_together_when_neither_alone_holds_it(
    whole_cores: bool,
) -> None:
    """A few ordinary CPUs and 8 isolated ones free: the kubelet, counting isolated CPUs as
    allocatable, admits 10 exclusive CPUs; they are granted as the ordinary ones that can be
    sliced (whole cores under full_pcpus_only) plus isolated ones."""
    e = _ordinary_left(Options(full_pcpus_only=whole_cores), 4)
    sliceable = e.sliceable(0)
    ordinary = len(sliceable) - len(sliceable) % 2 if whole_cores else len(sliceable)
    assert 0 < ordinary < 10 and ordinary + 8 >= 10
    shared_before = [e.shared_cpus(p.index) for p in e.pools]
    iso_before = e.accounts().free_isolated
    d = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=10))
    assert d.kind is CpuKind.EXCLUSIVE and len(d.exclusive) == 10
    assert len(d.exclusive - SERVER.isolated) == ordinary
    assert d.degraded == (Degradation.ISOLATED_MIXED,)
    assert d.placement.cpus == d.exclusive
    assert len(e.accounts().free_isolated[0]) == 8 - (10 - ordinary)
    if whole_cores:
        assert all(SERVER.cpus[c].threads <= d.exclusive for c in d.exclusive)
    e.release("x")
    assert [e.shared_cpus(p.index) for p in e.pools] == shared_before
    assert e.accounts().free_isolated == iso_before


def test_isolated_mixed_grant_is_adopted_after_a_restart() -> None:
    e = _ordinary_left(Options(), 4)
    d = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=10))
    found = [Found(g.request, g.cpus, g.mems) for g in e.grants.values()]
    fresh = Engine(SERVER, e.options)
    report = restore(fresh, found, snapshot(e))
    assert set(report.adopted) == {"big", "x"} and not report.updates
    assert fresh.grants["x"].exclusive == d.exclusive
    assert fresh.decision_of("x").degraded == (Degradation.ISOLATED_MIXED,)


@pytest.mark.parametrize(
    "opts, asked",
    [
        (Options(on_unfit="refuse"), req("x", CpuKind.EXCLUSIVE, exclusive=10)),
        (Options(), req("x", CpuKind.ISOLATED, exclusive=10, require_isolated=True)),
    ],
    ids=["on-unfit-refuse", "require-isolated-cpus"],
)
def test_isolated_mixed_is_not_for_strict_requests(opts: Options, asked: Request) -> None:
    e = _ordinary_left(opts, 4)
    with pytest.raises(PolicyError):
        e.place(asked)
    assert set(e.grants) == {"big"}


# --- memory charged beyond what the kubelet counts --------------------------------------------


def _limit_only(cid: str, limit: int) -> Request:
    """A Burstable container with a memory limit and no request known to the plugin (below 0.2 %
    of the machine's memory the kubelet's oom_score_adj tells none): charged at its limit."""
    return replace(req(cid, shared=100), memory_request=0, memory_limit=limit)


def test_memory_limits_that_fit_nowhere_are_charged_what_fits() -> None:
    p = Policy(DESKTOP, Options())
    total = sum(n.memory for n in DESKTOP.nodes.values())
    a = p.create(*burstable("a", 100, memory=total * 3 // 4))  # a limit, no request known
    assert not a.degraded and p.assignments()["a"].memory == total * 3 // 4
    b = p.create(*burstable("b", 100, memory=total * 3 // 4))
    assert b.degraded == (Degradation.MEMORY_CHARGE,)
    assert p.assignments()["b"].memory == total - total * 3 // 4
    assert b.placement.mems == frozenset(DESKTOP.nodes)
    # the kubelet counts requests: a Guaranteed half of the memory is admitted, charged nothing
    g = p.create(*guaranteed("g", 2, memory=total // 2))
    assert g.degraded == (Degradation.MEMORY_CHARGE,) and p.assignments()["g"].memory == 0
    assert len(g.exclusive) == 2
    for cid in ("a", "b", "g"):
        p.release(cid)
    assert p.node_capacity() == Policy(DESKTOP, Options()).node_capacity()


def test_memory_requests_beyond_the_machine_are_refused() -> None:
    e = Engine(DESKTOP, Options())
    total = sum(n.memory for n in DESKTOP.nodes.values())
    e.place(req("a", shared=100, memory=total * 3 // 4))
    with pytest.raises(PolicyError, match="memory"):
        e.place(req("b", shared=100, memory=total // 2))  # the kubelet does not admit it


@pytest.mark.parametrize(
    "opts, single",
    [(Options(on_unfit="refuse"), False), (Options(), True)],
    ids=["on-unfit-refuse", "single-numa-node"],
)
def test_memory_charge_is_not_for_strict_requests(opts: Options, single: bool) -> None:
    p = Policy(DESKTOP, opts)
    strict = {"numa-policy.resource-policy.nri.io": "single-numa-node"} if single else None
    with pytest.raises(PolicyError, match="memory"):
        p.create(*burstable("b", 100, memory=1 << 40, annotations=strict))
    assert not p.assignments()


def _restarted(e: Engine) -> tuple[Engine, RestoreReport]:
    """A fresh engine restored from `e`'s snapshot and the pinning its containers run on."""
    found = [Found(g.request, g.cpus, g.mems) for g in e.grants.values()]
    fresh = Engine(e.machine, e.options)
    return fresh, restore(fresh, found, snapshot(e))


def test_memory_charged_in_part_is_adopted_after_a_restart() -> None:
    """The cut stays with the container that had it, though restore adopts "b" first."""
    e = Engine(DESKTOP, Options())
    total = sum(n.memory for n in DESKTOP.nodes.values())
    e.place(_limit_only("a", total * 3 // 4))
    e.place(replace(_limit_only("b", total * 3 // 4), shared=200, cpu_request=200))
    assert e.grants["b"].memory == total - total * 3 // 4
    fresh, report = _restarted(e)
    assert set(report.adopted) == {"a", "b"} and not report.updates
    assert fresh.memory_charged() == e.memory_charged()
    assert {cid: g.memory for cid, g in fresh.grants.items()} == {
        cid: g.memory for cid, g in e.grants.items()
    }
    assert not fresh.decision_of("a").degraded
    assert fresh.decision_of("b").degraded == (Degradation.MEMORY_CHARGE,)


def test_a_cut_charge_adopted_first_leaves_room_for_single_numa_containers() -> None:
    """The exclusive container, adopted first, is charged what it was (what fitted when it was
    placed), not what fits in an empty engine: charged in full it would leave no room for the
    single-NUMA-node containers placed after it, and one of them would be lost."""
    m = machines.load("amd16")
    total = sum(n.memory for n in m.nodes.values())
    node = 4 * GiB
    e = Engine(m, Options())
    e.place(_limit_only("big", 2 * node))
    cut = e.place(req("cut", CpuKind.EXCLUSIVE, exclusive=2, memory=total - 2 * node + GiB))
    assert cut.degraded == (Degradation.MEMORY_CHARGE,)
    e.release("big")
    for cid in ("s", "t"):  # each charged to its own node only
        assert not e.place(replace(_limit_only(cid, node), single_numa=True)).degraded
    fresh, report = _restarted(e)
    assert report.failed == {} and report.replaced == {} and report.updates == ()
    assert fresh.memory_charged() == e.memory_charged()
    assert fresh.decision_of("cut").degraded == (Degradation.MEMORY_CHARGE,)


def test_a_saved_charge_is_no_cut_for_a_request_that_may_not_be_degraded() -> None:
    """A forged entry cannot make a single-NUMA-node container be charged less than it asks."""
    e = Engine(DESKTOP, Options())
    e.place(replace(_limit_only("s", GiB), single_numa=True))
    found = [Found(g.request, g.cpus, g.mems) for g in e.grants.values()]
    forged = snapshot(e)
    forged["containers"]["s"]["memory"] = 0
    fresh = Engine(DESKTOP, e.options)
    assert restore(fresh, found, forged).adopted == ("s",)
    assert fresh.grants["s"].memory == GiB and not fresh.decision_of("s").degraded


# --- shared capacity over-committed -----------------------------------------------------------


def _isolated_one() -> Machine:
    """8 CPUs on 2 NUMA nodes, CPU 7 isolated: the kubelet counts 8 CPUs, the shared CPUs are 7."""
    from test_policy_numa import build_machine

    m = build_machine({0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}, {0: 0, 1: 0}, [[10, 20], [20, 10]])
    return replace(m, isolated=frozenset({7}))


def _two_shared(opts: Options) -> Engine:
    """1100m Burstable on each node: each keeps 2 CPUs, 4800m shared capacity left at the root,
    5800m by the kubelet's count."""
    e = Engine(_isolated_one(), opts)
    for cid in ("a", "b"):
        e.place(req(cid, shared=1100))
    assert e.grants["a"].pool != e.grants["b"].pool
    assert e.allocatable(0) == 4800
    return e


@pytest.mark.parametrize(
    "asked, degraded",
    [
        (req("x", shared=5000), (Degradation.SHARED_OVERCOMMIT,)),
        (
            req("x", CpuKind.EXCLUSIVE, exclusive=5),
            (Degradation.SHARED_CPUS, Degradation.SHARED_OVERCOMMIT),
        ),
    ],
    ids=["burstable", "exclusive"],
)
def test_what_no_pool_holds_runs_over_committed_on_the_root(
    asked: Request, degraded: tuple[Degradation, ...]
) -> None:
    e = _two_shared(Options(reserved_resources=CpuAmount(milli=0)))
    d = e.place(asked)
    assert d.kind is CpuKind.SHARED and d.pool == e.pools[0].name and d.degraded == degraded
    assert d.placement.cpus == e.shared_cpus(0) == frozenset(range(7))
    assert d.placement.cpu_shares == 5000 * 1024 // 1000  # time still divided by the request
    assert e.grants["x"].shared == 4800 and e.allocatable(0) == 0
    assert e.shared_assigned(0) <= e.capacity(0)
    # nothing else fits now, and the kubelet's count says so too
    with pytest.raises(PolicyError):
        e.place(req("y", shared=900))
    e.release("x")
    assert e.shared_assigned(0) == 2200 and e.allocatable(0) == 4800


@pytest.mark.parametrize(
    "opts, asked",
    [
        (Options(reserved_resources=CpuAmount(milli=0), on_unfit="refuse"), req("x", shared=5000)),
        (
            Options(reserved_resources=CpuAmount(milli=0)),
            req("x", CpuKind.EXCLUSIVE, exclusive=5, single_numa=True),
        ),
    ],
    ids=["on-unfit-refuse", "single-numa-node"],
)
def test_shared_overcommit_is_not_for_strict_requests(opts: Options, asked: Request) -> None:
    e = _two_shared(opts)
    with pytest.raises(PolicyError):
        e.place(asked)
    assert set(e.grants) == {"a", "b"} and e.shared_assigned(0) == 2200


def test_beyond_what_the_kubelet_admits_is_still_refused() -> None:
    e = _two_shared(Options(reserved_resources=CpuAmount(milli=0)))
    with pytest.raises(PolicyError):
        e.place(req("x", shared=5900))  # 8100m requested on 8 CPUs
    assert set(e.grants) == {"a", "b"}


def test_shared_overcommit_is_adopted_after_a_restart() -> None:
    e = _two_shared(Options(reserved_resources=CpuAmount(milli=0)))
    e.place(req("x", CpuKind.EXCLUSIVE, exclusive=5))
    found = [Found(g.request, g.cpus, g.mems) for g in e.grants.values()]
    fresh = Engine(e.machine, e.options)
    report = restore(fresh, found, snapshot(e))
    assert set(report.adopted) == {"a", "b", "x"} and not report.updates
    assert fresh.grants["x"].kind is CpuKind.SHARED and fresh.grants["x"].pool == 0
    assert sum(g.shared for g in fresh.grants.values()) == 7000 == fresh.shared_assigned(0)
    # adopted largest first: the container charged short may be another one than before
    cut = [
        cid for cid in fresh.grants if fresh.grants[cid].shared < fresh.grants[cid].request.shared
    ]
    assert len(cut) == 1
    assert Degradation.SHARED_OVERCOMMIT in fresh.decision_of(cut[0]).degraded
    for cid in ("x", "a", "b"):
        fresh.release(cid)
    assert fresh.shared_assigned(0) == 0 and fresh.allocatable(0) == 7000


def test_shared_overcommit_keeps_the_invariants() -> None:
    from nri_topology.testing import kubelet
    from nri_topology.testing.invariants import check

    m = _isolated_one()
    p = Policy(m, Options(reserved_resources=CpuAmount(milli=0)))
    memory = sum(n.memory for n in m.nodes.values())
    for cid, pod in (
        ("a", kubelet.Pod(QoS.BURSTABLE, 1100)),
        ("b", kubelet.Pod(QoS.BURSTABLE, 1100)),
        ("x", kubelet.Pod(QoS.GUARANTEED, 5000, memory=1 << 30)),
    ):
        d = p.create(*kubelet.policy_pair(cid, pod, memory))
        check(p, m)
    assert d.kind is CpuKind.SHARED and Degradation.SHARED_OVERCOMMIT in d.degraded
    p.release("a")
    check(p, m)
