"""An NRI plugin that holds its reply to StartContainer, for test_start_order.py.

usage: python -m tests.e2e.hold_start SOCKET DIR

On each StartContainer it sleeps for the seconds the container's `e2e.hold-seconds` annotation
says, then writes DIR/<pod>.replied (the time, from /proc/uptime, a clock the container reads
too) and only then replies: a workload that finds that file ran after the reply was on its way.
DIR/<pod>.held has the time the request came; DIR/ready appears once the runtime synchronized it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from nri_topology.nri import api_pb2
from nri_topology.nri.stub import Plugin, Stub

ANNOTATION = "e2e.hold-seconds"


def uptime() -> str:
    return Path("/proc/uptime").read_text().split()[0]


class HoldStart(Plugin):
    def __init__(self, out: Path) -> None:
        self.out = out

    async def start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        (self.out / f"{pod.name}.held").write_text(uptime())
        await asyncio.sleep(float(ctr.annotations.get(ANNOTATION, "0")))
        (self.out / f"{pod.name}.replied").write_text(uptime())


async def main(socket_path: str, out: Path) -> None:
    def ready() -> None:
        (out / "ready").write_text(uptime())

    await Stub(HoldStart(out), "hold-start", "95", socket_path, on_connect=ready).run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
