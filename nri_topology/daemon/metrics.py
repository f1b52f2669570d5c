"""Prometheus metrics of the plugin, in a registry of its own (never the process-global one).

Pool and container series are produced at scrape time from a view the daemon supplies, so they
always match the policy's current state and removed containers leave no stale series. Counters and
the latency histogram are updated by the daemon as events happen.

Prometheus conventions: base units (CPU in cores, memory in bytes, time in seconds); no label
whose value changes while its series lives (cpusets are shown by `nri-topology status`, not here);
every error reason exported from the start at 0 so that `rate()` and alerts see it before the first
error; no `_created` series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nri_topology.daemon.cgroupfs import Outcome
from nri_topology.policy.types import Degradation
from nri_topology.policy.views import Assignment, PoolView

PREFIX = "nri_topology"

_log = structlog.get_logger("nri_topology.metrics")

# From well under a decision's usual time (benchmarks/README.md) up to a large Synchronize;
# the runtime gives up after 2 s.
LATENCY_BUCKETS = (
    0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
)  # fmt: skip

# Every reason the daemon counts an error for; each is exported at 0 from the start.
ERROR_REASONS = (
    "cgroup_root",  # none of the runtime's containers has its cgroup under the cgroup root
    "checkpoint_implausible",  # checkpoint entries that contradict the runtime, dropped
    "checkpoint_write",  # the checkpoint could not be written
    "cold_start",  # the unsolicited update after a cold start failed
    "config",  # a configuration reload was rejected
    "nrt_publish",  # the NodeResourceTopology object could not be published
    "policy",  # the policy refused a container (the runtime sees the error)
    "restore",  # the checkpoint could not be read back
    "restore_failed",  # containers the checkpoint could not place again
    "update_failed",  # an UpdateContainers request failed
    "update_not_connected",  # an update was due while no runtime was connected
    "update_schedule",  # a decision's re-pins could not be handed to the update schedule
    "window_unfreed",  # a window closed because a re-pin was given up: its CPUs may be shared
)
RELOAD_RESULTS = ("applied", "rejected")
# What became of other containers' re-pins sent after the reply (docs/architecture.md).
REPIN_OUTCOMES = ("sent", "retried", "given_up", "dropped", "held_for_reply", "rode_reply")
# What became of re-pins written into other containers' cgroups (cgroupfs.Outcome).
CGROUP_WRITE_OUTCOMES = tuple(o.value for o in Outcome)
# How updates apart from a reply travel (plugin.Transport).
TRANSPORTS = ("cri", "nri", "reply")
# Why placements of containers the runtime no longer reports were released.
ORPHAN_REASONS = ("pod_stopped", "pod_removed", "not_reported")
# From a window closed at once to the kubelet's reconcile period.
WINDOW_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# One UpdateContainers call: the runtime's other NRI events may wait this long behind it.
BATCH_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
# NRI requests the plugin handles, and the policy operations it times: exported at 0 as well.
REQUEST_METHODS = (
    "Configure",
    "Synchronize",
    "RunPodSandbox",
    "UpdatePodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "CreateContainer",
    "StartContainer",
    "UpdateContainer",
    "StopContainer",
    "RemoveContainer",
)
OPERATIONS = ("create", "resize", "release", "restore", "reconfigure", "cold_start")

# Label values of the annotation counters, every one exported from the start (at 0).
ANNOTATION_WARNINGS = ("untrusted", "claim_cut", "unknown_key", "unsupported_key")
ANNOTATION_LIMITS = (
    "size",
    "depth",
    "nodes",
    "aliases",
    "number",
    "rules",
    "values",
    "globs",
    "pattern",
    "invalid",  # no limit broken: a value that is simply not valid
)


@dataclass(frozen=True, slots=True)
class MemoryStat:
    capacity: int  # bytes
    free: int
    assigned: int


@dataclass(frozen=True, slots=True)
class PoolStat:
    """One pool as metrics show it; CPU amounts in milli-CPU (exported in cores)."""

    name: str
    cpu_capacity: int
    cpu_free: int
    cpu_assigned: int
    containers: int
    memory: Mapping[str, MemoryStat] = field(default_factory=dict)  # by tier name


@dataclass(frozen=True, slots=True)
class ContainerStat:
    """One container's assignment as metrics show it."""

    id: str
    name: str
    pod: str
    namespace: str
    pool: str
    kind: str
    cpu_count: int  # CPUs in its cpuset
    exclusive_cpus: int  # of those, CPUs it holds alone


