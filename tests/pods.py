"""Single-container pods as a kubelet hands them to the runtime, for the daemon's tests."""

from __future__ import annotations

from nri_topology.nri import api_pb2


def running_pair(key: str, guaranteed: bool) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    """Pod `p<key>` with its running container `c<key>`: Guaranteed with 2 CPUs and 64 MiB, or
    Burstable with a tenth of a CPU, in the cgroup settings the kubelet derives for them."""
    pod = api_pb2.PodSandbox(id=f"p{key}", name=f"pod{key}", namespace="work", uid=f"u{key}")
    pod.linux.cgroup_parent = f"/kubepods/{'' if guaranteed else 'burstable/'}podu{key}"
    ctr = api_pb2.Container(
        id=f"c{key}", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
    )
    res = ctr.linux.resources
    if guaranteed:
        res.cpu.shares.value = 2048
        res.cpu.quota.value = 200_000
        res.cpu.period.value = 100_000
        res.memory.limit.value = 64 << 20
    else:
        res.cpu.shares.value = 102
    return pod, ctr
