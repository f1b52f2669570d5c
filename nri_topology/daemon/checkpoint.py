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
_Walk = Generator[None, None, None]
_Member = tuple[Any, Any, bytes]  # a value, its shape and the text `"key":value`
_FRESH_COST = 12  # encoding a value anew takes about as long as reusing a dozen texts


class Encoder:
    """`encode` for a body that changes a little at a time, re-encoding only what changed.

    Objects nested less than `depth` deep are walked key by key; each value at `depth` (in the
    daemon's body, one container's entry) is encoded once and its text reused while an equal
    value of the same types sits at the same path (Python's equality alone would take 1, 1.0 and
    True for one value; JSON writes them differently).

    Encoding the whole body in one call held the GIL long enough at 1000 containers to stall
    CreateContainer replies; `steps` does the work in slices the event loop can interleave.
    """

    def __init__(self, depth: int = 3, batch: int = 100) -> None:
        self._depth = depth
        self._batch = batch  # work between two yields: a reused text costs 1, a new one more
        # For each walked object (by its path): its keys' values and their texts.
        self._cache: dict[tuple[str, ...], dict[str, _Member]] = {}
        self._fresh: dict[tuple[str, ...], dict[str, _Member]] = {}
        self._budget = batch

    def encode(self, body: Mapping[str, Any]) -> bytes:
        steps = self.steps(body)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def steps(self, body: Mapping[str, Any]) -> _Steps:
        """A generator that yields between slices of work and returns the file content."""
        self._fresh = {}
        self._budget = self._batch
        out: list[bytes] = []
        if isinstance(body, dict) and _str_keys(body) and self._depth > 0:
            yield from self._walk(body, (), out)
        else:
            out.append(canonical_text(body))
        yield
        self._cache, self._fresh = self._fresh, {}  # what left the body leaves the cache
        yield  # freeing the previous body's values takes a slice of its own
        return _document(b"".join(out))

    def _walk(self, obj: dict[str, Any], path: tuple[str, ...], out: list[bytes]) -> _Walk:
        """Append the text of `obj`, walking into objects above `depth`, reusing texts below."""
        old = self._cache.get(path, {})
        new: dict[str, _Member] = {}
        self._fresh[path] = new
        deeper = len(path) + 1 < self._depth
        members: list[bytes] = []
        for key in sorted(obj):
            value = obj[key]
            if deeper and isinstance(value, dict) and _str_keys(value):
                inner: list[bytes] = [canonical_text(key), b":"]
                yield from self._walk(value, (*path, key), inner)
                members.append(b"".join(inner))
                continue
            shape = _shape(value)
            cached = old.get(key)
            if cached is not None and cached[0] == value and cached[1] == shape:
                member = cached[2]
                self._budget -= 1
            else:
                member = canonical_text(key) + b":" + canonical_text(value)
                self._budget -= _FRESH_COST
            if self._budget <= 0:
                self._budget = self._batch
                yield
            new[key] = (value, shape, member)
            members.append(member)
        out.append(b"{" + b",".join(members) + b"}")


def canonical_text(value: Any) -> bytes:
    """One value as `canonical` encodes it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _shape(value: Any) -> Any:
    """The keys and types inside `value`, so that values equal to Python but not in JSON
    (1, 1.0, True) differ. Equal dicts listing their keys in another order differ too: that
    only costs a text encoded anew, never a wrong one."""
    kind = type(value)
    if kind is dict:
        keys: tuple[Any, ...] = tuple(value)
        value = value.values()
    elif kind is list:
        keys = ()
    else:
        return kind
    types = tuple(map(type, value))
    if dict in types or list in types:
        return kind, keys, tuple(map(_shape, value))
    return kind, keys, types


def _str_keys(value: dict[Any, Any]) -> bool:
    """Only string keys are walked; others go whole to json, which converts and checks them."""
    return all(type(k) is str for k in value)


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
