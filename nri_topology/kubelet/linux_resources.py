"""What the kubelet derives from a pod spec for the runtime: QoS class, CPU shares, CFS quota and
period, memory limit, oom_score_adj and the pod's cgroup parent.

The policy sees containers only through these values (over NRI), so the simulator, the test
runtime's pods, the benchmarks and the end-to-end pods all make them here, by the kubelet's own
rules: the QoS class as `GetPodQOS` decides it, shares and quota as the kubelet's CPU helpers
compute them (cgroup v1 units, as the runtime reports them; the shares by the policy's
`milli_to_shares`, the one copy of that formula, which the policy reads back), and
`GetContainerOOMScoreAdjust`.
Amounts are as the API server stores them: a request left out is the limit, and 0 means not set
(as the kubelet treats a zero quantity).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nri_topology.policy.intake.request import milli_to_shares
from nri_topology.policy.types import QoS, Resources

PERIOD_US = 100_000  # the CFS period the kubelet sets for every container
MIN_QUOTA_US = 1000  # the kernel's smallest quota
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000


@dataclass(frozen=True, slots=True)
class Amounts:
    """One container's requests and limits (milli-CPU, bytes; 0 = not set)."""

    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0

    @classmethod
    def defaulted(
        cls,
        cpu_request: int | None = None,
        cpu_limit: int | None = None,
        memory_request: int | None = None,
        memory_limit: int | None = None,
    ) -> Amounts:
        """As the API server stores them: a request left out (None) is the limit."""
        return cls(
            (cpu_limit if cpu_request is None else cpu_request) or 0,
            cpu_limit or 0,
            (memory_limit if memory_request is None else memory_request) or 0,
            memory_limit or 0,
        )


def qos_class(containers: Iterable[Amounts]) -> QoS:
    """The pod's QoS class: BestEffort without any CPU or memory request or limit; Guaranteed
    when every container has CPU and memory limits equal to its requests; else Burstable."""
    given = False
    guaranteed = True
    for c in containers:
        given = given or bool(c.cpu_request or c.cpu_limit or c.memory_request or c.memory_limit)
        if not (
            c.cpu_limit
            and c.memory_limit
            and c.cpu_request == c.cpu_limit
            and c.memory_request == c.memory_limit
        ):
            guaranteed = False
    if not given:
        return QoS.BEST_EFFORT
    return QoS.GUARANTEED if guaranteed else QoS.BURSTABLE


def cpu_quota(limit_milli: int) -> int | None:
    """CFS quota for a CPU limit over the kubelet's period, at least 1 ms; None without a limit."""
    if not limit_milli:
        return None
    return max(MIN_QUOTA_US, limit_milli * PERIOD_US // 1000)


def oom_score_adj(qos: QoS, memory_request: int, memory_capacity: int) -> int:
    """The container's oom_score_adj: -997 Guaranteed, 1000 BestEffort; Burstable
    1000 - 1000 * request / capacity, raised to 3 (above any Guaranteed container) and never
    1000 (below any BestEffort one): 999 without a memory request."""
    if qos is QoS.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QoS.BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    adj = 1000 - 1000 * memory_request // memory_capacity
    adj = max(adj, 1000 + GUARANTEED_OOM_SCORE_ADJ)
    return BEST_EFFORT_OOM_SCORE_ADJ - 1 if adj == BEST_EFFORT_OOM_SCORE_ADJ else adj


def resources(amounts: Amounts) -> Resources:
    """The container's Linux resources as the runtime reports them to the plugin."""
    return Resources(
        cpu_shares=milli_to_shares(amounts.cpu_request),
        cpu_quota=cpu_quota(amounts.cpu_limit),
        cpu_period=PERIOD_US,
        memory_limit=amounts.memory_limit or None,
    )


def cgroup_parent(qos: QoS, uid: str, root: str = "/kubepods") -> str:
    """The pod's cgroup (cgroupfs driver): Burstable and BestEffort pods under their class's."""
    if qos is QoS.GUARANTEED:
        return f"{root}/pod{uid}"
    return f"{root}/{qos.value.lower()}/pod{uid}"
