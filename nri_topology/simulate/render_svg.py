"""`--svg FILE`: a picture of the pool tree with every CPU colored by who holds it.

Pools are nested boxes (root around sockets around NUMA nodes); the innermost pools show their
CPUs as a grid, one column per physical core with its threads stacked. A CPU is colored by the
container that holds it exclusively, or grey when reserved, pale blue when shared and pale yellow
when isolated and free. Hovering a CPU tells its owner (SVG <title>). A legend lists containers
with their pool, kind and CPUs, so shared and reserved placements show too.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

from nri_topology.policy.types import CpuKind
from nri_topology.policy.views import PoolView
from nri_topology.quantity import format_bytes, format_cores
from nri_topology.simulate.render_text import children, describe_machine
from nri_topology.simulate.runner import NodeAssignment, NodeState
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine

CELL = 26  # CPU cell pitch
CORES_PER_ROW = 8
PAD = 10
HEADER = 54  # pool name, CPU capacity and memory lines
GAP = 12
LEGEND_CPU_LIST = 12  # longer exclusive sets are counted in the legend (the cells show them)
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"

RESERVED = "#c7c9cc"
SHARED = "#dbe9fb"
ISOLATED_FREE = "#fdf1c7"
# Distinct, readable on white, in an order where neighbours differ strongly.
PALETTE = (
    "#e4572e",
    "#17bebb",
    "#7b2cbf",
    "#ffb400",
    "#2e86ab",
    "#76b041",
    "#d81e5b",
    "#8a5a44",
    "#3d348b",
    "#f18701",
    "#00a878",
    "#b5179e",
)
DEPTH_FILLS = ("#f7f7f9", "#eef1f5", "#e6ebf2", "#dde4ee")


@dataclass(frozen=True, slots=True)
class _Size:
    w: int
    h: int


def _cores_of(machine: Machine, cpus: frozenset[int]) -> list[list[int]]:
    groups: dict[tuple[int, int, int], list[int]] = {}
    for c in sorted(cpus):
        groups.setdefault(machine.cpus[c].core_key, []).append(c)
    return sorted(groups.values(), key=min)


class _Picture:
    def __init__(self, sim: NodeState) -> None:
        self.sim = sim
        self.tpc = max(1, sim.machine.threads_per_core)
        ordered = sorted(sim.assignments.values(), key=lambda a: a.id)
        self.color = {a.id: PALETTE[i % len(PALETTE)] for i, a in enumerate(ordered)}
        self.owner: dict[int, NodeAssignment] = {}
        for a in ordered:
            for c in a.exclusive:
                self.owner[c] = a
        self.reserved = frozenset().union(*(p.reserved for p in sim.pools))
        self.out: list[str] = []
        self._sizes: dict[str, _Size] = {}

    def size(self, pool: PoolView) -> _Size:
        if pool.name in self._sizes:
            return self._sizes[pool.name]
        kids = children(self.sim.pools, pool.name)
        if kids:
            sizes = [self.size(k) for k in kids]
            w = 2 * PAD + sum(s.w for s in sizes) + GAP * (len(sizes) - 1)
            h = HEADER + max(s.h for s in sizes) + PAD
        else:
            cores = len(_cores_of(self.sim.machine, pool.cpus))
            cols = min(CORES_PER_ROW, max(1, cores))
            rows = -(-cores // cols)
            w = max(2 * PAD + cols * CELL, 250)
            h = HEADER + rows * (self.tpc * CELL + 6) + PAD
        self._sizes[pool.name] = _Size(w, h)
        return self._sizes[pool.name]

    def text(
        self,
        x: float,
        y: float,
        s: str,
        size: int = 12,
        weight: str = "normal",
        fill: str = "#1f2328",
        anchor: str = "start",
    ) -> None:
        self.out.append(
            f"<text x='{x:g}' y='{y:g}' {FONT} font-size='{size}' font-weight='{weight}' "
            f"fill='{fill}' text-anchor='{anchor}'>{escape(s)}</text>"
        )

    def pool(self, pool: PoolView, x: int, y: int) -> None:
        size = self.size(pool)
        fill = DEPTH_FILLS[min(pool.depth, len(DEPTH_FILLS) - 1)]
        self.out.append(
            f"<rect x='{x}' y='{y}' width='{size.w}' height='{size.h}' rx='8' "
            f"fill='{fill}' stroke='#8c959f' stroke-width='1'/>"
        )
        self.text(x + PAD, y + 17, pool.name, 13, "bold")
        self.chips(pool, x + PAD + 9 * len(pool.name) + 10, y + 12)
        cpu = f"CPU {format_cores(pool.free_milli)} of {format_cores(pool.capacity_milli)} free"
        self.text(x + PAD, y + 32, cpu, 10, fill="#57606a")
        mems = "  ".join(
            f"{t.upper()} {cpuset.format(m.nodes)}: {format_bytes(m.free)} free"
            for t, m in pool.memory.items()
        )
        self.text(x + PAD, y + 45, mems, 10, fill="#57606a")
        kids = children(self.sim.pools, pool.name)
        if kids:
            cx = x + PAD
            for kid in kids:
                self.pool(kid, cx, y + HEADER)
                cx += self.size(kid).w + GAP
            return
        cores = _cores_of(self.sim.machine, pool.cpus)
        cols = min(CORES_PER_ROW, max(1, len(cores)))
        for i, core in enumerate(cores):
            row, col = divmod(i, cols)
            for t, cpu in enumerate(core):
                self.cpu(
                    cpu,
                    pool,
                    x + PAD + col * CELL,
                    y + HEADER + row * (self.tpc * CELL + 6) + t * CELL,
                )

    def chips(self, pool: PoolView, x: int, y: int) -> None:
        """A dot per container placed in the pool, so shared and reserved ones show too."""
        here = [a for a in sorted(self.sim.assignments.values(), key=lambda a: a.id)]
        for i, a in enumerate(x for x in here if x.pool == pool.name):
            self.out.append(
                f"<g><title>{escape(a.id)} ({a.kind.value})</title><circle cx='{x + i * 14}' "
                f"cy='{y}' r='5.5' fill='{self.color[a.id]}' stroke='#ffffff'/></g>"
            )

    def cpu(self, cpu: int, pool: PoolView, x: int, y: int) -> None:
        owner = self.owner.get(cpu)
        if owner is not None:
            fill, who = self.color[owner.id], f"{owner.id} ({owner.kind.value})"
        elif cpu in self.reserved:
            fill, who = RESERVED, "reserved"
        elif cpu in self.sim.machine.isolated:
            fill, who = ISOLATED_FREE, "isolated, free"
        elif cpu in pool.shared:
            fill, who = SHARED, "shared"
        else:
            fill, who = "#ffffff", "unused"
        dash = " stroke-dasharray='3 2'" if cpu in self.sim.machine.isolated else ""
        self.out.append(
            f"<g><title>CPU {cpu}: {escape(who)}</title>"
            f"<rect x='{x + 1}' y='{y + 1}' width='{CELL - 2}' height='{CELL - 2}' rx='3' "
            f"fill='{fill}' stroke='#57606a' stroke-width='0.8'{dash}/></g>"
        )
        light = owner is None
        self.text(
            x + CELL / 2,
            y + CELL / 2 + 4,
            str(cpu),
            9,
            fill="#1f2328" if light else "#ffffff",
            anchor="middle",
        )

    def legend(self, x: int, y: int) -> int:
        swatches = [
            (RESERVED, "reserved CPU"),
            (SHARED, "shared CPU"),
            (ISOLATED_FREE, "isolated CPU, free (dashed border: isolated)"),
        ]
        for i, (color, label) in enumerate(swatches):
            sx = x + i * 230
            self.out.append(
                f"<rect x='{sx}' y='{y}' width='14' height='14' rx='2' fill='{color}' "
                "stroke='#57606a' stroke-width='0.8'/>"
            )
            self.text(sx + 20, y + 11, label, 11)
        y += 28
        for a in sorted(self.sim.assignments.values(), key=lambda a: a.id):
            self.out.append(
                f"<rect x='{x}' y='{y}' width='14' height='14' rx='2' fill='{self.color[a.id]}'/>"
            )
            self.text(x + 20, y + 11, a.id, 11, "bold")
            self.text(x + 300, y + 11, _legend_line(a), 11)
            y += 20
        return y


def _legend_line(a: NodeAssignment) -> str:
    """Kind, pool and what the container holds, short enough for one line."""
    parts = [f"{a.kind.value} in {a.pool}"]
    if len(a.exclusive) > LEGEND_CPU_LIST:
        parts.append(f"{len(a.exclusive)} CPUs of its own")
    elif a.exclusive:
        parts.append(f"own CPUs {cpuset.format(a.exclusive)}")
    if a.cpus is None:
        parts.append("pinning left alone")
    elif a.kind is CpuKind.RESERVED:
        parts.append(f"CPUs {cpuset.format(a.cpus)}")
    elif a.cpus != a.exclusive:
        n = len(a.cpus - a.exclusive)
        parts.append(f"{'plus ' if a.exclusive else ''}{n} shared CPU{'s' if n != 1 else ''}")
    if a.mems is not None:
        parts.append(f"memory nodes {cpuset.format(a.mems)}")
    return ", ".join(parts)


def render(sim: NodeState, title: str) -> str:
    """The whole picture as an SVG document."""
    pic = _Picture(sim)
    pic.text(PAD, 22, title, 16, "bold")
    pic.text(PAD, 42, describe_machine(sim.machine, sim.machine_name), 11, fill="#57606a")
    roots = children(sim.pools, None)
    top = 58
    x = PAD
    for root in roots:
        pic.pool(root, x, top)
        x += pic.size(root).w + GAP
    body_h = max((pic.size(r).h for r in roots), default=0)
    height = pic.legend(PAD, top + body_h + 18) + PAD
    width = max(x - GAP + PAD, 900)
    head = [
        "<?xml version='1.0' encoding='UTF-8'?>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}'>",
        f"<title>{escape(title)}</title>",
        f"<rect width='{width}' height='{height}' fill='#ffffff'/>",
    ]
    return "\n".join([*head, *pic.out, "</svg>"]) + "\n"
