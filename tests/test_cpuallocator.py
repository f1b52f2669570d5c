"""The CPU allocator against the kubelet's own expectations (kubelet-reference.md §6).

The kubelet's unit-test topologies (§6.1) are built below as synthetic `Machine` values.
`grid` numbers CPUs the "siblings offset" way: thread t of global core g is CPU g + t * cores,
cores counted socket by socket, node by node. Cache groups are the package (L3) and the core
(L2) unless `l3_cores` says how many consecutive cores share an L3 (the kubelet's "uncore cache").
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.allocator import cpuallocator
from nri_topology.policy.allocator.cpuallocator import AllocationError, take_cpus, take_distributed
from nri_topology.topology.cpuset import parse
from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode

# One CPU as (id, package, node, core id, l3 group id).
CpuSpec = tuple[int, int, int, int, int]


def build(
    specs: Iterable[CpuSpec], distances: Mapping[tuple[int, int], int] | None = None
) -> Machine:
    """A Machine from per-CPU specs; threads share a core id, L3 groups share an l3 id.

    Distances default to 10 for a node to itself, 11 within a package, 21 across packages.
    """
    specs = list(specs)
    cores: dict[tuple[int, int], set[int]] = {}
    l3s: dict[int, set[int]] = {}
    node_cpus: dict[int, set[int]] = {}
    node_pkg: dict[int, int] = {}
    for cpu, pkg, node, core, l3 in specs:
        cores.setdefault((pkg, core), set()).add(cpu)
        l3s.setdefault(l3, set()).add(cpu)
        node_cpus.setdefault(node, set()).add(cpu)
        node_pkg[node] = pkg
    cpus = {}
    for cpu, pkg, node, core, l3 in specs:
        threads = frozenset(cores[(pkg, core)])
        cpus[cpu] = Cpu(cpu, pkg, 0, core, core, node, threads, threads, frozenset(l3s[l3]))

    def dist(a: int, b: int) -> int:
        if distances is not None:
            return distances[(a, b)]
        if a == b:
            return 10
        return 11 if node_pkg[a] == node_pkg[b] else 21

    nodes = {
        n: NumaNode(
            n,
            frozenset(ids),
            8 << 30,
            MemoryTier.DRAM,
            "cpu",
            {m: dist(n, m) for m in node_cpus},
        )
        for n, ids in node_cpus.items()
    }
    return Machine(cpus=cpus, nodes=nodes)


def grid(
    sockets: int, nodes: int, cores: int, threads: int, l3_cores: int | None = None
) -> Machine:
    """sockets x NUMA nodes per socket x cores per node x threads, siblings `total cores` apart."""
    total = sockets * nodes * cores
    specs = []
    for g in range(total):
        socket = g // (nodes * cores)
        node = g // cores
        l3 = socket if l3_cores is None else 1000 + g // l3_cores
        for t in range(threads):
            specs.append((g + t * total, socket, node, g, l3))
    return build(specs)


def _dual_socket_ht() -> Machine:
    """12 CPUs: even CPUs on socket/node 0, odd on 1; core c = {c, c+6}."""
    return build((cpu, cpu % 2, cpu % 2, cpu % 6, cpu % 2) for cpu in range(12))


def _triple_socket_ht() -> Machine:
    """18 CPUs, siblings {2k, 2k+1}; 0-5 on socket 1, 6-11 on socket 0, 12-17 on socket 2."""
    socket_of = {0: 1, 1: 0, 2: 2}
    specs = []
    for cpu in range(18):
        s = socket_of[cpu // 6]
        specs.append((cpu, s, s, cpu // 2, s))
    return build(specs)


TOPOLOGIES: dict[str, Machine] = {
    "SingleSocketHT": grid(1, 1, 4, 2),
    "DualSocketHT": _dual_socket_ht(),
    "DualSocketNoHT": grid(2, 1, 4, 1),
    "TripleSocketHT": _triple_socket_ht(),
    "DualSocketMultiNumaPerSocketHT": grid(2, 2, 10, 2),
    "DualSocketMultiNumaPerSocketHTLarge": grid(2, 4, 16, 2),
    "UncoreSingleSocketNoSMT": grid(1, 1, 16, 1, l3_cores=4),
    "UncoreDualSocketNoSMT": grid(2, 1, 8, 1, l3_cores=4),
    "UncoreSingleSocketMultiNuma": grid(1, 2, 8, 1, l3_cores=4),
    "UncoreSingleSocketSMT": grid(1, 1, 8, 2, l3_cores=4),
    # 2 x EPYC 9654 NPS1: 192 cores x 2 threads, L3 (CCX) of 8 cores.
    "DualSocketSingleNumaPerSocketSMTUncore": grid(2, 1, 96, 2, l3_cores=8),
}
T = TOPOLOGIES


def cpus(text: str) -> frozenset[int]:
    return parse(text)


# --- §6.2 takeByTopologyNUMAPacked, default options ------------------------------------------

PACKED = [
    # (case, topology, available, count, expected)
    (2, "SingleSocketHT", "0-7", 0, ""),
    (3, "SingleSocketHT", "0-7", 1, "0"),
    (4, "SingleSocketHT", "1,3,5,6,7", 1, "6"),
    (5, "SingleSocketHT", "0-7", 2, "0,4"),
    (6, "SingleSocketHT", "0,1,2,3,6", 2, "2,6"),
    (7, "SingleSocketHT", "0-7", 8, "0-7"),
    (8, "DualSocketHT", "0-11", 6, "0,2,4,6,8,10"),
    (9, "DualSocketHT", "1-5,7-11", 1, "2"),
    (10, "DualSocketHT", "0-11", 8, "0,6,2,8,4,10,1,7"),
    (11, "DualSocketMultiNumaPerSocketHT", "0-79", 40, "0-19,40-59"),
    (12, "DualSocketMultiNumaPerSocketHT", "0-79", 20, "0-9,40-49"),
    (13, "DualSocketMultiNumaPerSocketHT", "10-39,50-79", 20, "10-19,50-59"),
    (14, "DualSocketMultiNumaPerSocketHT", "0-79", 60, "0-29,40-69"),
    (15, "DualSocketMultiNumaPerSocketHT", "1-39,41-79", 60, "10-39,50-79"),
    (16, "DualSocketMultiNumaPerSocketHT", "0-79", 64, "0-29,40-69,30,31,70,71"),
    # prefer-align-cpus-by-uncorecache cases: our cache groups give the same sets.
    (17, "UncoreSingleSocketNoSMT", "1-15", 10, "1,2,4-11"),
    (19, "UncoreDualSocketNoSMT", "0-15", 4, "0-3"),
    (20, "UncoreDualSocketNoSMT", "2-15", 6, "2-7"),
    (21, "UncoreDualSocketNoSMT", "8-15", 4, "8-11"),
    (22, "UncoreSingleSocketMultiNuma", "3-8,12", 2, "4,5"),
    (23, "UncoreSingleSocketSMT", "2,3,10,11,4-7,12-15", 6, "4,5,6,12,13,14"),
    (24, "UncoreSingleSocketSMT", "1-7,9-15", 10, "4-7,12-15,1,9"),
]


@pytest.mark.parametrize(
    ("case", "topo", "available", "count", "expected"), PACKED, ids=[f"#{c[0]}" for c in PACKED]
)
def test_packed_matches_kubelet(
    case: int, topo: str, available: str, count: int, expected: str
) -> None:
    assert take_cpus(T[topo], cpus(available), count) == cpus(expected)


def test_packed_case_18_differs_on_purpose() -> None:
    """Kubelet case 18 gives {1}: its uncore step takes the lowest free core of the cache and
    ignores packing. We keep packing (as in case 9): the lone free CPU of the fuller node."""
    assert take_cpus(T["DualSocketHT"], cpus("1-5,7-11"), 1) == {2}


def test_not_enough_cpus() -> None:
    """Case 1: the message names the request and what was available."""
    with pytest.raises(AllocationError, match=r"requested 5, available 4 \(0,2,4,6\)"):
        take_cpus(T["SingleSocketHT"], cpus("0,2,4,6"), 5)


@pytest.mark.parametrize(
    ("available", "count", "message"),
    [
        ("0-7", -1, "must not be negative"),
        ("0-8", 1, "CPUs 8 are not online CPUs"),
    ],
)
def test_bad_input(available: str, count: int, message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        take_cpus(T["SingleSocketHT"], cpus(available), count)


def test_static_policy_cases() -> None:
    """§6.4 #42: with {0} reserved, 1 CPU is the sibling of the partial core; #50: 8 of 7."""
    m = T["SingleSocketHT"]
    assert take_cpus(m, m.all_cpus - {0}, 1) == {4}
    with pytest.raises(AllocationError, match="requested 8, available 7"):
        take_cpus(m, m.all_cpus - {0}, 8)


