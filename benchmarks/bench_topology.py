"""Topology discovery time: `read_machine` on real sysfs dumps and a large synthetic tree.

Run: ``.venv/bin/python benchmarks/bench_topology.py [--runs N] [--json F]``

Machines: the 144-CPU 4-socket Intel dump and the 128-CPU ARM Kunpeng 920 dump (complete
archives from ../shared/topologies, extracted once), plus a synthetic 256-CPU, 8-NUMA-node
machine with 4 memory-only nodes written by `tests/machines.py`. Without ../shared the two real
machines are read from sysfs trees written from their committed machine files (named "(file)"
in the results): only the files discovery needs, so their times are not the dumps'. After one
warm-up read (so the
files are in the page cache, as they are for /sys), each machine is read `--runs` times;
reported: median, min and max milliseconds per `read_machine` call. Discovery runs once at
plugin start (and on `topology`), so compare with the plugin's start-up budget, not per request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from machines import (
    MACHINES,
    TOPOLOGIES,
    MemoryOnlyNode,
    SyntheticSpec,
    extract,
    load,
    write_machine_sysfs,
    write_sysfs,
)

from nri_topology.topology.sysfs import read_machine


def _time(root: Path, proc: Path | None, runs: int) -> dict[str, float]:
    read_machine(root, proc_root=proc)  # warm-up: page cache, imports
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        read_machine(root, proc_root=proc)
        samples.append((time.perf_counter() - start) * 1000)
    return {
        "median_ms": round(statistics.median(samples), 2),
        "min_ms": round(min(samples), 2),
        "max_ms": round(max(samples), 2),
    }


def _roots(name: str, tmp: Path) -> tuple[str, Path, Path | None]:
    """(label, sysfs root, proc root): the dump when ../shared has it, else its machine file."""
    archive, inner = MACHINES[name]
    if (TOPOLOGIES / archive).is_file():
        base = extract(archive) / inner
        return name, base / "sys", (base / "proc") if (base / "proc").is_dir() else None
    print(f"{name}: no {archive} in ../shared/topologies; using its committed machine file")
    return f"{name} (file)", write_machine_sysfs(tmp / name, load(name)), None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed reads per machine")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("4-socket", "arm128"):
            label, sys_root, proc_root = _roots(name, Path(tmp))
            results[label] = _time(sys_root, proc_root, args.runs)
        spec = SyntheticSpec(
            sockets=2,
            nodes=4,
            cores=16,
            threads=2,
            memory_only=tuple(MemoryOnlyNode(256 << 30, near=n) for n in (0, 2, 4, 6)),
        )
        results["synthetic-256cpu-12node"] = _time(write_sysfs(Path(tmp), spec), None, args.runs)
    for name, r in results.items():
        print(
            f"{name:>24}: median {r['median_ms']:8.2f} ms  "
            f"min {r['min_ms']:8.2f} ms  max {r['max_ms']:8.2f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
