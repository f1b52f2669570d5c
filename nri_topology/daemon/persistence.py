"""The plugin's state across restarts: the checkpoint read once, and written off the request
path by `writer.CheckpointWriter` after every change (the policy's entries that changed, and
the cold-start deadlines)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.writer import CheckpointWriter, Snapshot
from nri_topology.policy.checkpoint.state import ENTRIES
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import ContainerInfo, PodInfo
from nri_topology.policy.views import RestoreReport

_log = structlog.get_logger("nri_topology.daemon")


class State:
    """What a restore starts from, and the writes that keep the checkpoint current."""

    def __init__(
        self,
        policy: PolicyPort,
        checkpoint: Checkpoint | None,
        cold_starts: Callable[[], dict[str, Any]],
        lock: asyncio.Lock,
        on_failure: Callable[[str], None],
        retry_s: float,
    ) -> None:
        self.policy = policy
        self._on_restore_failure = lambda: on_failure("restore")
        self.checkpoint = checkpoint
        self._cold_starts = cold_starts
        self._loaded = False
        self._writer: CheckpointWriter | None = None
        if checkpoint is not None:
            self._writer = CheckpointWriter(
                checkpoint,
                self._snapshot,
                lock,
                lambda: on_failure("checkpoint_write"),
                entries_at=("policy", ENTRIES),
                retry_s=retry_s,
            )

    def saved(self) -> dict[str, Any]:
        """The checkpoint on the first Synchronize, afterwards our own newer in-memory state."""
        if self._loaded:
            return {"policy": self.policy.snapshot(), "cold_starts": self._cold_starts()}
        self._loaded = True
        body = self.checkpoint.load().body if self.checkpoint is not None else None
        return body or {}

    def restore(
        self, pods: Sequence[PodInfo], containers: Sequence[ContainerInfo], saved: dict[str, Any]
    ) -> RestoreReport:
        """The policy restored from the runtime's report and `saved`; a checkpoint this policy
        cannot use (from another version, or edited with a fresh checksum) must not take the
        plugin down: then from the runtime alone."""
        try:
            return self.policy.restore(pods, containers, saved.get("policy"))
        except Exception as exc:
            if not saved:
                raise
            self._on_restore_failure()
            _log.error("restoring state failed, rebuilding without the checkpoint", error=str(exc))
            return self.policy.restore(pods, containers, None)

    def changed(self) -> None:
        """The state changed; the writer checkpoints it soon."""
        if self._writer is not None:
            self._writer.changed()

    async def flush(self) -> None:
        """Write the latest state now and wait until it is on disk (or its write has failed)."""
        if self._writer is not None:
            await self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def _snapshot(self, whole: bool) -> Snapshot:
        """The checkpoint body for the writer: the policy's entries changed since the last one,
        or all of them (when `whole`, or the policy has no list of changes)."""
        changes = self.policy.changes(everything=whole)
        policy = self.policy.snapshot(entries=False)
        body = {"policy": policy, "cold_starts": self._cold_starts()}
        if changes.complete:
            policy[ENTRIES] = changes.entries
            return Snapshot(body)
        return Snapshot(body, changes.entries)
