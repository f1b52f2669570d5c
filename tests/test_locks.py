"""The lock files: every requirement of pyproject.toml pinned with hashes, and what the suite
runs in is what the lock says (so a fresh machine tests the versions that last passed)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def pins(kind: str) -> dict[str, tuple[str, str | None, int]]:
    """name -> (version, marker, hash count) of requirements/KIND.lock."""
    found: dict[str, tuple[str, str | None, int]] = {}
    name = ""
    for line in (ROOT / "requirements" / f"{kind}.lock").read_text().splitlines():
        if m := _PIN.match(line):
            name = canonicalize_name(m[1])
            found[name] = (m[2], m[3], 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, marker, hashes = found[name]
            found[name] = (version, marker, hashes + 1)
    return found


def wanted(kind: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    reqs += [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    if kind == "test":
        reqs += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]]
    return reqs


@pytest.mark.parametrize("kind", ["demo", "test"])
def test_every_requirement_is_pinned_within_its_range_with_hashes(kind: str) -> None:
    locked = pins(kind)
    for req in wanted(kind):
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements/{kind}.lock: run ./dev lock"
        version = locked[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"{kind}.lock pins {req.name}=={version}, outside {req.specifier}: run ./dev lock"
        )
    assert all(hashes for _, _, hashes in locked.values()), "a pin without hashes"


def test_the_suite_runs_in_the_locked_versions() -> None:
    for name, (version, marker, _) in pins("test").items():
        if marker and not Marker(marker).evaluate():
            continue
        assert metadata.version(name) == version, (
            f"{name} {metadata.version(name)} is installed, the lock says {version}"
        )
