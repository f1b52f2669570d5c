"""The checkpoint file: the last committed state, so a restart adopts placements, not redoes them.

The file is JSON `{"format": …, "version": 1, "sha256": …, "body": {…}}`; the checksum covers the
canonical encoding of `body` (sorted keys, no spaces), so a torn or hand-edited file is detected.
Writes are atomic: a temporary file in the same directory is written and fsynced, renamed over the
old file, and the directory is fsynced, so a crash leaves either the old or the new state.

A missing or unreadable checkpoint is never fatal: `load` reports why, and the daemon rebuilds its
state from the runtime's Synchronize. A failed write (read-only or full disk) is reported once, the
state stays pending in memory and the next `save` retries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

FORMAT = "nri-topology-checkpoint"
VERSION = 1

_log = structlog.get_logger("nri_topology.checkpoint")


def canonical(body: Mapping[str, Any]) -> bytes:
    """The byte encoding the checksum is taken over; stable across runs and Python versions."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode(body: Mapping[str, Any]) -> bytes:
    """The file content for `body`.

    Compact, because only compact JSON goes through the C encoder: written after every change
    while holding the GIL, the indented form of 1000 containers took 13 ms per write and stalled
    the request path (benchmarks/socket_path.py); compact takes 4 ms.
    """
    digest = hashlib.sha256(canonical(body)).hexdigest()
    document = {"format": FORMAT, "version": VERSION, "sha256": digest, "body": body}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class Loaded:
    """What `load` found: the body, or None and the reason it could not be used."""

    body: dict[str, Any] | None
    problem: str = ""


def decode(data: bytes) -> Loaded:
    """Check and unpack a checkpoint's bytes; never raises on bad content."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Loaded(None, f"not valid JSON ({exc})")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return Loaded(None, "not an nri-topology checkpoint")
    if document.get("version") != VERSION:
        return Loaded(None, f"unsupported version {document.get('version')!r} (want {VERSION})")
    body = document.get("body")
    if not isinstance(body, dict):
        return Loaded(None, "body is missing or not an object")
    if hashlib.sha256(canonical(body)).hexdigest() != document.get("sha256"):
        return Loaded(None, "checksum mismatch (file is damaged or was edited)")
    return Loaded(body)


class Checkpoint:
    """Reads and atomically writes one checkpoint file; remembers whether the last write failed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failing = False  # the last save failed; the state on disk is older than ours

    def load(self) -> Loaded:
        """The saved body, or None with a warning logged saying why it cannot be used."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            loaded = Loaded(None, "no checkpoint file")
        except OSError as exc:
            loaded = Loaded(None, f"cannot read: {exc.strerror or exc}")
        else:
            loaded = decode(data)
        if loaded.body is None:
            _log.warning(
                "checkpoint unusable, rebuilding from the runtime",
                path=str(self.path),
                problem=loaded.problem,
            )
        return loaded

    def save(self, body: Mapping[str, Any]) -> bool:
        """Write `body` atomically; on failure log it (once per failure streak) and return False."""
        try:
            self._write(encode(body))
        except OSError as exc:
            if not self.failing:
                _log.warning(
                    "checkpoint write failed, keeping state in memory and retrying on next change",
                    path=str(self.path),
                    error=exc.strerror or str(exc),
                )
            self.failing = True
            return False
        if self.failing:
            _log.info("checkpoint written again", path=str(self.path))
        self.failing = False
        return True

    def _write(self, data: bytes) -> None:
        directory = self.path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
