"""`nri-topology explain NAMESPACE/POD[/CONTAINER]`: why the running daemon gave a container its
CPUs and memory: its placement now and the decision that made it, with the scoring trace of every
pool considered. Read from the daemon's status endpoint on this host.

Exit status: 0 when shown, 1 when no daemon answers or it knows no such container.
"""

from __future__ import annotations

import argparse
import sys

from nri_topology.commands.status import EndpointError, add_endpoint, fetch

HELP = "show why the running plugin placed a container where it is (its decision trace)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "container",
        metavar="NAMESPACE/POD[/CONTAINER]",
        help="every container of the pod when no container is named",
    )
    add_endpoint(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document")


def main(args: argparse.Namespace) -> int:
    fmt = "json" if args.json else "text"
    try:
        body = fetch(args.host, args.port, "/explain", container=args.container, format=fmt)
    except EndpointError as exc:
        print(f"nri-topology explain: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(body.decode())
    return 0
