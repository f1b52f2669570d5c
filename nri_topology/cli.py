"""The `nri-topology` command: one subcommand per module in `nri_topology.commands`.

Each command module exposes `HELP` (one line), `configure(parser)` and `main(args) -> int`,
and is imported only when its subcommand runs, so `topology` or `simulate` never load the NRI stack.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from nri_topology import __version__

# subcommand -> module under nri_topology.commands
COMMANDS: dict[str, str] = {
    "run": "run",
    "topology": "topology",
    "simulate": "simulate",
    "validate-config": "validate_config",
    "status": "status",
    "explain": "explain",
    "uninstall": "uninstall",
}


def _load(name: str):
    return importlib.import_module(f"nri_topology.commands.{COMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nri-topology",
        description="NRI plugin placing containers on topologically aligned CPUs and memory.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name, add_help=False)
            continue
        module = _load(name)
        module.configure(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(only).parse_args(argv)
    try:
        return int(_load(args.command).main(args) or 0)
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
