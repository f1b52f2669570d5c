"""The policy as its drivers see it: the daemon, the simulator and the invariant checks.

One interface, so a driver and its test doubles agree on one set of signatures; `Policy` is the
implementation (tests/test_policy_port.py checks that it matches).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from nri_topology.policy.options import Options
from nri_topology.policy.types import (
    ContainerInfo,
    Decision,
    Placement,
    PodInfo,
    Resources,
    Update,
)
from nri_topology.policy.views import (
    Assignment,
    Changes,
    NodeCapacity,
    PoolView,
    RestoreReport,
)


@runtime_checkable
class PolicyPort(Protocol):
    """Placement decisions and read-only views; every call succeeds or raises `PolicyError`."""

    @property
    def options(self) -> Options: ...

    def create(self, pod: PodInfo, container: ContainerInfo) -> Decision: ...
    def resize(self, pod: PodInfo, container: ContainerInfo, resources: Resources) -> Decision: ...
    def release(self, container_id: str) -> tuple[Update, ...]: ...
    def hold(self, container_id: str) -> bool: ...
    def restore(
        self,
        pods: Sequence[PodInfo],
        containers: Sequence[ContainerInfo],
        saved: Mapping[str, Any] | None = None,
    ) -> RestoreReport: ...
    def container(self, container_id: str) -> tuple[PodInfo, ContainerInfo] | None: ...
    def pod_containers(self, pod_id: str) -> tuple[str, ...]: ...
    def cold_start_done(self, container_id: str) -> tuple[Update, ...]: ...
    def reconfigure(self, options: Options) -> RestoreReport: ...
    def snapshot(self, entries: bool = True) -> dict[str, Any]: ...
    def changes(self, everything: bool = False) -> Changes: ...
    def pools(self) -> Sequence[PoolView]: ...
    def assignments(self) -> Mapping[str, Assignment]: ...
    def placements(self, ids: Iterable[str] | None = None) -> dict[str, Placement]: ...
    def node_capacity(self) -> tuple[NodeCapacity, ...]: ...
