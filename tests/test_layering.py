"""The rooms import only what docs/architecture.md's table allows, and docs/imports.md is current.

Two readings of the same rule: the source (every import statement at any depth, so a
function-level import cannot slip through) and a fresh interpreter (what importing a room really
loads, so an import made by name at run time cannot either).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys

import pytest
from rooms import (
    DRAWING,
    PACKAGE,
    allowed,
    cycles,
    drawing,
    imports,
    module_imports,
    rooms_in_source,
    sub_room_imports,
)

ALLOWED = allowed()

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("nri_topology"))))
"""


def test_the_table_names_every_room() -> None:
    assert set(ALLOWED) == rooms_in_source()


def test_no_import_against_the_table() -> None:
    against = {
        f"{source} -> {target}": sites
        for (source, target), sites in imports().items()
        if target not in ALLOWED[source]
    }
    assert not against, against


def test_no_module_imports_itself_back() -> None:
    """Inside rooms too: no cycle among the package's modules, `TYPE_CHECKING` imports counted
    (a cycle hidden from the interpreter still ties the modules together for a reader)."""
    assert not cycles(module_imports())


def test_no_sub_room_of_the_policy_imports_itself_back() -> None:
    """The policy's sub-rooms form layers: intake, accounts, allocator, shaping, choice,
    admission, engine, checkpoint, none importing one that imports it."""
    graph = sub_room_imports()
    assert {"intake", "accounts", "allocator", "shaping", "choice", "admission"} <= set(graph)
    assert not cycles(graph)


# What the update path may use of the daemon: the cgroups it writes and reads, the metrics it
# counts in, the messages it converts; never the event handling, nor what is kept beside it.
_UPDATE_PATH_USES = {"cgroupfs", "convert", "drift", "metrics", "verify"}


def test_the_daemons_rooms_form_layers_and_the_update_path_reaches_back_into_none() -> None:
    graph = sub_room_imports("daemon")
    assert {"plugin", "updates", "lifecycle", "timers", "explain", "admission"} <= set(graph)
    assert not cycles(graph)
    assert graph["updates"] <= _UPDATE_PATH_USES, graph["updates"] - _UPDATE_PATH_USES
    # the plugin is assembled by the service and shown by the status pages, used by no other
    assert {room for room, targets in graph.items() if "plugin" in targets} <= {"service", "status"}


def test_no_daemon_module_or_class_is_one_big_room() -> None:
    """The daemon's jobs stay in rooms of their own: no module of it grows past 500 lines and no
    class past 400, where the seams between jobs could hide again."""
    daemon = PACKAGE / "daemon"
    too_big = {}
    for path in daemon.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(daemon))
        if (n := len(text.splitlines())) > 500:
            too_big[name] = n
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and (n := node.end_lineno - node.lineno + 1) > 400:
                too_big[f"{name}:{node.name}"] = n
    assert not too_big


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_drawing_is_current() -> None:
    assert DRAWING.read_text(encoding="utf-8") == drawing(), "run: python tests/rooms.py"


def _reach(room: str) -> set[str]:
    """The rooms a room may load: what it may import, and what those may, and so on."""
    seen: set[str] = set()
    todo = list(ALLOWED[room])
    while todo:
        if (next_room := todo.pop()) not in seen:
            seen.add(next_room)
            todo.extend(ALLOWED[next_room])
    return seen


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
def test_importing_a_room_loads_only_what_the_table_allows(room: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *_modules(room)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    loaded = {_room(m) for m in json.loads(out)} - {"", room, "__init__"}
    assert loaded <= _reach(room), f"{room} loads {sorted(loaded - _reach(room))}"
