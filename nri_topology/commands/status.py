"""`nri-topology status`: the running daemon's pool tree, every container's placement and what is
free, read from its status endpoint on this host (text, `--json`, or the picture with `--svg`).

Exit status: 0 when shown, 1 when no daemon answers or it refuses, 2 for a file that cannot be
written.
"""

from __future__ import annotations

import argparse
import http.client
import sys
from pathlib import Path
from urllib.parse import urlencode

from nri_topology.config.schema import DEFAULT_METRICS_PORT

HELP = "show the running plugin's pools, every container's placement and the free capacity"


def add_endpoint(parser: argparse.ArgumentParser) -> None:
    """Where the daemon's status endpoint listens (its metrics address and port)."""
    parser.add_argument(
        "--host", default="127.0.0.1", help="the daemon's metrics address (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"the daemon's metrics port (default {DEFAULT_METRICS_PORT})",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_endpoint(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="one JSON document")
    output.add_argument("--svg", metavar="FILE", type=Path, help="write the picture to FILE")


class EndpointError(Exception):
    """No answer from the daemon, or an answer other than 200; the message says which."""


def fetch(host: str, port: int, path: str, **query: str) -> bytes:
    """GET one page of the daemon's status endpoint."""
    target = f"{path}?{urlencode(query)}" if query else path
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", target)
        reply = conn.getresponse()
        body = reply.read()
    except OSError as exc:
        raise EndpointError(
            f"no nri-topology daemon answers on {host}:{port} ({exc.strerror or exc}); "
            "is it running, with its metrics endpoint on (--host/--port)?"
        ) from None
    finally:
        conn.close()
    if reply.status != 200:
        raise EndpointError(body.decode(errors="replace").strip() or f"HTTP {reply.status}")
    return body


def main(args: argparse.Namespace) -> int:
    fmt = "json" if args.json else "svg" if args.svg else "text"
    try:
        body = fetch(args.host, args.port, "/status", format=fmt)
    except EndpointError as exc:
        print(f"nri-topology status: {exc}", file=sys.stderr)
        return 1
    if args.svg is not None:
        try:
            args.svg.write_bytes(body)
        except OSError as exc:
            print(f"nri-topology status: cannot write {args.svg}: {exc}", file=sys.stderr)
            return 2
        print(f"picture written to {args.svg}")
        return 0
    sys.stdout.write(body.decode())
    return 0
