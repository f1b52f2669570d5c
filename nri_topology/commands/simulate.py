"""`nri-topology simulate`: place a workload on a machine offline and show every decision.

With no arguments it runs the bundled default workload on the bundled 2-socket SNC server with
PMEM and isolated CPUs: the README's first command. Exit status: 0 when every step went as the
workload expected, 1 when one did not, 2 when the machine, workload or config is unusable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "place a workload on a (bundled or sysfs) machine offline and show every decision"

DEFAULT_WORKLOAD = "default"
DEFAULT_MACHINE = "server"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Workload format and JSON schema: docs/simulate.md. "
        "Examples:\n  nri-topology simulate\n"
        "  nri-topology simulate --machine 4-socket --tree\n"
        "  nri-topology simulate --sysfs /sys --workload my.yaml --json"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--machine",
        metavar="NAME|FILE",
        help="a bundled machine (see --list) or a machine description file "
        f"(default: the workload's machine, else {DEFAULT_MACHINE})",
    )
    where.add_argument(
        "--sysfs",
        metavar="DIR",
        type=Path,
        help="read the machine from a sysfs tree (e.g. /sys, or a dump holding sys/ and proc/)",
    )
    parser.add_argument(
        "--workload",
        metavar="NAME|FILE",
        help="a workload YAML file or a bundled workload (default: the bundled workload named "
        f"after --machine if there is one, else {DEFAULT_WORKLOAD})",
    )
    parser.add_argument(
        "--config", metavar="FILE", type=Path, help="policy options from a config file"
    )
    parser.add_argument(
        "--until",
        metavar="STEP",
        type=int,
        help="stop after this step (1-based): the tree, picture and JSON show the node then",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json", action="store_true", help="print one JSON document instead of tables"
    )
    parser.add_argument("--explain", action="store_true", help="show each decision's scoring trace")
    parser.add_argument(
        "--tree", action="store_true", help="draw the pool tree with assignments at the end"
    )
    parser.add_argument("--svg", metavar="FILE", type=Path, help="write a picture of the pool tree")
    output.add_argument("--list", action="store_true", help="list bundled machines and workloads")


def _default_workload(machine: str | None) -> str:
    """The bundled workload written for a bundled machine, else the default one."""
    from nri_topology.simulate import workload

    return machine if machine in workload.bundled_workload_names() else DEFAULT_WORKLOAD


def main(args: argparse.Namespace) -> int:
    from nri_topology.simulate import machine_spec, workload
    from nri_topology.simulate.session import SimulationError, load_inputs, simulate

    if args.list:
        print("bundled machines: " + ", ".join(machine_spec.bundled_names()))
        print("bundled workloads: " + ", ".join(workload.bundled_workload_names()))
        return 0
    try:
        inputs = load_inputs(
            machine=args.machine,
            sysfs=args.sysfs,
            workload=args.workload or _default_workload(args.machine),
            config=args.config,
            until=args.until,
        )
    except SimulationError as exc:
        print(f"nri-topology simulate: {exc}", file=sys.stderr)
        return 2
    for warning in inputs.machine.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    sim = simulate(inputs)

    from nri_topology.simulate import render_json, render_svg, render_text

    if args.json:
        sys.stdout.write(render_json.render(sim, explain=args.explain))
    else:
        sys.stdout.write(render_text.steps_table(sim, explain=args.explain))
        if args.tree:
            sys.stdout.write("\n" + render_text.pool_tree(sim))
    if args.svg is not None:
        try:
            name = sim.workload.name or "workload"
            title = f"nri-topology simulate: {name} on {sim.machine_name}"
            args.svg.write_text(render_svg.render(sim, title))
        except OSError as exc:
            print(f"nri-topology simulate: cannot write {args.svg}: {exc}", file=sys.stderr)
            return 2
        if not args.json:
            print(f"picture written to {args.svg}")
    return 0 if sim.as_expected else 1