def test_reserved_pick_is_lowest_core() -> None:
    """§1.2: reserving 2 CPUs of an 8-CPU HT box gives {0,4}; 1 gives {0}."""
    m = T["SingleSocketHT"]
    assert take_cpus(m, m.all_cpus, 2) == {0, 4}
    assert take_cpus(m, m.all_cpus, 1) == {0}


# --- cache groups: where we keep groups together --------------------------------------------


def test_fits_in_one_l3_rather_than_spilling() -> None:
    """L3 0 has one free core left, L3 1 is idle: 4 CPUs go to L3 1 whole, not 2 + 2."""
    m = T["UncoreSingleSocketSMT"]
    got = take_cpus(m, cpus("3,11,4-7,12-15"), 4)
    assert got == {4, 5, 12, 13}


def test_big_request_takes_idle_ccx_then_fills_the_tightest() -> None:
    """EPYC NPS1: 24 CPUs = one idle CCX (16) + 8 from one CCX that can hold them."""
    m = T["DualSocketSingleNumaPerSocketSMTUncore"]
    busy = cpus("0-1,192-193")  # 2 cores of CCX 0 used
    got = take_cpus(m, m.all_cpus - busy, 24)
    ccx = {min(m.cpus[c].l3) for c in got}
    assert len(ccx) == 2
    assert got == cpus("8-15,200-207,2-5,194-197")  # idle CCX 1 whole, then the fuller CCX 0


