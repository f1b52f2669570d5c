"""The runtime awaits the plugins' replies to StartContainer before it starts the container's
task: what the plugin's zero exclusivity window rests on (docs/protocol.md, "Written first").

A plugin (hold_start.py) holds its reply; the container's workload writes, as its first act,
the time and whether the reply was on its way by then. Within the runtime's NRI request timeout
the workload runs only after the reply; past it the runtime gives up on the plugin and starts
the task anyway."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from nri_topology.cri import api_pb2 as cri
from tests.e2e.harness import REPO, Run, Spec, wait_for
from tests.e2e.hold_start import ANNOTATION

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

HOLD = 1.0  # within the harness's NRI request timeout, 2 s
PAST_TIMEOUT = 2.5


def _holding_plugin(run: Run) -> Path:
    """The holding plugin, beside the runtime (the run's cleanup ends it); its directory."""
    out = run.dir / "hold"
    out.mkdir()
    log = (run.dir / "hold-start.log").open("ab")
    subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.hold_start", str(run.nri_socket), str(out)],
        stdout=log,
        stderr=log,
        start_new_session=True,
        cwd=REPO,
    )
    log.close()
    wait_for("the holding plugin synchronized", (out / "ready").exists, 30)
    return out


def _start_held(run: Run, out: Path, name: str, hold: float) -> tuple[float, dict[str, float]]:
    """A pod whose container's start is held `hold` s; how long StartContainer took, and the
    uptimes at which the request came (held), the reply went (replied, within the timeout),
    the workload ran (ran, with after=1 when it found the reply on its way)."""
    script = (
        f"read t _ < /proc/uptime; [ -e /hold/{name}.replied ] && a=1 || a=0; "
        f'echo "$t $a" > /hold/{name}.ran; exec sleep 1000000'
    )
    spec = Spec(
        command=("/bin/sh", "-c", script),
        mounts=(cri.Mount(container_path="/hold", host_path=str(out)),),
    )
    pod = run.run_pod(name, annotations={ANNOTATION: str(hold)}, start=False, spec=spec)
    assert run.cri is not None
    began = time.monotonic()
    run.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=pod.containers[0].id))
    took = time.monotonic() - began
    ran = out / f"{name}.ran"
    t, after = wait_for("the workload ran", lambda: ran.exists() and ran.read_text().split(), 10)
    times = {
        "ran": float(t),
        "after": float(after),
        "held": float((out / f"{name}.held").read_text()),
    }
    if hold < PAST_TIMEOUT:
        times["replied"] = float((out / f"{name}.replied").read_text())
    print(f"{run.tools.runtime} {name}: StartContainer {took:.2f}s, {times}")
    return took, times


def test_the_workload_runs_only_after_the_reply_to_start_container(run: Run) -> None:
    out = _holding_plugin(run)
    took, t = _start_held(run, out, "held", HOLD)
    assert t["after"] == 1, t  # the reply was on its way when the workload began
    assert t["ran"] >= t["replied"] >= t["held"] + HOLD - 0.01, t
    assert took >= HOLD
    # Past the runtime's request timeout the runtime gives up on the plugin and starts the task:
    # a plugin's wait before its reply must stay well within that timeout.
    took, t = _start_held(run, out, "late", PAST_TIMEOUT)
    assert t["after"] == 0, t
    assert t["held"] + 1.5 <= t["ran"] < t["held"] + PAST_TIMEOUT, t
    assert took < PAST_TIMEOUT
