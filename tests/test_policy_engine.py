"""The engine's rules one by one: reservation, slicing, shared sets, scoring, memory, resize."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nri_topology.policy.choice import scoring
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.intake import affinity
from nri_topology.policy.intake.request import milli_to_shares
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    Decision,
    Degradation,
    Outcome,
    PodInfo,
    PolicyError,
    QoS,
    Request,
)
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier
from tests import machines
from tests.test_request import pod_and_container

DRAM, PMEM = MemoryTier.DRAM, MemoryTier.PMEM
GiB = 1 << 30
D = "resource-policy.nri.io"  # the annotations' domain
NO_RESERVE = Options(reserved_resources=CpuAmount(milli=0))


def req(
    cid: str,
    kind: CpuKind = CpuKind.SHARED,
    *,
    exclusive: int = 0,
    shared: int = 0,
    qos: QoS | None = None,
    memory: int = 0,
    **kw: object,
) -> Request:
    """A classified request as `request.build_request` would give it."""
    if qos is None:
        qos = QoS.GUARANTEED if kind in (CpuKind.EXCLUSIVE, CpuKind.ISOLATED) else QoS.BURSTABLE
    fields: dict[str, object] = {
        "container_id": cid,
        "pod_id": f"pod-{cid}",
        "name": cid,
        "pod_name": f"pod-{cid}",
        "namespace": "default",
        "qos": qos,
        "kind": kind,
        "cpu_request": exclusive * 1000 + shared,
        "cpu_limit": None,
        "memory_request": memory,
        "memory_limit": memory or None,
        "exclusive": exclusive,
        "shared": shared,
    }
    fields.update(kw)
    return Request(**fields)  # type: ignore[arg-type]


def guaranteed(cid: str, cpus: int, **kw: object) -> tuple[PodInfo, ContainerInfo]:
    """A Guaranteed container of `cpus` whole CPUs: exclusive CPUs by default."""
    return pod_and_container(cpus * 1000, cid=cid, **kw)  # type: ignore[arg-type]


def burstable(cid: str, milli: int, **kw: object) -> tuple[PodInfo, ContainerInfo]:
    """A Burstable container requesting `milli` CPU: shared CPUs."""
    return pod_and_container(milli, QoS.BURSTABLE, cid=cid, **kw)  # type: ignore[arg-type]


def cores_of(m: Machine, cpus: frozenset[int]) -> set[frozenset[int]]:
    return {m.cpus[c].threads for c in cpus}


# --- reservation --------------------------------------------------------------------------------


def test_quantity_reservation_is_exact_to_the_milli_cpu() -> None:
    m = machines.load("desktop")
    e = Engine(m, Options(reserved_resources=CpuAmount(milli=750)))
    assert e.accounts().reserved_capacity == 750
    (cpu,) = e.reserved_cpus
    assert e.reserved_milli(frozenset({cpu})) == 750  # partly reserved
    # the unreserved 250m of the reserved CPU stay shared capacity
    assert e.capacity(0) == 1000 * 20 - 750
    assert cpu in e.shared_cpus(0)
    d = e.place(req("sys", CpuKind.RESERVED, shared=750))
    assert d.kind is CpuKind.RESERVED and d.placement.cpus == {cpu}
    d = e.place(req("sys2", CpuKind.RESERVED, shared=1))
    assert d.kind is CpuKind.SHARED
    assert "reserved capacity exhausted" in d.reason


def test_a_fraction_may_reserve_the_last_available_cpu_its_rest_stays_shared() -> None:
    """The kubelet's static CPU manager pins the other CPUs of a small node: 750m reserved of
    the one CPU left takes that CPU, and its other 250m stay shared capacity (a whole CPU
    there would leave none, and is refused)."""
    m = machines.load("desktop")
    left = CpuAmount(cpus=frozenset({0}))
    e = Engine(m, Options(available_resources=left, reserved_resources=CpuAmount(milli=750)))
    assert e.reserved_cpus == {0} and e.capacity(0) == 250
    d = e.place(req("be", CpuKind.SHARED, shared=0))
    assert d.kind is CpuKind.SHARED and d.placement.cpus == {0}
    with pytest.raises(PolicyError, match="needs 1 CPUs but only 1"):
        Engine(m, Options(available_resources=left, reserved_resources=CpuAmount(milli=1000)))


def test_reserved_cpu_list_leaves_shared_sets_and_is_never_sliced() -> None:
    m = machines.load("desktop")
    p = Policy(m, Options(reserved_resources=CpuAmount(cpus=frozenset({0, 10}))))
    assert p.pools()[0].reserved == {0, 10}
    shared = p.create(*burstable("s", 100))
    assert not shared.placement.cpus & {0, 10}
    big = p.create(*guaranteed("x", 17))
    assert big.kind is CpuKind.EXCLUSIVE and not big.exclusive & {0, 10}
    with pytest.raises(PolicyError, match="no pool can hold"):  # the kubelet would not admit it
        p.create(*guaranteed("y", 2))


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        (CpuAmount(cpus=frozenset({500})), "not among the available"),
        (CpuAmount(milli=-5), "negative"),
        (CpuAmount(milli=100_000), "non-isolated CPUs"),
        (CpuAmount(exclude=frozenset()), "every available CPU"),
    ],
)
def test_bad_reservations_are_refused(amount: CpuAmount, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy(machines.load("desktop"), Options(reserved_resources=amount))


# --- exclusive and shared CPUs ------------------------------------------------------------------


def test_exclusive_cpus_take_whole_cores_and_leave_every_shared_set() -> None:
    m = machines.load("server")
    p = Policy(m, Options())
    s = p.create(*burstable("s", 500))
    d = p.create(*guaranteed("x", 4))
    assert all(core <= d.exclusive for core in cores_of(m, d.exclusive))
    for pool in p.pools():
        assert not pool.shared & d.exclusive
    shared_now = p.assignments()["s"].cpus
    assert shared_now is not None and not shared_now & d.exclusive
    assert not shared_now & m.isolated
    assert s.placement.cpus is not None and shared_now <= s.placement.cpus


def test_shared_set_is_pool_minus_exclusive_isolated_and_reserved() -> None:
    m = machines.load("server")
    p = Policy(m, Options(reserved_resources=CpuAmount(cpus=frozenset({0}))))
    d = p.create(*burstable("s", 200))
    pool = next(v for v in p.pools() if v.name == d.pool)
    assert d.placement.cpus == pool.cpus - m.isolated - {0}


def test_pool_keeps_shared_cpus_for_its_shared_containers() -> None:
    m = machines.load("desktop")
    p = Policy(m, Options())  # 750m reserved on one CPU that stays shared
    p.create(*burstable("b", 500))
    with pytest.raises(PolicyError):
        p.create(*guaranteed("x", 19))
    d = p.create(*guaranteed("x", 18))
    assert len(p.assignments()["b"].cpus or ()) == 2
    assert [u.container_id for u in d.updates] == ["b"]


def test_best_effort_keeps_one_shared_cpu() -> None:
    m = machines.load("desktop")
    p = Policy(m, replace(NO_RESERVE, on_unfit="refuse"))
    p.create(*pod_and_container(0, QoS.BEST_EFFORT, cid="be"))
    with pytest.raises(PolicyError, match="no pool can hold"):
        p.create(*guaranteed("x", 20))
    p.create(*guaranteed("x", 19))
    assert len(p.assignments()["be"].cpus or ()) == 1
    # degrading instead: all 20 CPUs shared with the BestEffort container
    p = Policy(m, NO_RESERVE)
    p.create(*pod_and_container(0, QoS.BEST_EFFORT, cid="be"))
    d = p.create(*guaranteed("x", 20))
    assert d.kind is CpuKind.SHARED and d.degraded == (Degradation.SHARED_CPUS,)
    assert d.placement.cpus == m.all_cpus


def test_mixed_gets_exclusive_plus_the_pool_shared_cpus() -> None:
    p = Policy(machines.load("4-socket"), Options())
    d = p.create(*pod_and_container(1500, cid="m"))  # one exclusive CPU and 500m shared
    assert d.kind is CpuKind.MIXED and len(d.exclusive) == 1
    pool = next(v for v in p.pools() if v.name == d.pool)
    assert d.placement.cpus == d.exclusive | pool.shared
    assert d.placement.cpu_shares == milli_to_shares(1500)


def test_isolated_cpus_only_for_isolated_requests() -> None:
    m = machines.load("server")
    e = Engine(m, Options())
    iso = e.place(req("i", CpuKind.ISOLATED, exclusive=2))
    assert iso.exclusive <= m.isolated
    plain = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=2))
    assert not plain.exclusive & m.isolated
    with pytest.raises(PolicyError, match="isolated"):
        e.place(req("r", CpuKind.ISOLATED, exclusive=7, require_isolated=True))
    fallback = e.place(req("f", CpuKind.ISOLATED, exclusive=7))
    assert fallback.kind is CpuKind.EXCLUSIVE
    assert not fallback.exclusive & m.isolated


def test_full_pcpus_only_refuses_odd_requests_and_never_splits_cores() -> None:
    m = machines.load("server")
    p = Policy(m, Options(full_pcpus_only=True))
    with pytest.raises(PolicyError, match="not a multiple of the 2 threads per physical core"):
        p.create(*guaranteed("odd", 3))
    assert not p.assignments()
    for i in range(5):
        d = p.create(*guaranteed(f"x{i}", 2 * (i + 1)))
        for c in d.exclusive:
            assert m.cpus[c].threads <= d.exclusive


def test_hide_hyperthreads_pins_one_thread_per_core() -> None:
    m = machines.load("server")
    hide = {f"hide-hyperthreads.{D}": "true"}
    d = Policy(m, Options()).create(*guaranteed("h", 4, annotations=hide))
    assert d.placement.cpus is not None and len(d.placement.cpus) == 2
    assert len(cores_of(m, d.placement.cpus)) == 2


@pytest.mark.parametrize(
    ("options", "cpus_none", "mems_none"),
    [
        (Options(pin_cpu=False), True, False),
        (Options(pin_memory=False), False, True),
        (Options(pin_cpu=False, pin_memory=False), True, True),
    ],
)
def test_pinning_options_leave_fields_untouched(
    options: Options, cpus_none: bool, mems_none: bool
) -> None:
    d = Policy(machines.load("server"), options).create(*guaranteed("x", 2))
    assert (d.placement.cpus is None) is cpus_none
    assert (d.placement.mems is None) is mems_none
    assert (d.placement.cpu_shares is None) is cpus_none


def test_preserve_and_memory_preserve_leave_pinning_alone() -> None:
    e = Engine(machines.load("server"), Options())
    d = e.place(req("p", CpuKind.PRESERVE, shared=500, memory_preserve=True, memory=GiB))
    assert d.placement == replace(d.placement, cpus=None, mems=None, cpu_shares=None)
    assert d.pool == "root"


# --- scoring ------------------------------------------------------------------------------------


def test_trace_lists_every_pool_with_key_and_verdict() -> None:
    p = Policy(machines.load("server"), Options())
    d = p.create(*guaranteed("x", 3))
    pools = p.pools()
    assert [s.pool for s in d.trace] == [v.name for v in pools]
    verdicts = {s.pool: s.verdict for s in d.trace}
    assert verdicts[d.pool] == "chosen"
    assert all(v == "chosen" or v.startswith("lost to ") for v in verdicts.values())
    # the runner-up and the criterion it lost on are data, the rendered line comes from them
    lost = [s.result for s in d.trace if s.result.outcome is Outcome.LOST]
    assert lost and all(v.winner == d.pool and v.criterion for v in lost)
    assert any(f"on {v.criterion}" in d.reason for v in lost)
    chosen_key = next(s.key for s in d.trace if s.pool == d.pool)
    assert all(s.key > chosen_key for s in d.trace if s.pool != d.pool)
    # the labelled form names every component and undoes the key's negations
    index, pool = next((i, v) for i, v in enumerate(pools) if v.name == d.pool)
    named = scoring.labelled(chosen_key)
    assert len(named) == len(chosen_key) + 2  # numa and load are pairs
    assert named["depth"] == pool.depth and named["index"] == index
    assert named["numa_nodes"] == 1 and named["tier_miss"] is False
    assert named["free_shared_cpus"] >= 0


def test_too_big_for_a_leaf_goes_up_the_tree() -> None:
    p = Policy(machines.load("server"), Options())
    assert p.create(*guaranteed("x", 29)).pool.startswith("socket")
    verdicts = {s.pool: s.verdict for s in p.create(*guaranteed("y", 2)).trace}
    assert verdicts["root"].startswith("lost to")


def test_exclusive_spread_and_shared_go_to_idle_pools() -> None:
    p = Policy(machines.load("4-socket"), replace(NO_RESERVE, shared_placement="spread"))
    pools = [p.create(*guaranteed(f"x{i}", 2)).pool for i in range(4)]
    assert sorted(pools) == ["socket #0", "socket #1", "socket #2", "socket #3"]
    shared = [p.create(*burstable(f"s{i}", 100)).pool for i in range(4)]
    assert sorted(shared) == sorted(pools)


def test_affinity_pulls_and_memory_relaxes_instead_of_failing() -> None:
    m = machines.load("server")
    e = Engine(m, Options())
    tiers = frozenset({DRAM})
    first = e.place(req("a", CpuKind.EXCLUSIVE, exclusive=2, memory=GiB, memory_tiers=tiers))
    pull = affinity.Affinity(
        affinity.ALWAYS, affinity.Expression("name", affinity.Operator.EQUALS, ("a",)), 100
    )
    big = 40 * GiB  # more than one NUMA node's DRAM
    d = e.place(
        req(
            "b",
            CpuKind.EXCLUSIVE,
            exclusive=2,
            memory=big,
            memory_tiers=tiers,
            affinities=(pull,),
        )
    )
    assert d.pool == first.pool
    assert d.memory_relaxed
    assert "widened" in d.reason
    assert d.placement.mems is not None and len(d.placement.mems) == 2


def test_fallback_to_next_pool_when_the_grant_fails() -> None:
    m = machines.load("server")
    e = Engine(m, Options(shared_placement="spread"))
    # PMEM sits next to socket #0 only, so asking for it ranks socket #0's pools first.
    pmem = frozenset({DRAM, PMEM})
    # one small shared container in each NUMA node of socket #0: each node keeps a CPU
    e.place(req("s0", shared=100, memory_tiers=pmem))
    e.place(req("s1", shared=100, memory_tiers=pmem))
    assert {e.pools[g.pool].name for g in e.grants.values()} == {"NUMA node #0", "NUMA node #2"}
    d = e.place(req("x", CpuKind.EXCLUSIVE, exclusive=51, memory_tiers=pmem))
    verdicts = {s.pool: s.verdict for s in d.trace}
    assert verdicts["socket #0"].startswith("grant failed")
    assert d.pool == "root"


def test_nothing_fits_error_names_container_request_and_free_capacity() -> None:
    p = Policy(machines.load("desktop"), Options())
    with pytest.raises(PolicyError) as err:
        p.create(*guaranteed("huge", 64, memory=GiB))
    text = str(err.value)
    assert "default/web/app" in text
    assert "64 exclusive CPUs" in text
    assert "Largest free: 19250m shared CPU in socket #0, 19 CPUs to slice" in text
    assert not p.assignments()


def test_same_input_same_decisions() -> None:
    m = machines.load("server")

    def run() -> list[tuple[str, frozenset[int] | None]]:
        p = Policy(m, Options())
        out = []
        for i in range(12):  # exclusive, shared, then 1300m or 1600m: exclusive plus shared
            milli = ((1 + i % 4) * 1000, 300, 1000 + (i % 3) * 300)[i % 3]
            d = p.create(*pod_and_container(milli, cid=f"c{i}"))
            out.append((d.pool, d.placement.cpus))
        return out

    assert run() == run()


# --- updates, release, resize -------------------------------------------------------------------


def test_updates_only_for_containers_whose_cpuset_changed() -> None:
    p = Policy(machines.load("server"), Options())
    for cid in ("s0", "s1", "s2"):
        p.create(*burstable(cid, 100))
    where = {cid: a.pool for cid, a in p.assignments().items()}
    d = p.create(*guaranteed("x", 2))
    changed = {u.container_id for u in d.updates}
    assert changed and changed == {cid for cid, pool in where.items() if pool == d.pool}
    assert p.create(*burstable("y", 100)).updates == ()
    assert p.release("y") == ()
    back = p.release("x")
    assert {u.container_id for u in back} == changed
    assert p.release("x") == ()


def test_resize_in_place_keeps_cpus_and_failure_changes_nothing() -> None:
    p = Policy(machines.load("4-socket"), Options())
    pod, ctr = guaranteed("x", 4)
    d = p.create(pod, ctr)

    def resize(cpus: int) -> Decision:
        return p.resize(pod, ctr, guaranteed("x", cpus)[1].resources)

    grown = resize(6)
    assert d.exclusive <= grown.exclusive and grown.pool == d.pool
    assert grown.reason.startswith("resized in place")
    shrunk = resize(2)
    assert shrunk.exclusive <= grown.exclusive
    moved = resize(40)
    assert moved.pool == "root" and moved.reason.startswith("moved")
    before = (p.assignments(), p.pools())
    with pytest.raises(PolicyError):
        resize(400)
    assert (p.assignments(), p.pools()) == before
    same = resize(40)
    assert same.exclusive == moved.exclusive and same.updates == ()


# --- memory -------------------------------------------------------------------------------------


def test_memory_tiers_pick_the_pool_nodes_of_those_tiers() -> None:
    e = Engine(machines.load("server"), Options())
    d = e.place(req("p", shared=100, memory=GiB, memory_tiers=frozenset({PMEM})))
    assert d.placement.mems is not None
    assert {e.machine.nodes[n].tier for n in d.placement.mems} == {PMEM}
    with pytest.raises(PolicyError, match="memory tiers hbm requested"):
        e.place(req("h", shared=100, memory_tiers=frozenset({MemoryTier.HBM})))


def test_memory_capacity_is_respected() -> None:
    e = Engine(machines.load("desktop"), Options())
    total = e.machine.nodes[0].memory
    e.place(req("a", shared=100, memory=total - GiB))
    with pytest.raises(PolicyError, match="memory"):
        e.place(req("b", shared=100, memory=2 * GiB))
    e.release("a")
    e.place(req("b", shared=100, memory=2 * GiB))


def test_cold_start_starts_on_pmem_and_adds_dram_later() -> None:
    e = Engine(machines.load("server"), Options())
    d = e.place(
        req("c", shared=200, memory=GiB, memory_tiers=frozenset({PMEM}), cold_start_ns=10**10)
    )
    assert d.cold_start is not None and d.cold_start.delay_ns == 10**10
    assert d.placement.mems is not None
    assert {e.machine.nodes[n].tier for n in d.placement.mems} == {PMEM}
    then = d.cold_start.then_mems
    assert {e.machine.nodes[n].tier for n in then} == {DRAM, PMEM}
    (u,) = e.finish_cold_start("c")
    assert u.container_id == "c" and u.placement.mems == then and u.placement.cpus is None
    assert e.finish_cold_start("c") == ()


def test_available_cpus_bound_every_placement() -> None:
    m = machines.load("4-socket")
    allowed = frozenset(range(0, 144, 2))
    p = Policy(m, Options(available_resources=CpuAmount(cpus=allowed)))
    d = p.create(*guaranteed("x", 3))
    s = p.create(*burstable("s", 100))
    assert d.exclusive <= allowed
    assert s.placement.cpus is not None and s.placement.cpus <= allowed
    assert cpuset.format(p.pools()[0].cpus) == cpuset.format(allowed)


def test_reference_worked_example_three_cpus_on_server() -> None:
    # reference section 2.6: 750m reserved on CPU 0; NUMA node #2 has the most sliceable CPUs
    # (with the reference's default tiers, DRAM and PMEM)
    p = Policy(machines.load("server"), Options())
    assert p.pools()[0].reserved == {0}
    d = p.create(*guaranteed("g", 3, annotations={f"memory-type.{D}": "dram,pmem"}))
    assert d.pool == "NUMA node #2"
    assert d.placement.mems == {2, 5}
    assert d.memory_tiers == {DRAM, PMEM}
