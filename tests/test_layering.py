"""The rooms import only what docs/architecture.md says they may: checked in a fresh interpreter.

Each row imports a room (all its modules) with nothing else loaded, then lists the project's
modules outside the room that came with it; any that the architecture table does not allow fails.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("nri_topology"))))
"""

# room -> the rooms it may import (nri_topology itself, the package's __init__, always comes)
ALLOWED = {
    "config": {"quantity", "topology"},  # never policy: nri_topology.configured maps to it
    "topology": set(),
    "quantity": set(),
    "ttrpc": set(),
    "policy": {"topology", "quantity"},
}


def _modules(room: str) -> list[str]:
    package = f"nri_topology.{room}"
    try:
        path = __import__(package, fromlist=["__path__"]).__path__
    except AttributeError:  # a module, not a package
        return [package]
    return [package, *(m.name for m in pkgutil.walk_packages(path, prefix=f"{package}."))]


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_what_the_architecture_allows(room: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *_modules(room)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    loaded = {_room(m) for m in json.loads(out)} - {"", room}
    assert loaded <= ALLOWED[room], f"{room} imports {sorted(loaded - ALLOWED[room])}"
