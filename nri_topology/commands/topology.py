"""`nri-topology topology`: show the machine as the plugin sees it, as a tree or as JSON.

The JSON form is documented in `nri_topology.topology.render` (`JSON_SCHEMA`). `--machine-json`
prints instead a machine description (docs/simulate.md) that `simulate --machine FILE` loads as
exactly the machine read here; `--nrt` the NodeResourceTopology object the daemon publishes
(`nri_topology.nrt.build`). Unreadable or inconsistent sysfs data exits with status 2 and
the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nri_topology.config.schema import Config
from nri_topology.simulate.machine_spec import dumps, from_machine
from nri_topology.topology.model import Machine
from nri_topology.topology.render import machine_json, machine_text
from nri_topology.topology.sysfs import ENV_SYSFS, TopologyError, default_sysfs_root, read_machine

HELP = "show the discovered CPU, NUMA and memory topology (tree or JSON)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sysfs",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"sysfs root to read (default: ${ENV_SYSFS} or /sys)",
    )
    parser.add_argument(
        "--proc",
        type=Path,
        default=None,
        metavar="DIR",
        help="procfs root for the kernel command line (isolcpus=); not read unless given",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a tree")
    parser.add_argument(
        "--nrt",
        action="store_true",
        help="print the node's NodeResourceTopology object (topology.node.k8s.io/v1alpha2) as "
        "JSON, as the daemon publishes it with no containers placed",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --nrt: the configuration file whose policy and nrt sections apply",
    )
    parser.add_argument(
        "--node-name",
        default=None,
        metavar="NAME",
        help="with --nrt: the object's name (default: nrt.node_name, $NODE_NAME, the host name)",
    )
    parser.add_argument(
        "--machine-json",
        action="store_true",
        help="print a machine description for `simulate --machine FILE` (docs/simulate.md)",
    )
    parser.add_argument(
        "--name", default="this-host", help="the machine's name in --machine-json output"
    )
    parser.add_argument(
        "--windows-groups",
        action="store_true",
        help="show CPU sets as Windows processor groups (group:0xMASK, KEP-4885)",
    )


def main(args: argparse.Namespace) -> int:
    root = args.sysfs if args.sysfs is not None else default_sysfs_root()
    try:
        machine = read_machine(root, proc_root=args.proc)
    except (TopologyError, OSError) as err:
        print(f"nri-topology topology: {err}", file=sys.stderr)
        return 2
    if args.nrt:
        return _nrt(machine, args)
    if args.machine_json:
        doc = from_machine(machine, name=args.name, description="", source=str(root))
        sys.stdout.write(dumps(doc))
    elif args.json:
        doc = machine_json(machine, windows_groups=args.windows_groups)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(machine_text(machine, windows_groups=args.windows_groups))
    return 0


def _nrt(machine: Machine, args: argparse.Namespace) -> int:
    from nri_topology.config.load import ConfigError, read_config
    from nri_topology.configured import policy_options
    from nri_topology.nrt.build import node_name, node_resource_topology
    from nri_topology.policy.policy import Policy
    from nri_topology.policy.types import PolicyError

    try:
        config = read_config(args.config).config if args.config else Config()
        policy = Policy(machine, policy_options(config))
    except (ConfigError, PolicyError) as err:
        print(f"nri-topology topology: {err}", file=sys.stderr)
        return 2
    nrt = config.nrt
    doc = node_resource_topology(
        machine,
        policy.node_capacity(),
        args.node_name or node_name(nrt.node_name),
        policy=nrt.topology_manager_policy,
        scope=nrt.topology_manager_scope,
    )
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return 0
