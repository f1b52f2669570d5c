"""Workload files: pods created, resized and removed in order, checked before anything runs.

A workload is written like pod specs (requests, limits, annotations, labels) and is turned into
exactly what the runtime would hand the plugin over NRI: a cgroup parent that carries the QoS
class, CPU shares from the request, quota and period from the limit, a memory limit and an OOM
score adjustment. So the policy sees in simulation what it would see on a node.
The format is documented in docs/simulate.md.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from msgspec import Meta, Struct

from nri_topology.config.validate import Before, Invalid, convert, dotted
from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from nri_topology.policy.intake.request import parse_duration
from nri_topology.policy.types import (
    ContainerInfo,
    HintSource,
    PodInfo,
    QoS,
    TopologyHint,
)
from nri_topology.quantity import cpu_milli, memory_bytes


class WorkloadError(ValueError):
    """A workload file that cannot be run; the message names the step and the key."""


def _cpu(value: object) -> int:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return cpu_milli(value)
    raise ValueError(f"expected a CPU quantity such as '500m' or 2, got {value!r}")


def _memory(value: object) -> int:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return memory_bytes(value)
    raise ValueError(f"expected a memory quantity such as '512Mi', got {value!r}")


MilliCpu = Annotated[int, Before(_cpu)]
Bytes = Annotated[int, Before(_memory)]
Name = Annotated[
    str, Meta(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]


class _Strict(Struct, forbid_unknown_fields=True, frozen=True):
    pass


class ResourceList(_Strict, kw_only=True):
    cpu: MilliCpu | None = None
    memory: Bytes | None = None


class DeviceSpec(_Strict, kw_only=True):
    """A device the container uses and the NUMA nodes it sits on (what the daemon would find
    in sysfs or from the kubelet)."""

    name: Annotated[str, Meta(min_length=1)]
    numa: Annotated[list[Annotated[int, Meta(ge=0)]], Meta(min_length=1)]
    source: HintSource = HintSource.DEVICES


class ContainerSpec(_Strict, kw_only=True):
    name: Name
    requests: ResourceList = ResourceList()
    limits: ResourceList = ResourceList()
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    devices: list[DeviceSpec] = []

    def __post_init__(self) -> None:
        for key in ("cpu", "memory"):
            req, lim = getattr(self.requests, key), getattr(self.limits, key)
            if req is not None and lim is not None and req > lim:
                raise ValueError(f"requests.{key} is larger than limits.{key}")

    def effective_requests(self) -> ResourceList:
        """Requests as the API server stores them: a missing request defaults to the limit."""
        return ResourceList(
            cpu=self.requests.cpu if self.requests.cpu is not None else self.limits.cpu,
            memory=self.requests.memory if self.requests.memory is not None else self.limits.memory,
        )


class CreateSpec(_Strict, kw_only=True):
    pod: Name
    namespace: Name = "default"
    qos: QoS | None = None  # optional statement of intent, checked against the resources
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    containers: Annotated[list[ContainerSpec], Meta(min_length=1)]

    def __post_init__(self) -> None:
        names = [c.name for c in self.containers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"containers: duplicate names {dupes}")
        derived = qos_class(self.containers)
        if self.qos is not None and self.qos is not derived:
            raise ValueError(
                f"qos: says {self.qos.value} but the requests and limits make the pod "
                f"{derived.value}"
            )


class RemoveSpec(_Strict, kw_only=True):
    pod: Name
    namespace: Name = "default"
    container: Name | None = None  # None: the whole pod


class ResizeSpec(_Strict, kw_only=True):
    pod: Name
    namespace: Name = "default"
    container: Name
    requests: ResourceList = ResourceList()
    limits: ResourceList = ResourceList()


def _duration(value: object) -> str:
    if isinstance(value, str):
        ns = parse_duration(value)
        if ns is not None and ns > 0:
            return value.strip()
    raise ValueError(f"expected a positive duration such as '60s' or '1m30s', got {value!r}")


Duration = Annotated[str, Before(_duration)]
ACTIONS = ("create", "remove", "resize", "wait")


class Step(_Strict, kw_only=True):
    create: CreateSpec | None = None
    remove: RemoveSpec | None = None
    resize: ResizeSpec | None = None
    wait: Duration | None = None  # simulated time passes: due cold starts finish
    note: str = ""
    expect_error: bool = False

    def __post_init__(self) -> None:
        given = [k for k in ACTIONS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of {', '.join(ACTIONS)} (got {', '.join(given) or 'none'})"
            )

    @property
    def action(self) -> Literal["create", "remove", "resize", "wait"]:
        if self.create is not None:
            return "create"
        if self.remove is not None:
            return "remove"
        return "resize" if self.resize is not None else "wait"

    @property
    def wait_ns(self) -> int:
        """How long a wait step lets pass, in nanoseconds (0 for other steps)."""
        if self.wait is None:
            return 0
        return parse_duration(self.wait) or 0

    @property
    def target(self) -> str:
        """`namespace/pod`, `namespace/pod/container` or the wait's duration, for display."""
        if self.wait is not None:
            return self.wait
        spec = self.create or self.remove or self.resize
        assert spec is not None
        base = f"{spec.namespace}/{spec.pod}"
        container = getattr(spec, "container", None)
        return f"{base}/{container}" if container else base


