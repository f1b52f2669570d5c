"""`nri-topology run`: the NRI plugin daemon.

Command-line options override the configuration file. Exit status: 0 after SIGTERM/SIGINT or when
the runtime that launched the plugin closes its socket, 1 when the NRI connection or the metrics
endpoint cannot be set up or the final checkpoint cannot be written, 2 when the configuration,
topology or policy is unusable at start-up, or another instance still holds the state file after
`state.lock_wait_seconds` (a second instance stands by that long, ready, to take over on upgrade).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nri_topology.daemon.logs import LEVELS, LogFormat

if TYPE_CHECKING:
    from nri_topology.daemon.settings import Overrides

HELP = "run the NRI plugin (connects to the runtime's NRI socket, or fd 3 when launched by it)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML configuration (default /etc/nri-topology/config.yaml if present); "
        "re-read on SIGHUP and when its content changes",
    )
    parser.add_argument("--socket", metavar="PATH", help="the runtime's NRI socket")
    parser.add_argument(
        "--cri-socket", metavar="PATH", help="the runtime's CRI socket, for re-pins"
    )
    parser.add_argument("--plugin-name", metavar="NAME", help="NRI plugin name (external plugins)")
    parser.add_argument(
        "--plugin-index", metavar="NN", help="NRI plugin index, two digits (external plugins)"
    )
    parser.add_argument(
        "--sysfs",
        metavar="DIR",
        help="sysfs root to read the topology from (default: $NRI_TOPOLOGY_SYSFS, else the "
        "configuration's topology.sysfs_root, else /sys)",
    )
    parser.add_argument("--state", metavar="FILE", help="checkpoint file")
    parser.add_argument(
        "--metrics-host", metavar="ADDR", help="metrics/health address (default 127.0.0.1)"
    )
    parser.add_argument(
        "--metrics-port", type=int, metavar="N", help="metrics/health port; 0 turns it off"
    )
    parser.add_argument(
        "--log-format", choices=[f.value for f in LogFormat], help="auto: console on a terminal"
    )
    parser.add_argument("--log-level", choices=LEVELS)
    parser.add_argument(
        "--log-file",
        type=Path,
        metavar="FILE",
        help="append logs here instead of stderr (for plugins the runtime launches)",
    )


def overrides_of(args: argparse.Namespace, environ: Mapping[str, str]) -> Overrides:
    """Command-line values over the config file; `NRI_TOPOLOGY_SYSFS` when --sysfs is absent."""
    from nri_topology.daemon.settings import Overrides

    return Overrides(
        socket=args.socket,
        cri_socket=args.cri_socket,
        plugin_name=args.plugin_name,
        plugin_index=args.plugin_index,
        sysfs=args.sysfs or environ.get("NRI_TOPOLOGY_SYSFS") or None,
        state=args.state,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        log_format=args.log_format,
        log_level=args.log_level,
    )


def main(args: argparse.Namespace) -> int:
    from nri_topology.daemon.service import Daemon, StartupError

    overrides = overrides_of(args, os.environ)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        print(f"--metrics-port must be 0-65535, not {args.metrics_port}", file=sys.stderr)
        return 2
    try:
        stream = args.log_file.open("a", buffering=1) if args.log_file else None
    except OSError as exc:
        print(f"cannot open log file {args.log_file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        daemon = Daemon(args.config, overrides, log_stream=stream)
        try:
            daemon.setup()
        except StartupError as exc:
            print(f"nri-topology: {exc}", file=stream or sys.stderr)
            return 2
        # Modules, topology and policy live as long as the process: keep them out of the
        # collector's full passes, a pause that lands in whichever request is being served.
        gc.collect()
        gc.freeze()
        return asyncio.run(daemon.serve())
    finally:
        if stream is not None:
            stream.close()
