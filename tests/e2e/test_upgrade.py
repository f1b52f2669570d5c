"""Upgrading a running plugin on a real containerd as a DaemonSet surge update does it: the new
instance starts beside the old one and stands by, the old one is stopped, the new one takes over.
No running container's cpuset changes and no pod start fails, pods being started throughout."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, Run, free_port, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

GIB = 1 << 30


def snapshot(run: Run) -> dict[str, str]:
    return {c.id: run.cpus(c) for pod in run.pods.values() for c in pod.containers}


class Instance:
    """A second `nri-topology run` on the run's socket and state file, its own port and log."""

    def __init__(self, run: Run) -> None:
        self.port = free_port()
        self.log = run.dir / "plugin-new.log"
        args = run.plugin_args()
        args[args.index("--metrics-port") + 1] = str(self.port)
        script = Path(sys.executable).parent / "nri-topology"
        entry = [str(script)] if script.exists() else [sys.executable, "-m", "nri_topology.cli"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*entry, "run", "--config", str(run.plugin_config), *args],
                stdout=out,
                stderr=out,
                start_new_session=True,
                cwd=REPO,
            )

    def readyz(self) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        except OSError:
            return 0, ""
        finally:
            conn.close()

    def events(self) -> list[dict]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)


def test_surge_upgrade_moves_nothing_and_fails_no_pod_start(run: Run) -> None:
    run.start_plugin()
    run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 8)
    run.run_pod("bu", "burstable", cpu_milli=200)
    run.run_pod("be", "besteffort")
    run.settled()
    before = snapshot(run)

    new = Instance(run)
    try:
        wait_for("the new instance stands by", lambda: new.readyz()[0] == 200, 60)
        _, body = new.readyz()
        assert body.startswith("ready: standby, waiting for the state file:"), body
        assert new.proc.poll() is None  # no exit 2

        started: list[str] = []
        failures: list[str] = []
        done = threading.Event()

        def keep_starting() -> None:  # a kubelet starting pods through the hand-over
            i = 0
            while not done.is_set() and i < 12:  # best-effort: no capacity runs out
                try:
                    pod = run.run_pod(f"during{i}", "besteffort")
                    started.append(pod.id)
                except Exception as exc:  # a failed pod start is what this test looks for
                    failures.append(f"during{i}: {exc}")
                i += 1

        starter = threading.Thread(target=keep_starting)
        starter.start()
        try:
            run.stop_plugin(signal.SIGTERM)  # the DaemonSet controller stops the old pod
            wait_for("the new instance took over", lambda: new.readyz() == (200, "ready\n"), 60)
            took_at = len(started) + len(failures)
            wait_for(
                "pods started after the take-over",
                lambda: len(started) + len(failures) >= took_at + 2 or not starter.is_alive(),
                60,
            )
        finally:
            done.set()
            starter.join(120)
        assert failures == []
        after = {cid: run.cpus(cid) for cid in before}
        assert after == before
        took = [e for e in new.events() if e.get("event") == "took over the state file"]
        assert took
        synced = [e for e in new.events() if e.get("event") == "synchronized with the runtime"]
        assert synced and synced[0]["failed"] == 0
        assert synced[0]["adopted"] >= len(before)
        # A pod started in the moment between the old instance's going and the new one's
        # registration is created unplaced (NRI has no hand-over) and placed at the sync; no
        # container that ran before the upgrade is.
        events = new.events()
        replaced = {e["container_id"] for e in events if e.get("event") == "container re-placed"}
        assert len(replaced) == synced[0]["replaced"]
        assert not replaced & before.keys()
        # The new instance places what comes next.
        pod = run.run_pod("be2", "besteffort")
        created = [
            e
            for e in new.events()
            if e.get("event") == "container created" and e["container_id"] == pod.containers[0].id
        ]
        assert created and created[0]["kind"] == "shared"
    finally:
        new.stop()
