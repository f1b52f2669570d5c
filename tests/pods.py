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


def new_pod(i: int, qos: str) -> api_pb2.PodSandbox:
    """Pod `p<i>` under its QoS class's cgroup (`qos`: "", "burstable/" or "besteffort/")."""
    pod = api_pb2.PodSandbox(id=f"p{i}", name=f"pod{i}", namespace="work", uid=f"u{i}")
    pod.linux.cgroup_parent = f"/kubepods/{qos}podu{i}"
    return pod


def new_container(i: int, cpus: int = 0, cgroups_path: str = "") -> api_pb2.Container:
    """Container `c<i>` of pod `p<i>`, not created yet: Guaranteed with `cpus` CPUs and 64 MiB,
    or with no request (0)."""
    ctr = api_pb2.Container(id=f"c{i}", pod_sandbox_id=f"p{i}", name="app")
    ctr.linux.cgroups_path = cgroups_path
    res = ctr.linux.resources
    if cpus:
        res.cpu.shares.value = cpus * 1024
        res.cpu.quota.value = cpus * 100_000
        res.cpu.period.value = 100_000
        res.memory.limit.value = 64 << 20
    else:
        res.cpu.shares.value = 2
    return ctr