@dataclass(frozen=True, slots=True)
class StateView:
    pools: tuple[PoolStat, ...] = ()
    containers: tuple[ContainerStat, ...] = ()


def from_policy(pools: Iterable[PoolView], assignments: Iterable[Assignment]) -> StateView:
    """The metrics view of the policy's own pool and assignment views."""
    return StateView(
        pools=tuple(
            PoolStat(
                name=p.name,
                cpu_capacity=p.capacity_milli,
                cpu_free=p.free_milli,
                cpu_assigned=p.assigned_milli,
                containers=p.containers,
                memory={
                    str(tier): MemoryStat(m.capacity, m.free, m.assigned)
                    for tier, m in p.memory.items()
                },
            )
            for p in pools
        ),
        containers=tuple(
            ContainerStat(
                id=a.container_id,
                name=a.name,
                pod=a.pod_name,
                namespace=a.namespace,
                pool=a.pool,
                kind=str(a.kind),
                cpu_count=len(a.cpus or ()),
                exclusive_cpus=len(a.exclusive),
            )
            for a in assignments
        ),
    )


class _StateCollector(Collector):
    """Turns the daemon's current `StateView` into gauge families at scrape time."""

    def __init__(self, view: Callable[[], StateView]) -> None:
        self._view = view

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            state = self._view()
        except Exception:
            # A broken view must not take the counters and the latency histogram with it.
            _log.exception("cannot build pool and container metrics")
            return
        yield from _pool_families(state.pools)
        yield from _container_families(state.containers)


