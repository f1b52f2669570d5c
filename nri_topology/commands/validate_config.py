"""`nri-topology validate-config FILE`: check a configuration file before deploying it.

Prints "FILE: valid" and the effective configuration (defaults filled in, CPU amounts spelled
out) and exits 0, or prints one line per problem, each naming the key, and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from nri_topology.config.load import ConfigError, read_config
from nri_topology.config.validate import as_document
from nri_topology.configured import policy_options
from nri_topology.policy.options import CpuAmount
from nri_topology.quantity import format_milli
from nri_topology.topology import cpuset

HELP = "check a configuration file and show the effective settings"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="the YAML configuration file")


def describe_cpus(amount: CpuAmount) -> str:
    """A CPU amount in the words an operator reads it in."""
    if amount.cpus is not None:
        return f"CPUs {cpuset.format(amount.cpus)}"
    if amount.exclude is not None:
        return f"all CPUs except {cpuset.format(amount.exclude)}"
    return f"{format_milli(amount.milli or 0)} CPU"


def main(args: argparse.Namespace) -> int:
    try:
        config, notes = read_config(args.file)
    except ConfigError as e:
        for line in e.errors:
            print(line, file=sys.stderr)
        return 1
    options = policy_options(config)
    print(f"{args.file}: valid")
    for note in notes:
        print(f"note: {note}")
    effective = as_document(config)
    policy = effective["policy"]
    policy["reserved_resources"] = describe_cpus(options.reserved_resources)
    available = options.available_resources
    policy["available_resources"] = "all CPUs" if available is None else describe_cpus(available)
    print(yaml.safe_dump(effective, sort_keys=False, default_flow_style=False).rstrip())
    return 0
