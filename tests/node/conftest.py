"""One real single-node cluster per session (cluster.py) on containerd 2.x, with the project's
image built and imported. Without root or ../shared's Kubernetes binaries the suite skips with the
reason; with NRI_TOPOLOGY_E2E=require (.ci/run) a node that cannot be set up fails it, while a
public clone without ../shared skips, as CRI-O does."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.conftest import _unavailable, e2e_enabled

__all__ = ["e2e_enabled"]  # the e2e suite's fixture: root, NRI_TOPOLOGY_E2E
from tests.node import cluster

RUNTIME = "containerd-2"
# The chart's default image, as packaging/image/build.py names it.
IMAGE_REF = "ghcr.io/nri-topology/nri-topology"


@pytest.fixture(scope="session")
def node(request: pytest.FixtureRequest) -> Iterator[cluster.Cluster]:
    request.getfixturevalue("e2e_enabled")
    try:
        bins = cluster.binaries()
        tools = harness.prepare(RUNTIME)
        cluster.host_packages()
    except harness.Absent as exc:
        pytest.skip(f"node: {exc}")
    except (harness.SetupError, subprocess.CalledProcessError) as exc:
        _unavailable(f"node: {exc}")
        raise
    with tempfile.TemporaryDirectory(prefix="nri-node-", dir="/tmp") as d:
        base = Path(d)
        busybox = harness.write_image(tools, base / "busybox.tar")
        plugin = base / "nri-topology.oci.tar"
        built = subprocess.run(
            [sys.executable, str(harness.REPO / "packaging/image/build.py"), "--out", str(plugin)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if built.returncode != 0:
            _unavailable(f"node: the image does not build: {built.stderr[-2000:]}")
        try:
            with cluster.node(tools, base, busybox, bins) as made:
                made.run.import_archive(plugin, f"{IMAGE_REF}:{cluster.version()}")
                yield made
        except harness.SetupError as exc:
            _unavailable(f"node: {exc}")
