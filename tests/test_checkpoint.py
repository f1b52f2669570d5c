"""The checkpoint file: atomic, checksummed, and never fatal when missing, damaged or unwritable."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.daemon import checkpoint
from nri_topology.daemon.checkpoint import Checkpoint, decode, encode

BODY = {"policy": {"containers": {"c1": {"pool": "node0", "cpus": "2-3"}}}, "cold_starts": {}}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_any_json_body_round_trips(body: dict) -> None:
    assert decode(encode(body)).body == body


def _tampered(change) -> bytes:
    document = json.loads(encode(BODY))
    change(document)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "not valid JSON"),
        (encode(BODY)[:40], "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not an nri-topology checkpoint"),
        (b'{"format": "other"}', "not an nri-topology checkpoint"),
        (_tampered(lambda d: d.update(version=2)), "unsupported version 2"),
        (_tampered(lambda d: d.update(body=[1])), "body is missing"),
        (_tampered(lambda d: d["body"]["policy"].update(extra=1)), "checksum mismatch"),
        (_tampered(lambda d: d.update(sha256="0" * 64)), "checksum mismatch"),
    ],
)
def test_damaged_content_is_refused_with_a_reason(data: bytes, problem: str) -> None:
    loaded = decode(data)
    assert loaded.body is None
    assert problem in loaded.problem


def test_save_then_load(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "sub" / "state.json")
    assert cp.save(BODY)
    assert Checkpoint(cp.path).load().body == BODY
    assert oct(cp.path.parent.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in cp.path.parent.iterdir()] == ["state.json"]  # no temp file left


def test_missing_and_corrupt_files_load_as_none(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "state.json")
    with structlog.testing.capture_logs() as logs:
        assert cp.load() == checkpoint.Loaded(None, "no checkpoint file")
    assert [e["log_level"] for e in logs] == ["info"]  # a fresh install: nothing is wrong
    cp.path.write_text("{garbage")
    with structlog.testing.capture_logs() as logs:
        assert "not valid JSON" in cp.load().problem
    assert [e["log_level"] for e in logs] == ["warning"]
    cp.path.unlink()
    cp.path.mkdir()  # a directory where the file should be cannot be read
    assert cp.load().problem.startswith("cannot read")


def test_unwritable_directory_warns_keeps_old_file_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = Checkpoint(tmp_path / "state.json")
    assert cp.save({"n": 1})

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint.os, "fsync", full_disk)
    assert not cp.save({"n": 2})
    assert not cp.save({"n": 3})
    assert cp.failing
    assert cp.load().body == {"n": 1}  # the old state is intact
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # temp file cleaned up
    monkeypatch.undo()
    assert cp.save({"n": 4})
    assert not cp.failing
    assert cp.load().body == {"n": 4}


def test_parent_that_is_a_file_is_a_write_failure_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    cp = Checkpoint(tmp_path / "blocker" / "state.json")
    assert not cp.save(BODY)
    assert cp.load().body is None


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "refused: nested more than 16"),
        (encode({"policy": _nested(20)}), "refused: nested more than 16"),
        (b"[" + b"9" * 5000 + b"]", "4300 digits"),
        (b" " * (checkpoint.MAX_BYTES + 1), "refused: 67108865 bytes"),
    ],
    ids=["deep-json", "deep-with-checksum", "huge-number", "oversized"],
)
def test_hostile_files_are_refused_not_raised(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(data)
    loaded = Checkpoint(path).load()
    assert loaded.body is None and problem in loaded.problem
    assert len(loaded.problem) < 300
