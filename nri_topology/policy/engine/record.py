"""The record of placed containers: one map from container id to its grant, and the indexes
derived from it (the containers of each pod, the requests by the attributes affinity
expressions test), kept in step by its one way in (`add`) and its one way out (`remove`).

Everything else that asks which containers are placed (the policy facade, the checkpoint, the
daemon through the policy) reads this map; nothing keeps a list of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from nri_topology.policy.accounts.grant import Grant
from nri_topology.policy.intake import affinity


class Record:
    """Which containers are placed, with what."""

    def __init__(self) -> None:
        self._grants: dict[str, Grant] = {}
        self.grants: Mapping[str, Grant] = MappingProxyType(self._grants)  # read-only
        self._by_pod: dict[str, set[str]] = {}
        self.by_attribute = affinity.Index()  # the grants' requests, for affinity expressions

    def add(self, g: Grant) -> None:
        """Record a container's grant (replacing the one it held)."""
        req = g.request
        cid = req.container_id
        self._grants[cid] = g
        self._by_pod.setdefault(req.pod_id, set()).add(cid)
        self.by_attribute.add(req)

    def renew(self, g: Grant) -> None:
        """A recorded grant's request changed in place (a resize of the same amounts)."""
        self.by_attribute.add(g.request)

    def remove(self, container_id: str) -> Grant:
        """Take a container out of the record: the one way out; KeyError when not placed."""
        g = self._grants.pop(container_id)
        pod_id = g.request.pod_id
        ids = self._by_pod[pod_id]
        ids.discard(container_id)
        if not ids:
            del self._by_pod[pod_id]
        self.by_attribute.remove(container_id)
        return g

    def of_pod(self, pod_id: str) -> tuple[str, ...]:
        """The placed containers of a pod, in id order."""
        return tuple(sorted(self._by_pod.get(pod_id, ())))
