"""Pod-level resources (KEP-2837): a pod that states CPU and memory for the pod, not per container.

The kubelet hands the runtime the pod's resources with the sandbox (NRI `PodSandbox.linux.
pod_resources`: the pod-level amounts when the pod states them, else the sum of its containers')
and writes no requests or limits into the cgroups of containers that state none: CPU shares 2,
no quota, no memory limit. Such a container would be placed as if it asked for nothing. Here it
is placed with the pod's budget instead: the pod's resources less what its other containers
state themselves (`budget`).

One container of a pod holds the budget: the first created of those that state nothing (at a
restart, the earliest by creation time, then id). Others of the same pod that state nothing
share CPUs as before, asking for nothing; the budget is not split among them, since the kubelet
does not split it either (they all run within the pod's cgroup). When the pod is resized in place
(NRI `UpdatePodSandbox`), the holder is placed again with the new budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from nri_topology.policy.intake.request import milli_to_shares, shares_to_milli
from nri_topology.policy.types import ContainerInfo, PodInfo, Resources


def states_none(res: Resources) -> bool:
    """Whether a container's cgroup settings state no request or limit of its own: shares at
    the kubelet's minimum (or unset), no CPU quota, no memory limit."""
    return (
        (res.cpu_shares is None or res.cpu_shares <= 2)
        and not (res.cpu_quota and res.cpu_quota > 0)
        and not (res.memory_limit and res.memory_limit > 0)
    )


def _quota_milli(res: Resources) -> int | None:
    if not (res.cpu_quota and res.cpu_quota > 0 and res.cpu_period and res.cpu_period > 0):
        return None
    return -(-res.cpu_quota * 1000 // res.cpu_period)


def budget(pod: Resources, others: Iterable[Resources]) -> Resources:
    """The pod's resources less those its other containers state: the CPU request (as shares),
    the CPU limit (as a quota over the pod's period) and the memory limit; an amount the pod
    does not state stays unset, one the others use up entirely becomes the least the kubelet
    writes (shares 2, no quota or memory limit)."""
    others = list(others)
    milli = shares_to_milli(pod.cpu_shares) - sum(shares_to_milli(o.cpu_shares) for o in others)
    shares = None if pod.cpu_shares is None else milli_to_shares(max(milli, 0))
    quota = period = None
    limit = _quota_milli(pod)
    if limit is not None and pod.cpu_period:
        left = limit - sum(_quota_milli(o) or 0 for o in others)
        if left > 0:
            quota, period = left * pod.cpu_period // 1000, pod.cpu_period
    memory = None
    if pod.memory_limit and pod.memory_limit > 0:
        left = pod.memory_limit - sum(o.memory_limit or 0 for o in others)
        memory = left if left > 0 else None
    used: dict[int, int] = {}
    for o in others:
        for size, amount in o.hugepages:
            used[size] = used.get(size, 0) + amount
    huge = tuple((size, amount - used.get(size, 0)) for size, amount in pod.hugepages)
    return Resources(
        cpu_shares=shares,
        cpu_quota=quota,
        cpu_period=period,
        memory_limit=memory,
        hugepages=tuple((size, amount) for size, amount in huge if amount > 0),
    )


def holder(pod: PodInfo, containers: Iterable[ContainerInfo]) -> str | None:
    """The container of `pod` that holds its budget: of those stating nothing, the earliest
    created (then by id); None when the pod states no resources or none states nothing."""
    if pod.resources is None:
        return None
    quiet = [c for c in containers if c.pod_id == pod.id and states_none(c.resources)]
    if not quiet:
        return None
    return min(quiet, key=lambda c: (c.created_at, c.id)).id


def with_budget(
    pod: PodInfo, container: ContainerInfo, siblings: Iterable[ContainerInfo]
) -> ContainerInfo:
    """`container` with the pod's budget as its resources when it holds it (`holder`, among
    itself and `siblings`, the pod's other containers), else as it is. Its cpuset stays."""
    siblings = [s for s in siblings if s.id != container.id and s.pod_id == pod.id]
    if pod.resources is None or holder(pod, [container, *siblings]) != container.id:
        return container
    stated = [s.resources for s in siblings if not states_none(s.resources)]
    own = container.resources
    given = replace(
        budget(pod.resources, stated), cpuset_cpus=own.cpuset_cpus, cpuset_mems=own.cpuset_mems
    )
    return replace(container, resources=given)
