"""`nri-topology run` profiling its own CPU time per event kind, for `go_side.py --profile DIR`.

Runs the real daemon (same arguments as `nri-topology run`) with one cProfile per event kind,
timed in CPU time of the thread, so a loaded machine does not inflate it and waiting for the
runtime costs nothing. A request's arrival at our ttrpc server switches to its kind's profile,
which then also takes what follows the reply until the next request (the decision's log line,
checkpoint slices, updates sent apart). CreateContainer is split by what is created: the fill
(`fill`) and each probe of `go_side.py`. At exit each profile is written to
`$NRI_TOPOLOGY_PROFILE_DIR/KIND.prof` with the request count in `counts.json`; `report` turns
them into tables per kind: CPU µs per request by where it goes, and the costliest functions.
The CPU time of each request, unprofiled with `$NRI_TOPOLOGY_PROFILE_CPU_ONLY` set, goes to
`cpu.json` (kind -> nanoseconds per request, until the next request came).

    python -m benchmarks.profile_side run --socket=... (the arguments of `nri-topology run`)
    .venv/bin/python benchmarks/profile_side.py DIR [--top 15]
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nri_topology.nri import api_pb2
from nri_topology.nri import stub as stub_module
from nri_topology.ttrpc.connection import RequestReceived
from nri_topology.ttrpc.server import TtrpcServer

DIR_ENV = "NRI_TOPOLOGY_PROFILE_DIR"
PROBES = ("guaranteed-2cpu", "burstable")  # go_side.py's probes, by container id

# Where a function's own time goes, by the first fragment of its file (or builtin's name) found.
WHERE = (
    ("protobuf", ("google/protobuf", "upb", "FromString", "SerializeToString", "Parse")),
    ("policy", ("nri_topology/policy/", "nri_topology/topology/")),
    ("convert", ("nri_topology/daemon/convert.py",)),
    ("logging", ("structlog/", "/logging/", "nri_topology/daemon/logs.py", "daemon/explain.py")),
    ("metrics", ("prometheus_client/", "nri_topology/daemon/metrics.py")),
    ("checkpoint", ("daemon/persistence.py", "daemon/writer.py", "daemon/checkpoint.py", "json")),
    ("update path", ("nri_topology/daemon/updates/",)),
    ("daemon", ("nri_topology/daemon/",)),
    ("wire", ("nri_topology/nri/", "nri_topology/ttrpc/")),
    ("event loop", ("asyncio/", "selectors", "socket", "epoll", "'send'", "'recv'")),
)

CPU_ONLY_ENV = "NRI_TOPOLOGY_PROFILE_CPU_ONLY"  # set: no profiles, the CPU time per request only

_profiles: dict[str, cProfile.Profile] = {}
_counts: dict[str, int] = {}
_active: list[cProfile.Profile] = []
_cpu: dict[str, list[int]] = {}  # kind -> CPU ns of each request, until the next one came
_last: list[tuple[str, int]] = []  # the kind and CPU clock of the latest request


def _kind(event: RequestReceived) -> str:
    """The event kind of a request; CreateContainer by what it creates."""
    method = event.request.method
    if method == "StateChange":
        kind = api_pb2.StateChangeEvent.FromString(event.request.payload).event
        return api_pb2.Event.Name(kind)
    if method == "CreateContainer":
        cid = api_pb2.CreateContainerRequest.FromString(event.request.payload).container.id
        return f"{method}-{cid if cid in PROBES else 'fill'}"
    return method


def _switch(kind: str) -> None:
    """Count the CPU time from now on, and profile it unless CPU-only, into `kind`'s."""
    now = time.thread_time_ns()
    if _last:
        last, since = _last.pop()
        _cpu.setdefault(last, []).append(now - since)
    _last.append((kind, now))
    _counts[kind] = _counts.get(kind, 0) + 1
    if os.environ.get(CPU_ONLY_ENV):
        return
    if _active:
        _active.pop().disable()
    profile = _profiles.setdefault(kind, cProfile.Profile(time.thread_time))
    profile.enable()
    _active.append(profile)


class _ProfiledServer(TtrpcServer):
    """Our ttrpc server, switching profiles as each request starts."""

    async def _handle(self, event: RequestReceived) -> None:
        _switch(_kind(event))
        await super()._handle(event)


def _write() -> None:
    if _active:
        _active.pop().disable()
    out = Path(os.environ[DIR_ENV])
    out.mkdir(parents=True, exist_ok=True)
    for kind, profile in _profiles.items():
        profile.dump_stats(out / f"{kind}.prof")
    (out / "counts.json").write_text(json.dumps(_counts))
    (out / "cpu.json").write_text(json.dumps(_cpu))


def _where(func: tuple[str, int, str]) -> str:
    text = f"{func[0]} {func[2]}"
    return next((name for name, parts in WHERE if any(p in text for p in parts)), "other")


def _own_time(
    func: tuple[str, int, str], own: float, callers: dict[tuple[str, int, str], tuple]
) -> list[tuple[str, float]]:
    """Where a function's own time goes: a builtin's (other than protobuf's) to its callers'."""
    where = _where(func)
    if func[0] != "~" or where != "other" or not callers:
        return [(where, own)]
    return [(_where(caller), times[2]) for caller, times in callers.items()]


def _label(func: tuple[str, int, str]) -> str:
    path, line, name = func
    return f"{path.split('nri_topology/', 1)[-1]}:{line}({name})" if path != "~" else name


def report(directory: Path, top: int) -> str:
    """Markdown tables per event kind: CPU µs per request by where its own time goes, and the
    functions with the most cumulative time."""
    counts = json.loads((directory / "counts.json").read_text())
    out = []
    for kind, requests in sorted(counts.items()):
        stats = pstats.Stats(str(directory / f"{kind}.prof")).stats  # type: ignore[attr-defined]
        shares: dict[str, float] = {}
        for func, (_, _, own, _, callers) in stats.items():
            for where, seconds in _own_time(func, own, callers):
                shares[where] = shares.get(where, 0.0) + seconds
        total = sum(shares.values())
        parts = ", ".join(
            f"{name} {us / requests * 1e6:.0f}"
            for name, us in sorted(shares.items(), key=lambda kv: -kv[1])
        )
        out.append(f"\n### {kind}: {total / requests * 1e6:.0f} µs CPU per request ({requests})")
        out.append(f"\nBy own time, µs per request: {parts}.\n")
        out.append("| cumulative µs per request | calls per request | function |\n|---|---|---|")
        costly = sorted(stats.items(), key=lambda kv: -kv[1][3])
        for func, (_, calls, _, cum, _) in costly[:top]:
            out.append(
                f"| {cum / requests * 1e6:.1f} | {calls / requests:.2g} | `{_label(func)}` |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tables from the profiles `run` wrote")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    print(report(args.directory, args.top))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        from nri_topology.cli import main as cli_main

        stub_module.TtrpcServer = _ProfiledServer  # type: ignore[misc]
        atexit.register(_write)
        sys.exit(cli_main(sys.argv[1:]))
    sys.exit(main())
