"""Regenerate the machine descriptions bundled in `nri_topology/data/machines/` from sysfs dumps.

The installed package cannot read the shared dumps, so the simulator carries compact
descriptions of a few of them. Run from the repository root, with ../shared beside it:

    .venv/bin/python -m nri_topology.simulate.bundle ../shared/topologies nri_topology/data/machines

Each dump is read with the same topology reader the plugin uses, so a bundled machine is what
the plugin would see on that host.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nri_topology.simulate.machine_spec import dumps, from_machine, parse_spec, to_machine
from nri_topology.topology.model import Machine
from nri_topology.topology.sysfs import read_machine


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    archive: str  # file in the topologies folder
    root: str  # folder inside the archive that holds sys/
    description: str


SOURCES: tuple[Source, ...] = (
    Source(
        "server",
        "nri-plugins-policy-sysfs.tar.bz2",
        "sysfs/server",
        "2-socket Intel, 28 cores x 2 threads per socket, SNC-2 (CPU nodes 0-3, interleaved "
        "CPU ids), PMEM nodes 4-5, isolated CPUs 4-7,60-63",
    ),
    Source(
        "4-socket",
        "nri-plugins-policy-sysfs.tar.bz2",
        "sysfs/4-socket-server-nosnc",
        "4-socket Intel, 18 cores x 2 threads per socket, one NUMA node per socket",
    ),
    Source(
        "desktop",
        "nri-plugins-policy-sysfs.tar.bz2",
        "sysfs/desktop",
        "1 socket, 10 cores x 2 threads, one NUMA node",
    ),
)


def read(root: Path) -> Machine:
    """The machine of an extracted dump folder (holding sys/ and maybe proc/)."""
    proc = root / "proc"
    return read_machine(root / "sys", proc_root=proc if proc.is_dir() else None)


def describe(src: Source, machine: Machine) -> str:
    """The description text of `src`'s machine, as the bundled file holds it."""
    doc = from_machine(
        machine, name=src.name, description=src.description, source=f"{src.archive}:{src.root}"
    )
    # A description that would not load back must never be written.
    to_machine(parse_spec(doc, origin=src.name), origin=src.name)
    return dumps(doc)


def generate(topologies: Path, out_dir: Path, names: Sequence[str] = ()) -> list[Path]:
    """Write `<name>.json` for each source (or the named ones); returns the written files."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="nri-topology-bundle-") as tmp:
        extracted: dict[str, Path] = {}
        for src in SOURCES:
            if names and src.name not in names:
                continue
            if src.archive not in extracted:
                dst = Path(tmp) / src.archive.removesuffix(".tar.bz2")
                with tarfile.open(topologies / src.archive) as tar:
                    tar.extractall(dst, filter="tar")
                extracted[src.archive] = dst
            path = out_dir / f"{src.name}.json"
            path.write_text(describe(src, read(extracted[src.archive] / src.root)))
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topologies", type=Path, help="folder holding the .tar.bz2 dumps")
    parser.add_argument("out_dir", type=Path, help="where to write <name>.json")
    parser.add_argument(
        "--only", action="append", default=[], choices=[s.name for s in SOURCES], help="one name"
    )
    args = parser.parse_args(argv)
    for path in generate(args.topologies, args.out_dir, args.only):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
