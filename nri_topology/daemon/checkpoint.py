"""The checkpoint file: the last committed state, so a restart adopts placements, not redoes them.

The file is JSON `{"format": …, "version": 1, "sha256": …, "body": {…}}`; the checksum covers the
canonical encoding of `body` (sorted keys, no spaces), so a torn or hand-edited file is detected.
Writes are atomic: a temporary file in the same directory is written and fsynced, renamed over the
old file, and the directory is fsynced, so a crash leaves either the old or the new state.

A missing or unreadable checkpoint is never fatal: `load` reports why, and the daemon rebuilds its
state from the runtime's Synchronize. So is one that is refused: larger than `MAX_BYTES`, nested
deeper than `MAX_DEPTH` (the body nests 4 deep), or holding numbers longer than Python converts.
A failed write (read-only or full disk) is reported once, the state stays pending in memory and
the next `save` retries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from nri_topology.bounded_read import TooLarge, read_bounded

FORMAT = "nri-topology-checkpoint"
VERSION = 1
MAX_BYTES = 64 << 20  # about 200 bytes per container: room for hundreds of thousands
MAX_DEPTH = 16

_log = structlog.get_logger("nri_topology.checkpoint")


def canonical(body: Mapping[str, Any]) -> bytes:
    """The byte encoding the checksum is taken over; stable across runs and Python versions."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode(body: Mapping[str, Any]) -> bytes:
    """The file content for `body`: compact JSON with sorted keys, one line.

    Compact, because only compact JSON goes through the C encoder; the body inside is then its
    canonical text, so it is encoded once for both the checksum and the file.
    """
    return _document(canonical(body))


def _document(body_text: bytes) -> bytes:
    """The document around a canonical body, as `json.dumps(…, sort_keys=True)` would write it
    (its keys sort as body < format < sha256 < version)."""
    digest = hashlib.sha256(body_text).hexdigest()
    return b"".join(
        (
            b'{"body":',
            body_text,
            b',"format":',
            json.dumps(FORMAT).encode(),
            b',"sha256":"',
            digest.encode(),
            b'","version":',
            str(VERSION).encode(),
            b"}\n",
        )
    )


_Steps = Generator[None, None, bytes]


class Encoder:
    """`encode` for a body with one large map (at `path`) whose entries change a few at a time.

    In the daemon's body the map is the policy's containers. Each entry is encoded when its owner
    names it changed, and its text kept; the rest of the body, small, is encoded whole each time.
    Nothing is compared: the owner names every entry it changed (`Policy.changes`), and a caller
    that lost track (a failed encoding) passes the whole map again.

    Encoding the whole body in one call held the GIL long enough at 1000 containers to stall
    CreateContainer replies; `steps` does the work in slices the event loop can interleave.
    """

    def __init__(self, path: tuple[str, ...] = (), batch: int = 100) -> None:
        self._path = path
        self._batch = batch  # entries encoded between two yields
        self._texts: dict[str, bytes] = {}  # per entry of the map: `"key":value`

    def encode(self, body: Mapping[str, Any], changed: Mapping[str, Any] | None = None) -> bytes:
        steps = self.steps(body, changed)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def steps(self, body: Mapping[str, Any], changed: Mapping[str, Any] | None = None) -> _Steps:
        """A generator that yields between slices of work and returns the file content.

        `changed` holds the entries changed since the last call, None for one removed; the map at
        `path` in `body` is then left unread. When `changed` is None, that map is every entry.
        """
        if not self._path:
            yield
            return encode(body)
        if changed is None:
            self._texts = {}
            changed = _at(body, self._path)
        texts = self._texts
        budget = self._batch
        for key, value in changed.items():
            if value is None:
                texts.pop(key, None)
                continue
            texts[key] = canonical_text(key) + b":" + canonical_text(value)
            budget -= 1
            if budget <= 0:
                budget = self._batch
                yield
        entries = b"{" + b",".join([texts[k] for k in sorted(texts)]) + b"}"
        yield
        return _document(_spliced(body, self._path, entries))


def _at(body: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    value: Any = body
    for key in path:
        value = value[key]
    return value


def _spliced(value: Mapping[str, Any], path: tuple[str, ...], text: bytes) -> bytes:
    """The canonical text of `value` with `text` in place of the value at `path` (added when
    missing)."""
    members = []
    for key in sorted({*value, path[0]}):
        if key != path[0]:
            inner = canonical_text(value[key])
        elif len(path) > 1:
            inner = _spliced(value.get(key, {}), path[1:], text)
        else:
            inner = text
        members.append(canonical_text(key) + b":" + inner)
    return b"{" + b",".join(members) + b"}"


def canonical_text(value: Any) -> bytes:
    """One value as `canonical` encodes it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


@dataclass(frozen=True, slots=True)
class Loaded:
    """What `load` found: the body, or None and the reason it could not be used."""

    body: dict[str, Any] | None
    problem: str = ""


def decode(data: bytes) -> Loaded:
    """Check and unpack a checkpoint's bytes; never raises on bad content."""
    if len(data) > MAX_BYTES:
        return Loaded(None, f"refused: {len(data)} bytes, more than the limit of {MAX_BYTES}")
    try:
        document = json.loads(data)
    except RecursionError:
        return Loaded(None, f"refused: nested more than {MAX_DEPTH} levels deep")
    except ValueError as exc:  # also a number of more digits than Python converts
        return Loaded(None, f"not valid JSON ({str(exc)[:160]})")
    if _deeper_than(document, MAX_DEPTH):
        return Loaded(None, f"refused: nested more than {MAX_DEPTH} levels deep")
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


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests more than `limit` levels (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class Checkpoint:
    """Reads and atomically writes one checkpoint file; remembers whether the last write failed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failing = False  # the last save failed; the state on disk is older than ours

    def load(self) -> Loaded:
        """The saved body, or None with a warning logged saying why it cannot be used.

        No file at all is what a fresh install has: said at info level, as nothing is wrong.
        """
        try:
            data = read_bounded(self.path, MAX_BYTES)
        except TooLarge as exc:
            loaded = decode(exc.head)  # refused there, with the size
        except FileNotFoundError:
            _log.info("no checkpoint yet, building the state from the runtime", path=str(self.path))
            return Loaded(None, "no checkpoint file")
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
        return self.save_encoded(encode(body))

    def save_encoded(self, data: bytes) -> bool:
        """`save` of a body already encoded (by `encode` or an `Encoder`)."""
        try:
            self._write(data)
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
