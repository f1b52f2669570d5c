"""The package's rooms: what docs/architecture.md allows each to import, and what each imports.

`python tests/rooms.py` rewrites docs/imports.md, the drawing of the imports as the source has
them; tests/test_layering.py checks the drawing is current and has no arrow the table forbids.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nri_topology"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DRAWING = ROOT / "docs" / "imports.md"

_ROW = re.compile(r"^\| `(?P<room>[a-z_]+)(?:/|\.py)` \|.*\| (?P<imports>[^|]*) \|$")


def allowed() -> dict[str, set[str]]:
    """Room -> the rooms it may import, from the architecture table's last column."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("## Rooms (packages) and what each may touch", 1)[1].split("\n## ", 1)[0]
    rooms: dict[str, set[str]] = {}
    for line in table.splitlines():
        if match := _ROW.match(line):
            rooms[match["room"]] = set(re.findall(r"`([a-z_]+)`", match["imports"]))
    return rooms


def rooms_in_source() -> set[str]:
    """Every package and top-level module of nri_topology but the package's own __init__."""
    return {
        p.stem if p.suffix == ".py" else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
    }


def _imported(path: Path) -> Iterator[tuple[str, int]]:
    """Dotted names a module imports anywhere in it (function-level imports too), with lines."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rpartition(".")[0]  # what a relative import starts from, __init__ too
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def _room(dotted: str, rooms: set[str]) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "nri_topology" or len(parts) < 2 or parts[1] not in rooms:
        return None
    return parts[1]


def imports() -> dict[tuple[str, str], list[str]]:
    """(room, imported room) -> where in the source ("path:line"), for every cross-room import."""
    rooms = rooms_in_source()
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _room(".".join(path.relative_to(ROOT).with_suffix("").parts), rooms)
        if source is None:
            continue
        for dotted, line in _imported(path):
            target = _room(dotted, rooms)
            if target is None or target == source:
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            sites = found.setdefault((source, target), [])
            if where not in sites:
                sites.append(where)
    return found


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def module_imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in it (`TYPE_CHECKING` and
    function-level imports too); a module's own packages are not counted."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = graph.setdefault(name, set())
        for dotted, _ in _imported(path):
            while dotted and dotted not in modules:  # a name imported from a module
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != name and not name.startswith(f"{dotted}."):
                targets.add(dotted)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (each an import cycle), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = [stack.pop()]
            while part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def sub_room_imports(room: str = "policy") -> dict[str, set[str]]:
    """Inside a room: its sub-rooms (sub-packages and modules) -> the sub-rooms they import."""
    prefix = f"nri_topology.{room}."

    def sub(module: str) -> str | None:
        return module.removeprefix(prefix).split(".")[0] if module.startswith(prefix) else None

    graph: dict[str, set[str]] = {}
    for module, targets in module_imports().items():
        source = sub(module)
        if source is None:
            continue
        inside = graph.setdefault(source, set())
        inside.update(t for t in map(sub, targets) if t is not None and t != source)
    return graph


def drawing() -> str:
    """docs/imports.md: a Mermaid graph of the rooms' imports, generated from the source."""
    edges = sorted(imports())
    rooms = sorted(rooms_in_source())
    lines = [
        "# Imports between rooms",
        "",
        "Generated from the source by `python tests/rooms.py` (an arrow is an import anywhere in a",
        "room's modules, function-level ones included); `tests/test_layering.py` fails when this",
        "drawing is stale or shows an arrow that the table in [architecture.md](architecture.md)",
        "does not allow.",
        "",
        "```mermaid",
        "flowchart TD",
        *(f"    {room}[{room}]" for room in rooms),
        *(f"    {a} --> {b}" for a, b in edges),
        "```",
        "",
        "| room | imports |",
        "|---|---|",
        *(
            f"| `{room}` | {', '.join(f'`{b}`' for a, b in edges if a == room) or '—'} |"
            for room in rooms
        ),
        "",
        "## Inside `policy`",
        "",
        "The policy's sub-rooms, named for the steps a request takes (the same reading of the",
        "source; no cycle, `TYPE_CHECKING` imports counted):",
        "",
        "```mermaid",
        "flowchart TD",
        *(
            f"    {a} --> {b}"
            for a, targets in sorted(sub_room_imports().items())
            for b in sorted(targets)
        ),
        "```",
        "",
        "## Inside `daemon`",
        "",
        "The daemon's rooms: event handling (`plugin`), what the policy's answers tell the",
        "operator (`admission`), placements' lives outside their events (`lifecycle`), cold-start",
        "timers and holds (`timers`), explanations (`explain`), the state file (`persistence`,",
        "`writer`, `checkpoint`), verification (`verify`, `drift`, `cgroupfs`), and the update",
        "path (`updates`: schedule, transport, path), which reaches back into none of the others",
        "but the cgroups it writes (no cycle, `TYPE_CHECKING` imports counted):",
        "",
        "```mermaid",
        "flowchart TD",
        *(
            f"    {a} --> {b}"
            for a, targets in sorted(sub_room_imports("daemon").items())
            for b in sorted(targets)
        ),
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    DRAWING.write_text(drawing(), encoding="utf-8")
    print(f"wrote {DRAWING.relative_to(ROOT)}")
