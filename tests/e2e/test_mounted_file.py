"""The placement file (`expose.file`) on each runtime, read from inside the container.

The runtime bind-mounts the container's directory read-only; the plugin replaces the file in it
by rename when the container's CPUs change. Every read here is `cat` run in the container (its
own mount namespace), compared with the container's real cgroup.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.harness import Container, Run, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30
FILE_DIR = "/.nri-topology"
FILE = f"{FILE_DIR}/placement.json"


def seen(run: Run, container: Container) -> dict:
    """The placement file as the container reads it."""
    proc = run.exec(container, "cat", FILE)
    assert proc.returncode == 0, f"cat {FILE} in the container: {proc.stderr.strip()}"
    return json.loads(proc.stdout)


def seen_once(run: Run, container: Container, cpus: set[int], what: str) -> tuple[dict, float]:
    """Poll the file until it shows `cpus`; the document and how long that took."""

    def shows() -> dict | None:
        doc = seen(run, container)
        return doc if parse_cpus(doc["cpus"]) == cpus else None

    start = time.monotonic()
    doc = wait_for(what, shows, 10)
    assert isinstance(doc, dict)
    return doc, time.monotonic() - start


def test_file_follows_the_shared_cpuset(run: Run) -> None:
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("a Guaranteed container beside a shared one needs at least 2 CPUs")
    run.write_plugin_config(f"expose:\n  file: true\n  file_dir: {FILE_DIR}\n")
    run.start_plugin()
    be = run.run_pod("be", "besteffort")
    c = be.containers[0]
    before = seen(run, c)
    print(f"before: {json.dumps(before, sort_keys=True)}")
    assert parse_cpus(before["cpus"]) == parse_cpus(run.cpus(c)) == cpus
    assert before["mems"] == run.cpuset(c).mems
    assert (before["container"], before["kind"], before["exclusive_cpus"]) == (c.id, "shared", "")

    # Read-only inside the container: neither the file nor its directory takes a write.
    for cmd in (f"echo x > {FILE}", f"touch {FILE_DIR}/other", f"rm {FILE}"):
        proc = run.exec(c, "sh", "-c", cmd)
        assert proc.returncode != 0, f"{cmd!r} succeeded in the container"
        assert "Read-only file system" in proc.stderr, proc.stderr
    assert seen(run, c) == before

    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpus(g.containers[0]))
    assert len(exclusive) == 1
    shrunk, took = seen_once(run, c, cpus - exclusive, "file shows the shrunk cpuset")
    print(f"after the Guaranteed pod ({took:.2f}s): {json.dumps(shrunk, sort_keys=True)}")
    assert parse_cpus(shrunk["cpus"]) == cpus - exclusive
    wait_for("cgroup shrunk", lambda: parse_cpus(run.cpus(c)) == cpus - exclusive, 10)
    assert shrunk["generation"] > before["generation"]
    mine = seen(run, g.containers[0])
    assert (mine["kind"], parse_cpus(mine["exclusive_cpus"])) == ("exclusive", exclusive)

    run.remove_pod(g)
    grown, took = seen_once(run, c, cpus, "file shows the cpuset grown back")
    print(f"after removing it ({took:.2f}s): {json.dumps(grown, sort_keys=True)}")
    # Where re-pins follow the reply, the cgroup grows a little after the decision.
    wait_for("cgroup grown back", lambda: parse_cpus(run.cpus(c)) == cpus, 10)
    assert grown["generation"] > shrunk["generation"]
    # The removed container's directory goes with it on the host.
    wait_for(
        "removed container's directory gone",
        lambda: not (run.dir / "containers" / g.containers[0].id).exists(),
        10,
    )