class Workload(_Strict, kw_only=True):
    name: str = ""
    description: str = ""
    machine: str | None = None  # bundled machine the workload was written for
    steps: Annotated[list[Step], Meta(min_length=1)]


def qos_class(containers: list[ContainerSpec]) -> QoS:
    """The Kubernetes QoS class of a pod from its containers' requests and limits."""
    return kubelet.qos_class(amounts(c.effective_requests(), c.limits) for c in containers)


def amounts(requests: ResourceList, limits: ResourceList) -> Amounts:
    """The kubelet's amounts of (already defaulted) requests and limits."""
    return Amounts(requests.cpu or 0, limits.cpu or 0, requests.memory or 0, limits.memory or 0)


@dataclass(frozen=True, slots=True)
class RunningContainer:
    """A container of the simulated node as the runtime would describe it."""

    pod: PodInfo
    info: ContainerInfo
    qos: QoS
    requests: ResourceList
    limits: ResourceList


def pod_id(namespace: str, pod: str) -> str:
    return f"{namespace}/{pod}"


def container_id(namespace: str, pod: str, container: str) -> str:
    return f"{namespace}/{pod}/{container}"


def create_containers(
    spec: CreateSpec, *, step: int, memory_capacity: int
) -> tuple[RunningContainer, ...]:
    """The pod sandbox and containers the runtime would report for a create step."""
    qos = qos_class(spec.containers)
    uid = str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"nri-topology-simulate/{spec.namespace}/{spec.pod}/{step}")
    )
    pod = PodInfo(
        id=pod_id(spec.namespace, spec.pod),
        name=spec.pod,
        namespace=spec.namespace,
        uid=uid,
        labels=dict(spec.labels),
        annotations=dict(spec.annotations),
        cgroup_parent=kubelet.cgroup_parent(qos, uid),
    )
    out = []
    for index, c in enumerate(spec.containers):
        requests = c.effective_requests()
        info = ContainerInfo(
            id=container_id(spec.namespace, spec.pod, c.name),
            pod_id=pod.id,
            name=c.name,
            resources=kubelet.resources(amounts(requests, c.limits)),
            labels=dict(c.labels),
            annotations=dict(c.annotations),
            oom_score_adj=kubelet.oom_score_adj(qos, requests.memory or 0, memory_capacity),
            created_at=step * 1_000_000_000 + index,
            hints=tuple(TopologyHint(d.source, d.name, frozenset(d.numa)) for d in c.devices),
        )
        out.append(
            RunningContainer(pod=pod, info=info, qos=qos, requests=requests, limits=c.limits)
        )
    return tuple(out)


def _merged(old: ResourceList, new: ResourceList) -> ResourceList:
    """Each value given in `new` replaces the one in `old` (values are already parsed)."""
    return ResourceList(
        cpu=new.cpu if new.cpu is not None else old.cpu,
        memory=new.memory if new.memory is not None else old.memory,
    )


