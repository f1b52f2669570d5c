"""The kubelet's arithmetic from a pod spec to what the runtime reports, value by value.

Expected values follow the kubelet's own rules (`GetPodQOS`, its CPU shares and quota helpers,
`GetContainerOOMScoreAdjust`), worked by hand; the memory capacity is 64 GiB throughout.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_topology.kubelet.linux_resources import (
    Amounts,
    cgroup_parent,
    cpu_quota,
    oom_score_adj,
    qos_class,
    resources,
)
from nri_topology.policy.intake.request import milli_to_shares
from nri_topology.policy.types import QoS, Resources

GIB = 1 << 30
CAPACITY = 64 * GIB


@pytest.mark.parametrize(
    ("milli", "shares"),
    [(0, 2), (1, 2), (2, 2), (3, 3), (100, 102), (250, 256), (1000, 1024), (2500, 2560),
     (256_000, 262144), (10**6, 262144)],
)  # fmt: skip
def test_cpu_shares(milli: int, shares: int) -> None:
    assert milli_to_shares(milli) == shares


@given(st.integers(3, 256_000))
def test_shares_give_back_the_request_within_a_milli_cpu(milli: int) -> None:
    """The policy recovers requests as round(shares*1000/1024); the loss stays under 1m."""
    assert abs(round(milli_to_shares(milli) * 1000 / 1024) - milli) <= 1


@pytest.mark.parametrize(
    ("milli", "quota"), [(0, None), (1, 1000), (9, 1000), (10, 1000), (11, 1100), (500, 50000),
                         (2000, 200000)],
)  # fmt: skip
def test_cpu_quota(milli: int, quota: int | None) -> None:
    assert cpu_quota(milli) == quota


@pytest.mark.parametrize(
    ("qos", "memory_request", "adj"),
    [
        (QoS.GUARANTEED, GIB, -997),
        (QoS.BEST_EFFORT, 0, 1000),
        (QoS.BURSTABLE, 0, 999),  # no memory request: 1000, kept below BestEffort
        (QoS.BURSTABLE, 1, 999),
        (QoS.BURSTABLE, -(-CAPACITY // 1000), 999),  # 1/1000 of the memory: 999 by the formula
        (QoS.BURSTABLE, CAPACITY // 1000, 999),  # just under: 1000, kept below BestEffort
        (QoS.BURSTABLE, GIB, 1000 - 1000 // 64),  # 985
        (QoS.BURSTABLE, CAPACITY // 2, 500),
        (QoS.BURSTABLE, CAPACITY - GIB, 16),
        (QoS.BURSTABLE, CAPACITY, 3),  # raised above any Guaranteed container
        (QoS.BURSTABLE, 2 * CAPACITY, 3),
    ],
)
def test_oom_score_adj(qos: QoS, memory_request: int, adj: int) -> None:
    assert oom_score_adj(qos, memory_request, CAPACITY) == adj


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([Amounts()], QoS.BEST_EFFORT),
        ([Amounts(), Amounts()], QoS.BEST_EFFORT),
        ([Amounts(1000, 1000, GIB, GIB)], QoS.GUARANTEED),
        ([Amounts(1000, 1000, GIB, GIB), Amounts(500, 500, GIB, GIB)], QoS.GUARANTEED),
        ([Amounts(1000, 1000, GIB, GIB), Amounts()], QoS.BURSTABLE),
        ([Amounts(500, 1000, GIB, GIB)], QoS.BURSTABLE),
        ([Amounts(1000, 1000, GIB // 2, GIB)], QoS.BURSTABLE),
        ([Amounts(1000, 1000)], QoS.BURSTABLE),  # no memory limit
        ([Amounts(memory_request=GIB)], QoS.BURSTABLE),
        ([Amounts(cpu_limit=1000)], QoS.BURSTABLE),
    ],
)
def test_qos_class(containers: list[Amounts], qos: QoS) -> None:
    assert qos_class(containers) is qos


@pytest.mark.parametrize(
    ("given_", "stored"),
    [
        ((None, None, None, None), Amounts()),
        ((None, 1000, None, GIB), Amounts(1000, 1000, GIB, GIB)),
        ((500, 1000, None, GIB), Amounts(500, 1000, GIB, GIB)),
        ((500, None, GIB, None), Amounts(500, 0, GIB, 0)),
        ((0, 1000, None, None), Amounts(0, 1000, 0, 0)),  # a request given as 0 stays 0
    ],
)
def test_a_request_left_out_is_the_limit(given_: tuple[int | None, ...], stored: Amounts) -> None:
    assert Amounts.defaulted(*given_) == stored


@pytest.mark.parametrize(
    ("amounts", "expected"),
    [
        (Amounts(), Resources(cpu_shares=2, cpu_period=100000)),
        (
            Amounts(2000, 2000, GIB, GIB),
            Resources(cpu_shares=2048, cpu_quota=200000, cpu_period=100000, memory_limit=GIB),
        ),
        (
            Amounts(250, 1500, GIB // 2, GIB),
            Resources(cpu_shares=256, cpu_quota=150000, cpu_period=100000, memory_limit=GIB),
        ),
        (Amounts(100, 0, GIB, 0), Resources(cpu_shares=102, cpu_period=100000)),
    ],
)
def test_resources_as_the_runtime_reports_them(amounts: Amounts, expected: Resources) -> None:
    assert resources(amounts) == expected


@pytest.mark.parametrize(
    ("qos", "parent"),
    [
        (QoS.GUARANTEED, "/kubepods/podU"),
        (QoS.BURSTABLE, "/kubepods/burstable/podU"),
        (QoS.BEST_EFFORT, "/kubepods/besteffort/podU"),
    ],
)
def test_cgroup_parent_carries_the_qos(qos: QoS, parent: str) -> None:
    assert cgroup_parent(qos, "U") == parent
    assert cgroup_parent(qos, "U", "/k").startswith("/k/")