# --- full-pcpus-only ---------------------------------------------------------------------------


def test_full_pcpus_refuses_odd_count() -> None:
    """§6.4 #43: 1 CPU on a 2-thread machine is not a whole core."""
    with pytest.raises(
        AllocationError, match=r"not a whole number of physical cores.*multiple of 2"
    ):
        take_cpus(T["SingleSocketHT"], cpus("1-7"), 1, full_pcpus_only=True)


def test_full_pcpus_refuses_when_cores_are_broken() -> None:
    """§6.4 #45: reserved {1,6} break two cores, 8 CPUs remain in whole cores, 10 asked."""
    m = T["DualSocketHT"]
    with pytest.raises(AllocationError, match="only 8 of the 10 available CPUs"):
        take_cpus(m, m.all_cpus - {1, 6}, 10, full_pcpus_only=True)


def test_full_pcpus_takes_whole_cores() -> None:
    """§6.4 #46: reserved {0,6} are one core, 10 CPUs = the 5 other cores."""
    m = T["DualSocketHT"]
    assert take_cpus(m, m.all_cpus - {0, 6}, 10, full_pcpus_only=True) == m.all_cpus - {0, 6}


def test_full_pcpus_skips_half_used_core() -> None:
    """Without the option 2 CPUs would finish core {1,5}'s sibling; with it, a whole core."""
    m = T["SingleSocketHT"]
    assert take_cpus(m, cpus("1,2,3,6,7"), 2) == {2, 6}
    assert take_cpus(m, cpus("0,1,2,3,6,7"), 2, full_pcpus_only=True) == {2, 6}
    assert take_cpus(m, cpus("0,1,3,6,7"), 2) == {3, 7}


