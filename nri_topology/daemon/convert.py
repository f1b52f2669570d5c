"""NRI protobuf messages to policy values and back.

The policy never sees protobuf; this module is the only place that knows where in an NRI message
a pod's cgroup parent or a container's cpuset lives (docs/protocol.md §5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_topology.nri import api_pb2
from nri_topology.nri.stub import EncodedUpdates, delimited
from nri_topology.policy.accounts import hugepages
from nri_topology.policy.types import (
    ContainerInfo,
    Decision,
    HintSource,
    Placement,
    PodInfo,
    Resources,
    Update,
)
from nri_topology.topology import cpuset

ENV_PREFIX = "NRI_TOPOLOGY_"
"""Environment variables describing the placement, given to each new container unless disabled."""

_UPDATES_MAX = 4096
# Update messages and their wire forms by placement (its fields: the generated __hash__/__eq__
# of Placement run in Python, and ignore_failure), then by container; `_updates_held` counts
# them all, and past `_UPDATES_MAX` they are forgotten together.
_PlacementKey = tuple[frozenset[int] | None, frozenset[int] | None, int | None, bool]
_updates: dict[_PlacementKey, dict[str, tuple[api_pb2.ContainerUpdate, bytes]]] = {}
_updates_held = 0
_NO_UPDATES = EncodedUpdates.of((), ())  # most replies: read-only like the remembered ones
_arena = api_pb2.UpdateContainersRequest()
"""Holds the messages of `_updates`: added to one message they share its memory, where one made
on its own takes a block of its own (about 2 KB each, most of the cache's resident size)."""


def _plain(field: Mapping[str, str]) -> dict[str, str]:
    """A protobuf map field as a dict: through `items()`, several times cheaper than `dict()`
    on the map (which goes through the Mapping ABC), and nothing for an empty one."""
    return dict(field.items()) if field else {}


def resources(linux: api_pb2.LinuxResources) -> Resources:
    """The runtime's view of a container's Linux resources; None where a wrapper is absent."""
    cpu, memory = linux.cpu, linux.memory
    # Here and below, values in field order: keyword arguments cost a visible share of the
    # conversion, which every CreateContainer pays.
    return Resources(
        cpu.shares.value if cpu.HasField("shares") else None,
        cpu.quota.value if cpu.HasField("quota") else None,
        cpu.period.value if cpu.HasField("period") else None,
        memory.limit.value if memory.HasField("limit") else None,
        cpu.cpus,
        cpu.mems,
        _hugepage_limits(linux.hugepage_limits) if linux.hugepage_limits else (),
    )


def _hugepage_limits(limits: Iterable[api_pb2.HugepageLimit]) -> tuple[tuple[int, int], ...]:
    """(page size kB, bytes) of each hugetlb limit whose page size reads as one (`2MB`)."""
    out = []
    for limit in limits:
        size = hugepages.page_size_kb(limit.page_size)
        if size is not None:
            out.append((size, limit.limit))
    return tuple(out)


def pod_info(
    pod: api_pb2.PodSandbox, resources_now: api_pb2.LinuxResources | None = None
) -> PodInfo:
    """A pod as the policy sees it; `resources_now` overrides the pod's resources (an
    UpdatePodSandbox carries the new ones beside the pod)."""
    linux = pod.linux
    if resources_now is not None:
        pod_resources = _pod_resources(resources_now)
    else:
        pod_resources = (
            _pod_resources(linux.pod_resources) if linux.HasField("pod_resources") else None
        )
    return PodInfo(
        pod.id,
        pod.name,
        pod.namespace,
        pod.uid,
        _plain(pod.labels),
        _plain(pod.annotations),
        linux.cgroup_parent,
        pod_resources,
    )


def _pod_resources(linux: api_pb2.LinuxResources) -> Resources | None:
    """The pod's resources (KEP-2837), None when the runtime reports no amount at all."""
    res = resources(linux)
    if res.cpu_shares is None and res.cpu_quota is None and res.memory_limit is None:
        return None if not res.hugepages else res
    return res


def container_info(
    ctr: api_pb2.Container, linux: api_pb2.LinuxResources | None = None
) -> ContainerInfo:
    """A container as the policy sees it; `linux` overrides its resources (UpdateContainer)."""
    own = ctr.linux
    return ContainerInfo(
        ctr.id,
        ctr.pod_sandbox_id,
        ctr.name,
        resources(own.resources if linux is None else linux),
        _plain(ctr.labels),
        _plain(ctr.annotations),
        own.oom_score_adj.value if own.HasField("oom_score_adj") else None,
        ctr.created_at,
    )


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A device a container uses, as the runtime names it: a Linux device or a mounted node."""

    source: HintSource
    path: str  # in the container for devices, on the host for mounts
    kind: str = ""  # "c", "b", "u" for Linux devices; "" for a mount (stat the path)
    major: int = 0
    minor: int = 0


def _writable(rules: Iterable[api_pb2.LinuxDeviceCgroup], d: api_pb2.LinuxDevice) -> bool:
    """Whether the device cgroup rules (the last matching one decides) let the container write
    to the device; without rules the runtime did not say, so it may."""
    verdict = True
    for r in rules:
        if r.type not in ("", "a", d.type):
            continue
        if r.HasField("major") and r.major.value != d.major:
            continue
        if r.HasField("minor") and r.minor.value != d.minor:
            continue
        verdict = r.allow and ("w" in r.access or not r.access)
    return verdict


def _all_devices(rules: Iterable[api_pb2.LinuxDeviceCgroup]) -> bool:
    """A rule allowing every device: a privileged container, which lists every host device."""
    return any(
        r.allow and r.type in ("", "a") and not r.HasField("major") and not r.HasField("minor")
        for r in rules
    )


def device_refs(ctr: api_pb2.Container) -> tuple[DeviceRef, ...]:
    """The devices the container may write to, and the device nodes it mounts read-write.

    As in the reference implementation, read-only devices and mounts are left out: a device the
    container only reads (a disk image, a config) is rarely what it should be placed near. A
    privileged container lists every device of the host, which says nothing about what it uses,
    so its devices are left out too.
    """
    devices = ctr.linux.devices
    refs = []
    if devices:  # most containers have none: their cgroup rules need no look
        rules = ctr.linux.resources.devices
        if not _all_devices(rules):
            refs = [
                DeviceRef(HintSource.DEVICES, d.path, d.type, d.major, d.minor)
                for d in devices
                if d.type in ("c", "b", "u") and _writable(rules, d)
            ]
    refs += [
        DeviceRef(HintSource.MOUNTS, m.source)
        for m in ctr.mounts
        if m.source.startswith("/dev/") and "ro" not in m.options
    ]
    return tuple(refs)


def _fill(out: api_pb2.LinuxResources, placement: Placement) -> None:
    """Set the fields of `placement` in `out`; unset fields are left to the runtime."""
    cpu = out.cpu  # each access to a submessage makes a new wrapper object: once, not thrice
    if placement.cpus:
        cpu.cpus = cpuset.text(placement.cpus)
    if placement.mems:
        cpu.mems = cpuset.text(placement.mems)
    if placement.cpu_shares is not None:
        cpu.shares.value = placement.cpu_shares


def linux_resources(placement: Placement) -> api_pb2.LinuxResources:
    """The LinuxResources carrying a placement; unset fields are left to the runtime."""
    out = api_pb2.LinuxResources()
    _fill(out, placement)
    return out


def container_update(
    container_id: str, placement: Placement, ignore_failure: bool = False
) -> api_pb2.ContainerUpdate:
    update = api_pb2.ContainerUpdate(container_id=container_id, ignore_failure=ignore_failure)
    _fill(update.linux.resources, placement)  # in place: no message built and copied
    return update


def updates(items: Iterable[Update], ignore_failure: bool = False) -> EncodedUpdates:
    """Updates of other containers; `ignore_failure` for those that may have exited meanwhile.

    One entry per container (the last placement wins): the runtime treats a second entry for
    the same container in one reply as a second owner of its cpuset and fails the request.

    The messages are remembered and shared between calls, so treat them as read-only: shared
    containers move between the same few cpusets as exclusive grants come and go, and building
    dozens of messages per reply afresh cost much more than looking them up. Their encoding is
    remembered with them, so the stub need not copy them into the reply.
    """
    global _arena, _updates_held
    latest = {u.container_id: u.placement for u in items}
    if not latest:
        return _NO_UPDATES
    messages, encoded = [], []
    last: Placement | None = None
    key: _PlacementKey = (None, None, None, ignore_failure)
    held: dict[str, tuple[api_pb2.ContainerUpdate, bytes]] = {}
    for cid, placement in latest.items():
        if placement is not last:  # the engine gives the updates to one shared set one object
            last = placement
            key = (placement.cpus, placement.mems, placement.cpu_shares, ignore_failure)
            held = _updates.setdefault(key, {})
        pair = held.get(cid)
        if pair is None:
            if _updates_held >= _UPDATES_MAX:
                _updates.clear()
                _updates_held = 0
                _arena = api_pb2.UpdateContainersRequest()  # freed with its last message
                held = _updates[key] = {}
            message = _arena.update.add(container_id=cid, ignore_failure=ignore_failure)
            _fill(message.linux.resources, placement)
            pair = held[cid] = (message, delimited(message))
            _updates_held += 1
        messages.append(pair[0])
        encoded.append(pair[1])
    return EncodedUpdates.of(messages, encoded)


def exposure(decision: Decision, prefix: str = ENV_PREFIX) -> dict[str, str]:
    """The environment describing a placement to the workload itself."""
    placement = decision.placement
    env = {f"{prefix}POOL": decision.pool, f"{prefix}KIND": str(decision.kind)}
    if placement.cpus:
        env[f"{prefix}CPUS"] = cpuset.text(placement.cpus)
    if placement.mems:
        env[f"{prefix}MEMS"] = cpuset.text(placement.mems)
    if decision.exclusive:  # most often the container's whole cpuset, whose text is known
        env[f"{prefix}EXCLUSIVE_CPUS"] = cpuset.text(decision.exclusive)
    return env


def adjustment(decision: Decision, env: Mapping[str, str]) -> api_pb2.ContainerAdjustment:
    """The creation adjustment: cpuset (and shares) of the new container, plus `env`."""
    adjust = api_pb2.ContainerAdjustment()
    _fill(adjust.linux.resources, decision.placement)
    add = adjust.env.add  # the repeated field's wrapper, made once
    for key, value in env.items():
        add(key=key, value=value)
    return adjust
