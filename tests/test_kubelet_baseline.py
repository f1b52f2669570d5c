"""The benchmark's kubelet-static baseline packs exactly like the kubelet (kubelet-reference §6).

The baseline is only as fair as it is faithful: every default-option case of
`takeByTopologyNUMAPacked` (§6.2 #1-#16) and the static-policy cases that need no policy
option (§6.4 #42, #50) must give the kubelet's own answer.
"""

from __future__ import annotations

import pytest

from benchmarks.kubelet_static import KubeletStatic
from nri_topology.topology.cpuset import parse
from tests.test_cpuallocator import PACKED as ALLOCATOR_CASES
from tests.test_cpuallocator import TOPOLOGIES

# The default-option cases of takeByTopologyNUMAPacked (§6.2 #2-#16); #17 on need an option.
PACKED = [c for c in ALLOCATOR_CASES if c[0] <= 16]


@pytest.mark.parametrize(
    ("case", "topo", "available", "count", "expected"), PACKED, ids=[f"#{c[0]}" for c in PACKED]
)
def test_packed_matches_the_kubelet(
    case: int, topo: str, available: str, count: int, expected: str
) -> None:
    kubelet = KubeletStatic(TOPOLOGIES[topo], frozenset())
    assert kubelet.take(parse(available), count) == parse(expected)


def test_more_than_available_is_refused() -> None:  # §6.2 #1
    kubelet = KubeletStatic(TOPOLOGIES["SingleSocketHT"], frozenset())
    with pytest.raises(
        ValueError, match="not enough cpus available to satisfy request: requested=5, available=4"
    ):
        kubelet.take(parse("0,2,4,6"), 5)


@pytest.mark.parametrize(("count", "expected"), [(1, "0"), (2, "0,4")])
def test_reservation_takes_the_lowest_core(count: int, expected: str) -> None:  # §1.2
    kubelet = KubeletStatic.with_reservation(TOPOLOGIES["SingleSocketHT"], count)
    assert kubelet.reserved == parse(expected)


def test_static_policy_finishes_the_reserved_core_and_gives_cpus_back() -> None:
    kubelet = KubeletStatic.with_reservation(TOPOLOGIES["SingleSocketHT"], 1)
    assert kubelet.allocate("a", 1) == {4}  # §6.4 #42: the sibling of the reserved CPU
    assert kubelet.default_cpuset == parse("0-3,5-7")
    assert kubelet.allocate("shared", 0) == parse("0-3,5-7")  # non-integer: the default set
    kubelet.release("a")
    assert kubelet.default_cpuset == parse("0-7")


def test_reserved_cpus_are_never_handed_out() -> None:  # §6.4 #50
    kubelet = KubeletStatic.with_reservation(TOPOLOGIES["SingleSocketHT"], 1)
    with pytest.raises(ValueError, match="requested=8, available=7"):
        kubelet.allocate("big", 8)
    assert kubelet.assignments == {}
