"""The placement file: a read-only file in each container saying where it runs, kept current.

On the host, `<root>/<container id>/placement.json` (root: `containers/` beside the checkpoint).
The container gets its directory bind-mounted read-only (`expose.file_dir`, default
`/.nri-topology`), not the file: a bind-mounted file keeps the inode it was mounted with, so a
file replaced by rename would never be seen inside; in a mounted directory the new file is.

Every write is a temporary file renamed over the old one, so a reader sees the old or the new
document, never a mix. The document:

    {"container": ID, "pool": NAME, "kind": KIND, "cpus": LIST, "mems": LIST,
     "exclusive_cpus": LIST, "generation": N}

(lists in the Linux list format; "" where the plugin leaves pinning to the runtime; `generation`
grows with every rewrite, so a watcher can tell a new document from a re-read one).

Writes happen in a worker thread, one batch at a time, latest document per container first
served: the daemon notes changes under its lock and never waits for the disk, except at creation,
where the file must exist before the runtime mounts it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from nri_topology.nri import api_pb2
from nri_topology.policy.types import Decision, Update
from nri_topology.policy.views import Assignment
from nri_topology.topology import cpuset

FILE_NAME = "placement.json"
DEFAULT_DIR = "/.nri-topology"

_log = structlog.get_logger("nri_topology.placement_file")

_Doc = dict[str, Any]


def _fmt(cpus: frozenset[int] | None) -> str:
    return cpuset.format(cpus) if cpus else ""


def document(decision: Decision) -> _Doc:
    """The file's content for a container just placed (or resized)."""
    p = decision.placement
    return {
        "container": decision.container_id,
        "pool": decision.pool,
        "kind": str(decision.kind),
        "cpus": _fmt(p.cpus),
        "mems": _fmt(p.mems),
        "exclusive_cpus": _fmt(decision.exclusive),
    }


def assigned(a: Assignment) -> _Doc:
    """The file's content for a container the policy adopted after a restart."""
    return {
        "container": a.container_id,
        "pool": a.pool,
        "kind": str(a.kind),
        "cpus": _fmt(a.cpus),
        "mems": _fmt(a.mems),
        "exclusive_cpus": _fmt(a.exclusive),
    }


class PlacementFiles:
    """The placement files of the containers that have one; the only writer under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._docs: dict[str, _Doc] = {}  # containers with a file: their latest document
        self._pending: dict[str, _Doc | None] = {}  # None: remove the container's directory
        self._task: asyncio.Task[None] | None = None

    def __contains__(self, container_id: str) -> bool:
        return container_id in self._docs

    async def create(self, decision: Decision, mount_dir: str) -> api_pb2.Mount | None:
        """Write a new container's file now; the mount that shows it inside the container, or
        None when the file could not be written (a mount of a missing directory would fail the
        container; it runs without the file instead, and the failure is logged)."""
        cid = decision.container_id
        self._set(cid, document(decision))
        await self.flush()
        if not (self.root / cid / FILE_NAME).is_file():
            self._docs.pop(cid, None)
            return None
        return api_pb2.Mount(
            destination=mount_dir,
            type="bind",
            source=str(self.root / cid),
            options=["rbind", "ro", "nosuid", "nodev", "noexec"],
        )

    def replaced(self, decision: Decision) -> None:
        """A container of ours was re-placed (resize): its whole document changes."""
        if decision.container_id in self._docs:
            self._set(decision.container_id, document(decision))

    def updated(self, updates: Iterable[Update]) -> None:
        """Other containers' CPUs or memory nodes changed; fields left None stay."""
        for u in updates:
            old = self._docs.get(u.container_id)
            if old is None:
                continue
            doc = dict(old)
            if u.placement.cpus is not None:
                doc["cpus"] = _fmt(u.placement.cpus)
            if u.placement.mems is not None:
                doc["mems"] = _fmt(u.placement.mems)
            if doc != old:
                self._set(u.container_id, doc)

    def removed(self, container_id: str) -> None:
        if self._docs.pop(container_id, None) is not None:
            self._pending[container_id] = None
            self._kick()

    async def adopt(self, placements: Mapping[str, _Doc]) -> None:
        """After (re)connecting: rewrite the files of containers that still run, with what the
        policy holds now, and remove the directories of those that are gone."""
        await self.flush()
        present = await asyncio.to_thread(self._scan)
        self._docs = {}
        for cid, generation in present.items():
            doc = placements.get(cid)
            if doc is None:
                self._pending[cid] = None
            else:
                self._docs[cid] = {**doc, "generation": generation}
                self._pending[cid] = self._next(cid, doc)
        self._kick()
        await self.flush()

    async def flush(self) -> None:
        """Wait until every change noted so far is on disk (or its write has failed)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    # --- internals ----------------------------------------------------------------------------

    def _next(self, cid: str, doc: _Doc) -> _Doc:
        generation = self._docs.get(cid, {}).get("generation", 0) + 1
        out = {**doc, "generation": generation}
        self._docs[cid] = out
        return out

    def _set(self, cid: str, doc: _Doc) -> None:
        self._pending[cid] = self._next(cid, doc)
        self._kick()

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            await asyncio.to_thread(self._apply, batch)

    def _scan(self) -> dict[str, int]:
        """Container directories under the root, with the generation of their file (0: none)."""
        try:
            folders = sorted(p for p in self.root.iterdir() if p.is_dir())
        except FileNotFoundError:
            return {}
        found = {}
        for folder in folders:
            try:
                generation = json.loads((folder / FILE_NAME).read_text())["generation"]
            except (OSError, ValueError, KeyError, TypeError):
                generation = 0
            found[folder.name] = generation if isinstance(generation, int) else 0
        return found

    def _apply(self, batch: Mapping[str, _Doc | None]) -> None:
        for cid, doc in batch.items():
            folder = self.root / cid
            try:
                if doc is None:
                    shutil.rmtree(folder, ignore_errors=True)
                    continue
                if not folder.is_dir():
                    folder.mkdir(parents=True)
                    # readable by the container's user whatever the daemon's umask (the file and
                    # its directory say only where the container runs)
                    os.chmod(folder, 0o755)
                tmp = folder / f".{FILE_NAME}.tmp"
                tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
                os.chmod(tmp, 0o644)
                os.replace(tmp, folder / FILE_NAME)
            except OSError as exc:
                _log.warning("placement file not written", container_id=cid, error=str(exc))