def _short_cores() -> Machine:
    """SingleSocketHT split into 2 NUMA nodes (cores 0,1 | 2,3) with CPU 4 offline."""
    return build((c, 0, (c % 4) // 2, c % 4, 0) for c in range(8) if c != 4)


@pytest.mark.parametrize(
    ("available", "count", "expected"),
    [
        ("0-3,5-7", 2, "1,5"),  # a full-size core, not the lone thread 0 plus half of another
        ("0-3,5-7", 4, "2,3,6,7"),  # node 0 (3 CPUs) is not taken whole
        ("0-3,5-7", 6, "1-3,5-7"),
        ("0,2,3,6,7", 2, "2,6"),
        ("0,1,3", 1, "0"),  # threads per core is 2 but {0} is a whole core... of 1
    ],
)
def test_full_pcpus_with_an_offline_sibling(available: str, count: int, expected: str) -> None:
    m = _short_cores()
    if count % m.threads_per_core:
        with pytest.raises(AllocationError, match="multiple of 2"):
            take_cpus(m, cpus(available), count, full_pcpus_only=True)
        return
    assert take_cpus(m, cpus(available), count, full_pcpus_only=True) == cpus(expected)


def test_full_pcpus_uses_short_cores_last() -> None:
    m = _short_cores()
    assert take_cpus(m, cpus("0,2,6"), 2, full_pcpus_only=True) == {2, 6}
    # 4 threads per core, two cores with a thread offline: 3 + 3 cannot make 4.
    knl = build([(c, 0, 0, c // 4, 0) for c in (0, 1, 2, 4, 5, 6, 8, 9, 10, 11)])
    with pytest.raises(AllocationError, match="cores of unequal size"):
        take_cpus(knl, cpus("0-2,4-6"), 4, full_pcpus_only=True)
    assert take_cpus(knl, cpus("0-2,4-6"), 4) == {0, 1, 2, 4}


# --- prefer --------------------------------------------------------------------------------------


def test_prefer_first_then_rest() -> None:
    m = T["SingleSocketHT"]
    # The third CPU finishes a core the preferred ones broke (packing), here {1,5}.
    assert take_cpus(m, m.all_cpus, 3, prefer=cpus("5,6")) == {5, 6, 1}
    assert take_cpus(m, m.all_cpus, 1, prefer=cpus("5,6")) == {5}
    assert take_cpus(m, m.all_cpus, 2, prefer=cpus("9")) == {0, 4}


def test_prefer_with_full_pcpus_keeps_cores_whole() -> None:
    m = T["SingleSocketHT"]
    got = take_cpus(m, m.all_cpus, 4, full_pcpus_only=True, prefer=cpus("1,5,2"))
    assert got == {1, 5, 0, 4}


# --- §6.3 takeByTopologyNUMADistributed -----------------------------------------------------

SNC = "DualSocketMultiNumaPerSocketHT"
DISTRIBUTED = [
    # (case, topology, available, count, group size, expected)
    ("30", "DualSocketHT", "0-11", 8, 1, "0,6,2,8,1,7,3,9"),
    ("31-g1", "DualSocketHT", "1-5,7-11", 1, 1, "1"),
    ("31-g2", "DualSocketHT", "1-5,7-11", 1, 2, "2"),
    ("32", SNC, "0-79", 64, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
    ("33", SNC, "0-79", 48, 1, "0-7,10-17,20-27,40-47,50-57,60-67"),
    ("34", SNC, "1-29,32-39,41-69,72-79", 48, 1, "1-8,10-17,20-27,41-48,50-57,60-67"),
    ("35", SNC, "2-29,31-39,42-69,71-79", 48, 1, "10-17,20-27,31-38,50-57,60-67,71-78"),
    (
        "36",
        SNC,
        "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
        16,
        1,
        "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
    ),
    ("37-g1", SNC, "0-79", 26, 1, "0-6,10-16,40-45,50-55"),
    ("37-g2", SNC, "0-79", 26, 2, "0-6,10-15,40-46,50-55"),
    ("38-g1", SNC, "0-79", 62, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
    ("38-g2", SNC, "0-79", 62, 2, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
    (
        "39-g1",
        SNC,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
    ),
    (
        "39-g2",
        SNC,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        2,
        "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
    ),
    (
        "40",
        SNC,
        "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
        34,
        1,
        "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
    ),
    (
        "41",
        "DualSocketMultiNumaPerSocketHTLarge",
        "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,"
        "101-111,229-239,126,127,254,255",
        28,
        1,
        "43-47,75-79,96,101-105,171-174,203-206,229-232",
    ),
]


@pytest.mark.parametrize(
    ("case", "topo", "available", "count", "group", "expected"),
    DISTRIBUTED,
    ids=[f"#{c[0]}" for c in DISTRIBUTED],
)
def test_distributed_matches_kubelet(
    case: str, topo: str, available: str, count: int, group: int, expected: str
) -> None:
    got = take_distributed(T[topo], cpus(available), count, group_size=group)
    assert got == cpus(expected)


@pytest.mark.parametrize(
    "case", [c for c in PACKED if c[0] <= 15 and c[0] not in (9, 10)], ids=lambda c: f"#{c[0]}"
)
def test_distributed_passes_packed_cases(case: tuple[int, str, str, int, str]) -> None:
    """§6.3: the packed cases #1-#15 also hold for the distributed algorithm with g=1 —
    except #9 and #10, whose inputs are those of #31 and #30 with other expected sets."""
    _, topo, available, count, expected = case
    assert take_distributed(T[topo], cpus(available), count) == cpus(expected)


def test_distributed_min_nodes_widens() -> None:
    """A 2-node hint keeps 8 CPUs on two nodes although one node could hold them."""
    m = T[SNC]
    assert take_distributed(m, m.all_cpus, 8) == cpus("0-3,40-43")
    got = take_distributed(m, m.all_cpus, 8, min_nodes=2)
    assert {m.cpus[c].node for c in got} == {0, 1}
    assert len(got) == 8


def test_distributed_full_pcpus() -> None:
    m = T[SNC]
    with pytest.raises(AllocationError, match="multiple of 2"):
        take_distributed(m, m.all_cpus, 3, full_pcpus_only=True)
    got = take_distributed(m, m.all_cpus - {0}, 36, full_pcpus_only=True)
    assert all(core <= got or not core & got for core in m.cores)
    assert 0 not in got and 40 not in got


def test_distributed_bad_group() -> None:
    with pytest.raises(AllocationError, match="group size"):
        take_distributed(T[SNC], cpus("0-79"), 4, group_size=0)


# --- properties ---------------------------------------------------------------------------------

PROPERTY_TOPOLOGIES = [
    "SingleSocketHT",
    "DualSocketHT",
    "TripleSocketHT",
    "DualSocketMultiNumaPerSocketHT",
    "UncoreSingleSocketSMT",
    "UncoreSingleSocketMultiNuma",
]


@st.composite
def requests(draw: st.DrawFn) -> tuple[Machine, frozenset[int], int]:
    m = T[draw(st.sampled_from(PROPERTY_TOPOLOGIES))]
    available = frozenset(draw(st.sets(st.sampled_from(sorted(m.all_cpus)))))
    count = draw(st.integers(min_value=0, max_value=len(available)))
    return m, available, count


@settings(max_examples=150, deadline=None)
@given(requests())
def test_packed_properties(req: tuple[Machine, frozenset[int], int]) -> None:
    m, available, count = req
    got = take_cpus(m, available, count)
    assert got <= available
    assert len(got) == count
    assert take_cpus(m, frozenset(sorted(available, reverse=True)), count) == got


@settings(max_examples=100, deadline=None)
@given(requests(), st.sampled_from([1, 2]))
def test_distributed_properties(req: tuple[Machine, frozenset[int], int], group: int) -> None:
    m, available, count = req
    got = take_distributed(m, available, count, group_size=group)
    assert got <= available
    assert len(got) == count
    assert take_distributed(m, available, count, group_size=group) == got


@settings(max_examples=150, deadline=None)
@given(requests())
def test_full_pcpus_never_splits_a_core(req: tuple[Machine, frozenset[int], int]) -> None:
    m, available, count = req
    try:
        got = take_cpus(m, available, count, full_pcpus_only=True)
    except AllocationError:
        whole = sum(len(c) for c in m.cores if c <= available)
        assert count % m.threads_per_core or count > whole
        return
    assert len(got) == count and got <= available
    assert all(core <= got or not core & got for core in m.cores)
    spread = take_distributed(m, available, count, full_pcpus_only=True)
    assert len(spread) == count and spread <= available
    assert all(core <= spread or not core & spread for core in m.cores)


@settings(max_examples=100, deadline=None)
@given(requests())
def test_whole_free_core_used_before_broken_ones(req: tuple[Machine, frozenset[int], int]) -> None:
    """Whenever a request is a multiple of the core size and whole free cores can hold it,
    no core is split."""
    m, available, count = req
    whole = sum(len(c) for c in m.cores if c <= available)
    if count % m.threads_per_core or count > whole:
        return
    got = take_cpus(m, available, count)
    assert all(core <= got or not core & got for core in m.cores)


def _reversed(m: Machine) -> Machine:
    """The same machine with its CPUs and nodes listed in the opposite order."""
    return Machine(
        cpus=dict(reversed(list(m.cpus.items()))), nodes=dict(reversed(list(m.nodes.items())))
    )


REVERSED = {name: _reversed(T[name]) for name in PROPERTY_TOPOLOGIES}


@settings(max_examples=100, deadline=None)
@given(requests())
def test_result_ignores_listing_order(req: tuple[Machine, frozenset[int], int]) -> None:
    """Deterministic: the order in which sysfs listed CPUs and nodes does not matter."""
    m, available, count = req
    twin = next(REVERSED[name] for name in PROPERTY_TOPOLOGIES if T[name] is m)
    assert take_cpus(twin, available, count) == take_cpus(m, available, count)
    assert take_distributed(twin, available, count) == take_distributed(m, available, count)


@settings(max_examples=100, deadline=None)
@given(requests(), st.data())
def test_prefer_is_used_first(
    req: tuple[Machine, frozenset[int], int], data: st.DataObject
) -> None:
    m, available, count = req
    prefer = frozenset(data.draw(st.sets(st.sampled_from(sorted(m.all_cpus)))))
    got = take_cpus(m, available, count, prefer=prefer)
    assert got <= available and len(got) == count
    assert len(got & prefer) == min(count, len(available & prefer))


def test_tree_cache_follows_machine_lifetime() -> None:
    """The per-machine tree is dropped with its machine (the daemon rebuilds machines)."""
    m = grid(1, 2, 2, 2)
    take_cpus(m, m.all_cpus, 1)
    key = id(m)
    assert key in cpuallocator._trees
    del m
    gc.collect()
    assert key not in cpuallocator._trees