def resized(running: RunningContainer, spec: ResizeSpec) -> RunningContainer:
    """The container after an in-place resize: each given value replaces the old one."""
    requests = _merged(running.requests, spec.requests)
    limits = _merged(running.limits, spec.limits)
    info = replace(running.info, resources=kubelet.resources(amounts(requests, limits)))
    return replace(running, requests=requests, limits=limits, info=info)


def _where(loc: tuple[int | str, ...]) -> str:
    """`("steps", 3, "create", "containers", 0, "name")` -> `step 4: create.containers[0].name`."""
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        step = f"step {loc[1] + 1}"
        return f"{step}: {dotted(loc[2:])}" if loc[2:] else step
    return dotted(loc)


def _check_sequence(workload: Workload) -> None:
    """Pods must exist before they are removed or resized, and not twice at once."""
    pods: dict[str, tuple[int, CreateSpec, set[str]]] = {}
    for number, step in enumerate(workload.steps, start=1):
        if step.create is not None:
            key = pod_id(step.create.namespace, step.create.pod)
            if key in pods:
                raise WorkloadError(
                    f"step {number}: create.pod: pod {key} already exists (created in step "
                    f"{pods[key][0]})"
                )
            pods[key] = (number, step.create, {c.name for c in step.create.containers})
            continue
        spec = step.remove or step.resize
        if spec is None:
            continue  # a wait touches no pod
        key = pod_id(spec.namespace, spec.pod)
        if key not in pods:
            raise WorkloadError(f"step {number}: {step.action}.pod: no pod {key} at this step")
        _, created, alive = pods[key]
        container = spec.container
        if container is not None and container not in alive:
            raise WorkloadError(
                f"step {number}: {step.action}.container: pod {key} has no running container "
                f"{container!r} (running: {', '.join(sorted(alive)) or 'none'})"
            )
        if step.resize is not None:
            _check_resize(number, created, step.resize)
        elif container is None:
            del pods[key]
        else:
            alive.discard(container)
            if not alive:
                del pods[key]


def _check_resize(number: int, created: CreateSpec, spec: ResizeSpec) -> None:
    """A resize must keep the pod's QoS class, as the API server demands."""
    old = next(c for c in created.containers if c.name == spec.container)
    new = ContainerSpec(
        name=old.name,
        requests=_merged(old.effective_requests(), spec.requests),
        limits=_merged(old.limits, spec.limits),
    )
    others = [new if c.name == spec.container else c for c in created.containers]
    before, after = qos_class(created.containers), qos_class(others)
    if before is not after:
        raise WorkloadError(
            f"step {number}: resize: would change the pod's QoS class from {before.value} to "
            f"{after.value}, which Kubernetes does not allow"
        )


def parse_workload(data: Any, *, origin: str = "workload") -> Workload:
    """Validate a decoded workload document; errors name the origin, the step and the key."""
    if not isinstance(data, dict):
        raise WorkloadError(f"{origin}: expected a mapping with 'steps' at the top level")
    try:
        workload = convert(Workload, data)
    except Invalid as exc:
        lines = [f"{_where(loc)}: {problem}" for loc, problem in exc.problems]
        raise WorkloadError(f"{origin}: " + "; ".join(lines)) from None
    try:
        _check_sequence(workload)
    except WorkloadError as exc:
        raise WorkloadError(f"{origin}: {exc}") from None
    return workload


def load_workload(path: Path) -> Workload:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise WorkloadError(f"{path}: {exc}") from None
    return parse_workload(data, origin=str(path))


def bundled_workload_names() -> tuple[str, ...]:
    folder = resources.files("nri_topology") / "data" / "workloads"
    return tuple(
        sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))
    )


def load_bundled_workload(name: str) -> Workload:
    if name not in bundled_workload_names():
        raise WorkloadError(
            f"no bundled workload {name!r}; bundled: {', '.join(bundled_workload_names())}"
        )
    text = (resources.files("nri_topology") / "data" / "workloads" / f"{name}.yaml").read_text()
    return parse_workload(yaml.safe_load(text), origin=f"bundled workload {name}")
