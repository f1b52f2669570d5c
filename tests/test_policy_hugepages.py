"""Hugepages booked per NUMA node and page size: where they go, when they are refused, what the
views show, and (hypothesis) that no node ever has more booked than it holds."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_topology.nrt.build import node_resource_topology
from nri_topology.policy.accounts import hugepages
from nri_topology.policy.accounts.hugepages import HugepageBook
from nri_topology.policy.accounts.memory import MemoryBook
from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.intake.request import build_request
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    Degradation,
    PodInfo,
    PolicyError,
    QoS,
    Resources,
)
from nri_topology.testing.invariants import check
from nri_topology.topology.model import Machine
from tests import machines
from tests.test_policy_engine import req
from tests.test_request import pod_and_container

M2, G1 = 2048, 1 << 20  # page sizes in kB
MIB, GIB = 1 << 20, 1 << 30
OPTS = Options(reserved_resources=CpuAmount(milli=0))
REFUSE = replace(OPTS, on_unfit="refuse")
# node -> page size kB -> pages; node 2 has none at all
PAGES = {0: {M2: 4, G1: 1}, 1: {M2: 8}, 2: {}, 3: {G1: 2}}
SINGLE_NUMA = {"numa-policy.resource-policy.nri.io": "single-numa-node"}


def with_pages(m: Machine, pages: dict[int, dict[int, int]]) -> Machine:
    return replace(m, nodes={i: replace(n, hugepages=pages.get(i, {})) for i, n in m.nodes.items()})


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    """2 sockets x 2 NUMA nodes x 4 single-thread cores (node n: CPUs 4n..4n+3), `PAGES`."""
    m = machines.synthetic(tmp_path_factory.mktemp("m"), sockets=2, nodes=2, cores=4, threads=1)
    return with_pages(m, PAGES)


def node_of(m: Machine, cpus: frozenset[int] | None) -> set[int]:
    return {m.cpus[c].node for c in cpus or ()}


# --- names and amounts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kb"),
    [
        ("2MB", M2),  # OCI and CRI
        ("1GB", G1),
        ("64KB", 64),
        ("2Mi", M2),
        ("hugepages-1Gi", G1),  # a Kubernetes resource name
        ("hugepages-2Mi", M2),
        ("2048kB", M2),  # sysfs
        ("", None),
        ("2", None),
        ("0MB", None),
        ("2XB", None),
        ("MB", None),
    ],
)
def test_page_sizes_read_as_runtimes_and_kubernetes_write_them(text: str, kb: int | None) -> None:
    assert hugepages.page_size_kb(text) == kb


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        ((), ()),
        (((M2, 0), (G1, 0)), ()),  # the kubelet writes 0 for every size not asked for
        (((G1, GIB), (M2, 4 * MIB), (M2, 0)), ((M2, 4 * MIB), (G1, GIB))),
        (((M2, 2 * MIB), (M2, 6 * MIB)), ((M2, 6 * MIB),)),
    ],
)
def test_asked_hugepages_are_sorted_merged_and_zero_limits_dropped(
    limits: tuple[tuple[int, int], ...], want: tuple[tuple[int, int], ...]
) -> None:
    assert hugepages.want(limits) == want


@pytest.mark.parametrize(
    ("size", "amount", "pages"), [(M2, 2 * MIB, 1), (M2, 2 * MIB + 1, 2), (G1, 3 * GIB, 3)]
)
def test_pages_round_up(size: int, amount: int, pages: int) -> None:
    assert hugepages.pages(size, amount) == pages


def test_layout_fills_nodes_in_order_and_books_nothing(machine: Machine) -> None:
    book = HugepageBook(machine)
    layout, short = book.layout(((M2, 10 * 2 * MIB),), (0, 1, 2, 3))
    assert layout == ((0, M2, 4), (1, M2, 6)) and short == {}
    assert book.booked_pages() == {}
    layout, short = book.layout(((M2, 10 * 2 * MIB),), (1, 0), allowed=frozenset({1}))
    assert layout == ((1, M2, 8),) and short == {M2: 2}


def test_booking_past_a_node_is_refused_and_changes_nothing(machine: Machine) -> None:
    book = HugepageBook(machine)
    book.book(((0, M2, 3),))
    with pytest.raises(ValueError, match="exceed"):
        book.book(((1, M2, 1), (0, M2, 2)))
    assert book.booked_pages() == {(0, M2): 3}
    with pytest.raises(ValueError, match="not booked"):
        book.unbook(((0, M2, 4),))


def test_pages_held_outside_leave_the_nodes_capacity(machine: Machine) -> None:
    """Pages another owner holds (the kubelet's Memory Manager) are not the book's to give."""
    book = HugepageBook(machine, outside=((0, M2, 3), (0, G1, 1), (3, G1, 5)))
    assert [book.capacity(0, M2), book.capacity(0, G1), book.capacity(3, G1)] == [1, 0, 0]
    assert book.capacity(1, M2) == 8 and book.booked_pages() == {}
    layout, short = book.layout(((M2, 4 * 2 * MIB),), (0, 1))
    assert layout == ((0, M2, 1), (1, M2, 3)) and short == {}


def test_memory_held_outside_leaves_the_nodes_capacity(machine: Machine) -> None:
    node = machine.nodes[0].memory
    book = MemoryBook(machine, outside=((0, GIB), (0, GIB), (1, 2 * node)))
    assert book.capacity(frozenset({0})) == node - 2 * GIB
    assert book.capacity(frozenset({1})) == 0  # never below nothing
    assert book.capacity(frozenset({0, 2})) == 2 * node - 2 * GIB


# --- the engine -----------------------------------------------------------------------------


def ask(
    cid: str, milli: int, pages: tuple[tuple[int, int], ...] = (), **kw: object
) -> tuple[PodInfo, ContainerInfo]:
    """A Guaranteed container (Burstable with `qos=`) of `milli` CPU whose cgroup allows
    `pages` ((page size kB, bytes), ...) of hugepages: an integer CPU count is exclusive."""
    pod, ctr = pod_and_container(milli, memory=GIB, cid=cid, **kw)  # type: ignore[arg-type]
    return pod, replace(ctr, resources=replace(ctr.resources, hugepages=pages))


def booked(p: Policy) -> dict[tuple[int, int], int]:
    """Pages booked per (node, page size), from the nodes' capacity as the scheduler sees it."""
    return {
        (c.node, size): total - free
        for c in p.node_capacity()
        for size, (total, free) in c.hugepages.items()
        if total != free
    }


@pytest.mark.parametrize(
    ("milli", "asked", "nodes", "layout"),
    [
        # the CPUs' node when it holds them: 16 MiB of 2 MiB pages are 8, only node 1 has 8
        (2000, ((M2, 16 * MIB),), {1}, ((1, M2, 8),)),
        (2000, ((G1, 2 * GIB),), {3}, ((3, G1, 2),)),
        (2000, ((M2, 4 * MIB), (G1, GIB)), {0}, ((0, M2, 2), (0, G1, 1))),
        # a shared container too: its pool's nodes
        (500, ((G1, 2 * GIB),), {3}, ((3, G1, 2),)),
    ],
)
def test_hugepages_go_to_the_pool_holding_them(
    machine: Machine,
    milli: int,
    asked: tuple[tuple[int, int], ...],
    nodes: set[int],
    layout: tuple[tuple[int, int, int], ...],
) -> None:
    d = Policy(machine, OPTS).create(*ask("a", milli, asked))
    assert d.kind is (CpuKind.EXCLUSIVE if milli == 2000 else CpuKind.SHARED)
    assert d.hugepages == layout
    assert d.placement.mems == frozenset(nodes)
    assert node_of(machine, d.placement.cpus) == nodes
    assert not d.degraded


def test_nodes_full_of_them_send_the_next_container_elsewhere_and_release_gives_back(
    machine: Machine,
) -> None:
    p = Policy(machine, OPTS)
    a = p.create(*ask("a", 1000, ((G1, 2 * GIB),)))
    assert a.hugepages == ((3, G1, 2),)
    b = p.create(*ask("b", 1000, ((G1, GIB),)))
    assert b.hugepages == ((0, G1, 1),) and node_of(machine, b.placement.cpus) == {0}
    with pytest.raises(PolicyError, match=r"1 pages of hugepages-1Gi asked, 0 free"):
        p.create(*ask("c", 1000, ((G1, GIB),)))
    assert "c" not in p.assignments() and booked(p) == {(3, G1): 2, (0, G1): 1}
    p.release("a")
    assert booked(p) == {(0, G1): 1}
    c = p.create(*ask("c", 1000, ((G1, GIB),)))
    assert c.hugepages == ((3, G1, 1),)


def test_beyond_every_node_they_go_to_a_wider_pool_and_strict_ones_are_refused(
    machine: Machine,
) -> None:
    """No node holds 12 pages of 2 MiB: the socket of nodes 0 and 1 does, its CPUs' node filled
    first, as memory widens up the tree; no node holds 3 pages of 1 GiB, only the whole machine.
    A single-numa-node container is refused, saying why."""
    p = Policy(machine, OPTS)
    d = p.create(*ask("a", 2000, ((M2, 24 * MIB),)))
    (cpu_node,) = node_of(machine, d.placement.cpus)
    assert d.pool == "socket #0" and d.placement.mems == {0, 1}
    assert d.hugepages == ((0, M2, 4), (1, M2, 8)) and cpu_node in (0, 1)
    d = p.create(*ask("b", 2000, ((G1, 3 * GIB),)))
    assert d.hugepages == ((0, G1, 1), (3, G1, 2)) and {0, 3} <= d.placement.mems
    assert not d.degraded

    p = Policy(machine, OPTS)
    strict = ask("s", 2000, ((M2, 24 * MIB),), annotations=SINGLE_NUMA)
    with pytest.raises(PolicyError, match="grant failed: hugepages: 12 pages of hugepages-2Mi"):
        p.create(*strict)
    assert booked(p) == {}


def test_beyond_the_pools_that_can_hold_the_cpus_they_widen_degraded(machine: Machine) -> None:
    """Only node 2's CPUs are left for exclusive use and it has no hugepages: a container that
    may degrade gets them from the closest nodes holding them, a refusing one is refused."""
    opts = replace(OPTS, available_resources=CpuAmount(cpus=frozenset(range(8, 12))))
    d = Policy(machine, opts).create(*ask("a", 1000, ((G1, GIB),)))
    assert node_of(machine, d.placement.cpus) == {2}
    assert d.hugepages == ((3, G1, 1),) and d.placement.mems == {2, 3}
    assert Degradation.HUGEPAGES_REMOTE in d.degraded and "beyond the pool" in d.reason
    with pytest.raises(PolicyError, match="hugepages"):
        Policy(machine, replace(opts, on_unfit="refuse")).create(*ask("a", 1000, ((G1, GIB),)))


def test_more_than_the_machine_holds_is_refused_as_the_kubelet_would(machine: Machine) -> None:
    p = Policy(machine, OPTS)
    with pytest.raises(PolicyError, match=r"13 pages of hugepages-2Mi asked, 12 free"):
        p.create(*ask("a", 100, ((M2, 26 * MIB),), qos=QoS.BURSTABLE))
    assert p.assignments() == {} and booked(p) == {}


def test_resize_rebooks_and_a_failed_resize_keeps_the_old_pages(machine: Machine) -> None:
    p = Policy(machine, OPTS)
    pod, ctr = ask("a", 1000, ((M2, 4 * MIB),))
    p.create(pod, ctr)
    before = booked(p)
    with pytest.raises(PolicyError):
        p.resize(pod, ctr, ask("a", 1000, ((M2, 40 * MIB),))[1].resources)
    assert booked(p) == before
    d = p.resize(pod, ctr, ask("a", 1000, ((M2, 16 * MIB),))[1].resources)
    assert d.hugepages == ((1, M2, 8),) and booked(p) == {(1, M2): 8}


def test_adopted_container_keeps_its_nodes_and_what_does_not_fit_is_noted(
    machine: Machine,
) -> None:
    e = Engine(machine, OPTS)
    node1 = e.pool_index("NUMA node #1")
    assert node1 is not None
    a = req("a", CpuKind.EXCLUSIVE, exclusive=1, hugepages=((M2, 8 * MIB),))
    g = e.adopt(a, node1, frozenset({4}), False, None, frozenset({4}), frozenset({1}))
    assert g.hugepages == ((1, M2, 4),) and not g.degraded
    a = req("a2", CpuKind.EXCLUSIVE, exclusive=1, hugepages=((M2, 4 * MIB),))
    g = e.adopt(a, node1, frozenset({5}), False, None, frozenset({5}), frozenset({0}))
    assert g.hugepages == ((0, M2, 2),) and Degradation.HUGEPAGES_REMOTE in g.degraded
    b = req("b", CpuKind.SHARED, shared=100, hugepages=((G1, 4 * GIB),))
    g = e.adopt(b, 0, frozenset(), False, None, None, frozenset({3}))
    assert g.hugepages == ((0, G1, 1), (3, G1, 2)) and Degradation.HUGEPAGES_CHARGE in g.degraded


# --- requests, views, zones ---------------------------------------------------------------------


POD = PodInfo(id="p", name="pod", namespace="ns", cgroup_parent="/kubepods/podp")


def container(cid: str = "c", limits: tuple[tuple[int, int], ...] = ()) -> ContainerInfo:
    res = Resources(
        cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=GIB, hugepages=limits
    )
    return ContainerInfo(id=cid, pod_id="p", name="app", resources=res)


@pytest.mark.parametrize(
    ("annotation", "limits", "want", "cut"),
    [
        (None, ((M2, 4 * MIB), (G1, 0)), ((M2, 4 * MIB),), False),
        ('{"containers": {"app": {"limits": {"hugepages-1Gi": "1Gi"}}}}', (), ((G1, GIB),), False),
        (
            '{"containers": {"app": {"requests": {"hugepages-2Mi": "8Mi"}}}}',
            ((M2, 4 * MIB),),
            ((M2, 4 * MIB),),
            True,  # the cgroup allows 4 MiB only
        ),
    ],
)
def test_request_takes_the_cgroup_limits_and_the_annotation_within_them(
    machine: Machine,
    annotation: str | None,
    limits: tuple[tuple[int, int], ...],
    want: tuple[tuple[int, int], ...],
    cut: bool,
) -> None:
    pod = replace(POD, annotations={"noderesource.dev/resources": annotation} if annotation else {})
    r = build_request(pod, container(limits=limits), OPTS, machine=machine)
    assert r.hugepages == want
    assert any("hugepages-2Mi" in w.message for w in r.warnings) == cut


def test_a_bad_hugepage_quantity_in_the_annotation_is_refused(machine: Machine) -> None:
    text = '{"containers": {"app": {"limits": {"hugepages-2Mi": "lots"}}}}'
    pod = replace(POD, annotations={"noderesource.dev/resources": text})
    with pytest.raises(PolicyError, match="hugepages-2Mi"):
        build_request(pod, container(), OPTS, machine=machine)


def test_pools_and_zones_show_the_pages_left(machine: Machine) -> None:
    p = Policy(machine, OPTS)
    p.create(POD, container("c", ((G1, 2 * GIB),)))
    views = {v.name: v for v in p.pools()}
    root = next(v for v in views.values() if v.parent is None)
    assert root.hugepages == {M2: (12, 12), G1: (3, 1)}
    caps = {c.node: c.hugepages for c in p.node_capacity()}
    assert caps[3] == {G1: (2, 0)} and caps[0] == {M2: (4, 4), G1: (1, 1)} and caps[2] == {}
    nrt = node_resource_topology(machine, p.node_capacity(), "n")
    zones = {z["name"]: {r["name"]: r for r in z["resources"]} for z in nrt["zones"]}
    assert zones["node-3"]["hugepages-1Gi"] == {
        "name": "hugepages-1Gi",
        "capacity": str(2 * GIB),
        "allocatable": str(2 * GIB),
        "available": "0",
    }
    assert zones["node-0"]["hugepages-1Gi"]["available"] == str(GIB)
    check(p, machine)


# --- invariants ---------------------------------------------------------------------------------

asks = st.lists(
    st.tuples(st.sampled_from((M2, G1)), st.integers(0, 10)), max_size=2
)  # (page size, pages)
ops = st.lists(
    st.tuples(
        st.booleans(),  # place (else release)
        st.integers(0, 7),  # container
        st.sampled_from((CpuKind.SHARED, CpuKind.EXCLUSIVE)),
        st.booleans(),  # single NUMA node
        asks,
    ),
    max_size=30,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=ops, refuse=st.booleans())
def test_never_more_booked_than_a_node_holds(
    machine: Machine,
    ops: list[tuple[bool, int, CpuKind, bool, list[tuple[int, int]]]],
    refuse: bool,
) -> None:
    p = Policy(machine, REFUSE if refuse else OPTS)
    for place, n, kind, single, pages_asked in ops:
        cid = f"c{n}"
        if not place:
            p.release(cid)
        elif cid not in p.assignments():
            # one cgroup limit per page size
            limits = tuple({size: count * size * 1024 for size, count in pages_asked}.items())
            asked = hugepages.want(limits)
            before = booked(p)
            milli, qos = (
                (1000, QoS.GUARANTEED) if kind is CpuKind.EXCLUSIVE else (100, QoS.BURSTABLE)
            )
            try:
                d = p.create(
                    *ask(cid, milli, limits, qos=qos, annotations=SINGLE_NUMA if single else None)
                )
            except PolicyError:
                assert booked(p) == before  # a refusal changes nothing
                continue
            # all of it booked, on the container's memory nodes
            for size, amount in asked:
                got = sum(c for _, s, c in d.hugepages if s == size)
                assert got == hugepages.pages(size, amount)
            assert hugepages.nodes_of(d.hugepages) <= (d.placement.mems or frozenset())
            if single:
                assert hugepages.nodes_of(d.hugepages) <= node_of(machine, d.placement.cpus)
        now = booked(p)
        for (node, size), count in now.items():
            assert 0 < count <= machine.nodes[node].hugepages[size]
        total: dict[tuple[int, int], int] = {}
        for a in p.assignments().values():
            for node, size, count in a.hugepages:
                total[node, size] = total.get((node, size), 0) + count
        assert total == now
    for cid in list(p.assignments()):
        p.release(cid)
    assert booked(p) == {}


def test_a_restart_books_the_same_pages_from_what_the_runtime_reports(machine: Machine) -> None:
    """The checkpoint keeps no layout: pages are booked again on the memory nodes each running
    container reports, so a restart ends where the run left off."""
    p = Policy(machine, OPTS)
    a = container("a", ((G1, 2 * GIB),))
    b = replace(container("b", ((M2, 16 * MIB),)), id="b")
    p.create(POD, a)
    p.create(POD, b)
    booked = {cid: x.hugepages for cid, x in p.assignments().items()}
    running = []
    for c in (a, b):
        x = p.assignments()[c.id]
        res = replace(
            c.resources,
            cpuset_cpus=",".join(map(str, sorted(x.cpus or ()))),
            cpuset_mems=",".join(map(str, sorted(x.mems or ()))),
        )
        running.append(replace(c, resources=res))
    again = Policy(machine, OPTS)
    report = again.restore([POD], running, p.snapshot())
    assert not report.failed and not report.updates
    assert {cid: x.hugepages for cid, x in again.assignments().items()} == booked
    check(again, machine)
