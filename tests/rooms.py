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
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    DRAWING.write_text(drawing(), encoding="utf-8")
    print(f"wrote {DRAWING.relative_to(ROOT)}")
