"""What the policy's answers tell the operator: refusals, degraded placements, ignored
annotations and keys, a restore's surprises; each logged where it matters and counted.

The policy decides; this module only reports. A refusal becomes the stub's `Refused`, whose
message the runtime shows as is (the policy's message names the container and says why).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable

import structlog

from nri_topology.daemon.metrics import Metrics
from nri_topology.nri.stub import Refused
from nri_topology.policy.intake.annotations import in_domains, key_problems
from nri_topology.policy.types import (
    AnnotationError,
    ContainerInfo,
    Decision,
    PodInfo,
    PolicyError,
    qualified_name,
)
from nri_topology.policy.views import RestoreReport

_log = structlog.get_logger("nri_topology.daemon")
_KEYS_LISTED = 8  # unknown annotation keys named in one warning
_SHOWN = 10  # per-container details in one warning line, at most


class Admission:
    """Times and reports the policy's decisions; remembers which unknown keys were said."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._keys_reported: dict[str, set[str]] = {}  # pod id -> unknown keys warned about

    def observe(self, operation: str, started: float) -> None:
        self.metrics.observe(operation, time.perf_counter() - started)

    def decide(
        self, operation: str, pod: PodInfo, info: ContainerInfo, call: Callable[[], Decision]
    ) -> Decision:
        """`call()`'s decision, timed; a refusal raised as `Refused`, warnings said."""
        started = time.perf_counter()
        try:
            decision = call()
        except PolicyError as exc:
            self.observe(operation, started)
            self.metrics.error("policy")
            if isinstance(exc, AnnotationError):
                self.metrics.annotation_refusals.labels(exc.limit or "invalid").inc()
            who = qualified_name(pod.namespace, pod.name, info.name)
            _log.warning("placement refused", container=who, operation=operation, reason=str(exc))
            raise Refused(f"nri-topology: {exc}") from exc
        self.observe(operation, started)
        for warning in decision.warnings:
            self.metrics.annotation_warnings.labels(warning.kind).inc()
            _log.warning(
                "annotation ignored",
                container=qualified_name(pod.namespace, pod.name, info.name),
                kind=warning.kind,
                reason=warning.message,
            )
        if decision.degraded or decision.moved:
            self._count(operation, pod, info, decision)
        if decision.hints_missed:
            self.metrics.hints_missed.inc()
        return decision

    def _count(self, operation: str, pod: PodInfo, info: ContainerInfo, decision: Decision) -> None:
        """Degraded placements warn and count; moves of other containers count."""
        for degradation in decision.degraded:
            self.metrics.degraded.labels(str(degradation)).inc()
        if decision.moved:
            self.metrics.moves.inc(len(decision.moved))
        if decision.degraded:
            _log.warning(
                "placement degraded",
                container=qualified_name(pod.namespace, pod.name, info.name),
                operation=operation,
                degraded=[str(d) for d in decision.degraded],
                reason=decision.reason,
            )

    def report_keys(self, pod: PodInfo, info: ContainerInfo) -> None:
        """Warn once per pod about keys of our domains that the policy does not act on."""
        if not pod.annotations and not info.annotations:
            return
        reported = self._keys_reported.get(pod.id, ())
        keys = [
            k for k in (*pod.annotations, *info.annotations) if in_domains(k) and k not in reported
        ]
        if not keys:
            return  # nothing new; most pods have none, and keep no empty set
        self._keys_reported.setdefault(pod.id, set()).update(keys)
        problems = key_problems(keys)
        if not problems:
            return
        for problem in problems:
            self.metrics.annotation_warnings.labels(f"{problem.kind}_key").inc()
        listed = [p.message for p in problems[:_KEYS_LISTED]]
        more = {"more": len(problems) - len(listed)} if len(problems) > len(listed) else {}
        _log.warning(
            "annotation keys ignored", pod=f"{pod.namespace}/{pod.name}", keys=listed, **more
        )

    def restored(
        self,
        report: RestoreReport,
        missing: Collection[str],
        pods: Iterable[PodInfo],
        infos: Iterable[ContainerInfo],
    ) -> None:
        """Say what a restore did not take as it came, and the keys of the pods it reported."""
        if report.dropped:
            # A checkpoint that contradicts the runtime (edited, forged, or from another node)
            # is not believed for those containers; the runtime's cpusets are.
            self.metrics.error("checkpoint_implausible", len(report.dropped))
            _log.warning(
                "checkpoint entries contradict the runtime, taking the runtime's view",
                dropped=len(report.dropped),
                entries=dict(sorted(report.dropped.items())[:_SHOWN]),
            )
        if missing:
            self.metrics.orphans.labels("not_reported").inc(len(missing))
            _log.warning(
                "containers no longer reported by the runtime, released",
                released=len(missing),
                containers=sorted(missing)[:_SHOWN],
            )
        if report.failed:
            self.metrics.error("restore_failed", len(report.failed))
            for cid, why in report.failed.items():
                _log.warning("not placed, pinning left as is", container_id=cid, reason=why)
        self._keys_reported = {}
        by_id = {p.id: p for p in pods}
        for info in infos:
            if (pod := by_id.get(info.pod_id)) is not None:
                self.report_keys(pod, info)

    def pod_gone(self, pod_id: str) -> None:
        self._keys_reported.pop(pod_id, None)