def _gauge(name: str, doc: str, labels: list[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=labels, unit=unit)


def _pool_families(pools: Iterable[PoolStat]) -> Iterator[GaugeMetricFamily]:
    cpu = {
        key: _gauge(f"pool_cpu_{key}", doc, ["pool"], unit="cores")
        for key, doc in (
            ("capacity", "CPU capacity of the pool."),
            ("free", "CPU of the pool not assigned to any container."),
            ("assigned", "CPU of the pool assigned to containers."),
        )
    }
    mem = {
        key: _gauge(f"pool_memory_{key}", doc, ["pool", "tier"], unit="bytes")
        for key, doc in (
            ("capacity", "Memory capacity of the pool per tier."),
            ("free", "Memory of the pool per tier not assigned to containers."),
            ("assigned", "Memory of the pool per tier assigned to containers."),
        )
    }
    count = _gauge("pool_containers", "Containers placed in the pool.", ["pool"])
    for pool in pools:
        cpu["capacity"].add_metric([pool.name], _cores(pool.cpu_capacity))
        cpu["free"].add_metric([pool.name], _cores(pool.cpu_free))
        cpu["assigned"].add_metric([pool.name], _cores(pool.cpu_assigned))
        count.add_metric([pool.name], pool.containers)
        for tier, stat in sorted(pool.memory.items()):
            mem["capacity"].add_metric([pool.name, tier], stat.capacity)
            mem["free"].add_metric([pool.name, tier], stat.free)
            mem["assigned"].add_metric([pool.name, tier], stat.assigned)
    yield from cpu.values()
    yield from mem.values()
    yield count


def _cores(milli: int) -> float:
    return milli / 1000


def _container_families(containers: Iterable[ContainerStat]) -> Iterator[GaugeMetricFamily]:
    # Labels fixed for the container's life; its cpuset is shown by `nri-topology status`.
    labels = ["container_id", "container", "pod", "namespace", "pool", "kind"]
    cpus = _gauge("container_cpus", "CPUs in the container's cpuset.", labels)
    exclusive = _gauge(
        "container_exclusive_cpus", "CPUs the container holds alone.", ["container_id", "pool"]
    )
    for c in containers:
        cpus.add_metric([c.id, c.name, c.pod, c.namespace, c.pool, c.kind], c.cpu_count)
        exclusive.add_metric([c.id, c.pool], c.exclusive_cpus)
    yield cpus
    yield exclusive


class Metrics:
    """All the plugin's metrics; `view` supplies pools and containers when scraped."""

    def __init__(self, view: Callable[[], StateView] = StateView) -> None:
        # Process-wide in prometheus_client; the plugin exports no `_created` series anywhere.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StateCollector(view))
        self.decision_latency = Histogram(
            f"{PREFIX}_decision_duration_seconds",
            "Time the policy took for one operation.",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            f"{PREFIX}_errors",
            "Errors by reason (policy refusals, checkpoint writes, updates, config reloads).",
            ["reason"],
            registry=self.registry,
        )
        self.requests = Counter(
            f"{PREFIX}_nri_requests",
            "NRI requests handled, by method.",
            ["method"],
            registry=self.registry,
        )
        self.reloads = Counter(
            f"{PREFIX}_config_reloads",
            "Configuration reloads by result (applied, rejected).",
            ["result"],
            registry=self.registry,
        )
        self.cgroup_drift = Counter(
            f"{PREFIX}_cgroup_drift",
            "Containers whose cgroup cpuset or memory nodes differed from their placement and "
            "were updated again, by the check that found them (post_start, periodic; revert: "
            "what the plugin wrote, undone before the runtime's record followed, e.g. by "
            "systemd, written again).",
            ["check"],
            registry=self.registry,
        )
        for check in ("post_start", "periodic", "revert"):
            self.cgroup_drift.labels(check)
        self.degraded = Counter(
            f"{PREFIX}_degraded_placements",
            "Containers placed with less than they asked for rather than refused, by what they "
            "got less of (shared-cpus, reserved-cpus, memory-tier).",
            ["degradation"],
            registry=self.registry,
        )
        for degradation in Degradation:  # every series exists from the start, at 0
            self.degraded.labels(str(degradation))
        self.moves = Counter(
            f"{PREFIX}_consolidation_moves",
            "Shared containers moved to another pool to make room for a new container.",
            registry=self.registry,
        )
        self.hints_missed = Counter(
            f"{PREFIX}_topology_hints_missed",
            "Containers placed or resized with CPUs outside their devices' NUMA nodes (the "
            "decision's reason says why).",
            registry=self.registry,
        )
        self.annotation_warnings = Counter(
            f"{PREFIX}_annotation_warnings",
            "Annotations ignored or cut back rather than refused, by kind (untrusted: a "
            "privileged annotation from a namespace not trusted with it; claim_cut: resources "
            "claimed beyond the cgroup settings; unknown_key, unsupported_key: once per pod).",
            ["kind"],
            registry=self.registry,
        )
        self.annotation_refusals = Counter(
            f"{PREFIX}_annotation_refusals",
            "Containers refused for an annotation value, by the limit it broke.",
            ["limit"],
            registry=self.registry,
        )
        for kind in ANNOTATION_WARNINGS:
            self.annotation_warnings.labels(kind)
        for limit in ANNOTATION_LIMITS:
            self.annotation_refusals.labels(limit)
        self.exclusive_window = Histogram(
            f"{PREFIX}_exclusive_window_seconds",
            "Time the workload of a container granted exclusive CPUs ran while another "
            "container's cgroup still held them, from its start until they were written there "
            "or re-pinned by the runtime (0: freed before it started, nobody held them, or "
            "re-pins in the reply).",
            buckets=WINDOW_BUCKETS,
            registry=self.registry,
        )
        self.update_batch = Histogram(
            f"{PREFIX}_update_batch_seconds",
            "Time one UpdateContainers call of re-pins took until the runtime answered.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.repins = Counter(
            f"{PREFIX}_repins",
            "Re-pins of other containers sent after the reply, by outcome (sent; retried: the "
            "cgroup did not hold it; given_up: left to the periodic check; dropped: gone; "
            "held_for_reply: an update with no safe transport, waiting for a reply; rode_reply: "
            "such an update carried by a reply).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in REPIN_OUTCOMES:
            self.repins.labels(outcome)
        self.cgroup_writes = Counter(
            f"{PREFIX}_cgroup_writes",
            "Re-pins written to other containers' cgroups ahead of the runtime, by outcome "
            "(written; gone: no cgroup or no such file, the container exited or is not created "
            "yet; busy: EBUSY, a child cgroup holds what the write takes away; refused: any other "
            "refusal of the kernel; outside: the cgroups path leaves the cgroup root or crosses a "
            "symlink; read_only: the cgroup root is mounted read-only). Those not written wait "
            "for the runtime.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in CGROUP_WRITE_OUTCOMES:
            self.cgroup_writes.labels(outcome)
        self.cgroup_writes_on = Gauge(
            f"{PREFIX}_cgroup_writes_enabled",
            "1 while re-pins are written into the containers' cgroups ahead of the runtime; 0 "
            "when configured off, the cgroup mount is read-only, or the cgroup root holds none "
            "of the runtime's containers.",
            registry=self.registry,
        )
        self.update_transport = Gauge(
            f"{PREFIX}_update_transport",
            "1 for the transport updates apart from a reply take (cri: the runtime's CRI "
            "UpdateContainerResources; nri: NRI UpdateContainers; reply: none is safe, they "
            "wait for the next reply), chosen at Configure.",
            ["transport"],
            registry=self.registry,
        )
        self.own_repins = Counter(
            f"{PREFIX}_own_repins_answered",
            "UpdateContainer requests the runtime relayed for a re-pin the plugin sent through "
            "the CRI, answered with the container's current cpusets (no resize).",
            registry=self.registry,
        )
        self.orphans = Counter(
            f"{PREFIX}_orphaned_placements_released",
            "Placements of containers the runtime no longer reports, released, by how they were "
            "found (pod_stopped, pod_removed: left when their pod went; not_reported: missing "
            "from the runtime's Synchronize).",
            ["reason"],
            registry=self.registry,
        )
        for reason in ORPHAN_REASONS:
            self.orphans.labels(reason)
        self.registered = Gauge(
            f"{PREFIX}_registered",
            "1 while registered with and synchronized by the runtime.",
            registry=self.registry,
        )
        self.kubelet_manager = Gauge(
            f"{PREFIX}_kubelet_manager_active",
            "1 while the kubelet pins containers itself (static CPU manager, Memory Manager).",
            ["manager"],
            registry=self.registry,
        )
        for manager in ("cpu", "memory"):
            self.kubelet_manager.labels(manager)
        self.kubelet_memory = Gauge(
            f"{PREFIX}_kubelet_memory_reserved_bytes",
            "Bytes the kubelet's Memory Manager reserved for its containers, per NUMA node and "
            "resource (memory, hugepages-<size>).",
            ["node", "resource"],
            registry=self.registry,
        )
        self.standby = Gauge(
            f"{PREFIX}_standby",
            "1 while waiting for another instance to give up the state file (an upgrade).",
            registry=self.registry,
        )
        for reason in ERROR_REASONS:
            self.errors.labels(reason)
        for result in RELOAD_RESULTS:
            self.reloads.labels(result)
        # The series the daemon updates on every request, bound once per label value: `labels()`
        # checks its arguments and takes a lock at every call, several times per container.
        # Keys: the request methods and operations named by the daemon's code, so bounded.
        self._requests: dict[str, Counter] = {m: self.requests.labels(m) for m in REQUEST_METHODS}
        self._latencies: dict[str, Histogram] = {
            operation: self.decision_latency.labels(operation) for operation in OPERATIONS
        }

    def transport(self, chosen: str) -> None:
        """Marks the transport chosen at Configure, one of `TRANSPORTS`."""
        for name in TRANSPORTS:
            self.update_transport.labels(name).set(1 if name == chosen else 0)

    def request(self, method: str) -> None:
        """Counts one NRI request of `method`."""
        _bound(self._requests, self.requests, method).inc()

    def observe(self, operation: str, seconds: float) -> None:
        """Records the time the policy took for one `operation`."""
        _bound(self._latencies, self.decision_latency, operation).observe(seconds)

    def error(self, reason: str, count: int = 1) -> None:
        """Counts `count` errors of `reason`, one of `ERROR_REASONS`."""
        if reason not in ERROR_REASONS:
            raise ValueError(f"unknown error reason {reason!r}")
        self.errors.labels(reason).inc(count)


_Series = TypeVar("_Series", Counter, Histogram)


def _bound(children: dict[str, _Series], metric: _Series, value: str) -> _Series:
    """The series of `metric` for one label value, bound once and kept in `children`."""
    child = children.get(value)
    if child is None:
        child = children[value] = metric.labels(value)
    return child
