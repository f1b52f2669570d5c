"""`nri-topology run` timing its own share of each CreateContainer, for `go_side.py --split`.

Runs the real daemon (same arguments as `nri-topology run`) with three timers wrapped around it,
per created container id, written as JSON to `$NRI_TOPOLOGY_SPLIT_OUT` when the process ends:

* `request`: the ttrpc request, from its bytes reaching our server to its reply written to the
  socket (decoding, the stub, the plugin, encoding): what the runtime side waits for beyond its
  own work and the socket;
* `plugin`: `TopologyPlugin.create_container` (the daemon's handling, policy included);
* `policy`: `Policy.create` (classifying the request and placing it).

Timers cost about a microsecond each, so use the figures for the split, and the runs without
`--split` for the latencies themselves.

    python -m benchmarks.plugin_side run --socket=... (the arguments of `nri-topology run`)
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nri_topology.cli import main as cli_main
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.nri import stub as stub_module
from nri_topology.policy.policy import Policy
from nri_topology.ttrpc.connection import RequestReceived
from nri_topology.ttrpc.server import TtrpcServer

OUT_ENV = "NRI_TOPOLOGY_SPLIT_OUT"
CREATE = "CreateContainer"

# part -> container id -> nanoseconds of each call
times: dict[str, dict[str, list[int]]] = {"request": {}, "plugin": {}, "policy": {}}


def _note(part: str, container_id: str, started: int, ended: int | None = None) -> None:
    ended = time.perf_counter_ns() if ended is None else ended
    times[part].setdefault(container_id, []).append(ended - started)


class _TimedServer(TtrpcServer):
    """Our ttrpc server, timing CreateContainer from its bytes arriving to its reply sent."""

    arrived = 0

    def data_received(self, data: bytes) -> bool:
        self.arrived = time.perf_counter_ns()  # one request in flight: the runtime waits
        return super().data_received(data)

    async def _handle(self, event: RequestReceived) -> None:
        started = self.arrived
        await super()._handle(event)
        ended = time.perf_counter_ns()
        if event.request.method == CREATE:
            req = api_pb2.CreateContainerRequest.FromString(event.request.payload)
            _note("request", req.container.id, started, ended)


def _wrap() -> None:
    create_container = TopologyPlugin.create_container
    policy_create = Policy.create

    async def timed_create_container(self: TopologyPlugin, pod: Any, ctr: Any) -> Any:
        started = time.perf_counter_ns()
        try:
            return await create_container(self, pod, ctr)
        finally:
            _note("plugin", ctr.id, started)

    def timed_policy_create(self: Policy, pod: Any, ctr: Any) -> Any:
        started = time.perf_counter_ns()
        try:
            return policy_create(self, pod, ctr)
        finally:
            _note("policy", ctr.id, started)

    stub_module.TtrpcServer = _TimedServer  # type: ignore[misc]
    TopologyPlugin.create_container = timed_create_container  # type: ignore[method-assign]
    Policy.create = timed_policy_create  # type: ignore[method-assign]


def _write() -> None:
    out = os.environ.get(OUT_ENV)
    if out:
        Path(out).write_text(json.dumps(times))


if __name__ == "__main__":
    _wrap()
    atexit.register(_write)
    sys.exit(cli_main(sys.argv[1:]))
