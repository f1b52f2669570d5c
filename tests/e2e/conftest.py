"""Fixtures for the end-to-end tests on real runtimes (see harness.py).

Every test that uses a run runs once per runtime (`runtime`, one of harness.RUNTIMES;
NRI_TOPOLOGY_E2E_RUNTIMES=a,b keeps only those). Without root or without a runtime that can be
had, the tests skip and say why; with NRI_TOPOLOGY_E2E=require (as .ci/run sets) the same reasons
fail them instead, so CI cannot pass by skipping. CRI-O alone skips when it is not on the machine
at all (no ../shared beside the checkout), also where e2e is required.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import harness

REQUIRED = os.environ.get("NRI_TOPOLOGY_E2E") == "require"
RUNTIMES = [
    r
    for r in os.environ.get("NRI_TOPOLOGY_E2E_RUNTIMES", ",".join(harness.RUNTIMES)).split(",")
    if r
]


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"e2e required (NRI_TOPOLOGY_E2E=require) but {why}", pytrace=False)
    pytest.skip(f"e2e: {why}")


@pytest.fixture(scope="session")
def e2e_enabled() -> None:
    """Skips (or fails, where required) the e2e tests where they cannot run at all."""
    if os.environ.get("NRI_TOPOLOGY_E2E") == "skip":
        pytest.skip("e2e: NRI_TOPOLOGY_E2E=skip")
    if os.geteuid() != 0:
        _unavailable("not root (the runtimes and cgroups need it)")


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """The runtime a test runs on (harness.RUNTIMES)."""
    return request.param


@pytest.fixture(scope="session")
def tools(e2e_enabled: None, runtime: str) -> harness.Tools:
    try:
        return harness.prepare(runtime)
    except harness.Absent as exc:
        pytest.skip(f"e2e on {runtime}: {exc}")
    except harness.SetupError as exc:
        _unavailable(f"{runtime}: {exc}")
        raise


@pytest.fixture(scope="session")
def base_dir() -> Iterator[Path]:
    # Short: unix socket paths under it must stay within 108 bytes.
    with tempfile.TemporaryDirectory(prefix="nri-e2e-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def image(tools: harness.Tools, base_dir: Path) -> Path:
    return harness.write_image(tools, base_dir / "busybox.tar")


def _run(tools: harness.Tools, base_dir: Path, image: Path, **kwargs) -> Iterator[harness.Run]:
    # pytest never throws a test's exception into its fixture: a SetupError here is the runtime's.
    try:
        with harness.running(tools, base_dir, image, show_logs=True, **kwargs) as run:
            yield run
    except harness.SetupError as exc:
        _unavailable(str(exc))


@pytest.fixture
def run(tools: harness.Tools, base_dir: Path, image: Path) -> Iterator[harness.Run]:
    """A fresh runtime with NRI (no plugin yet)."""
    yield from _run(tools, base_dir, image)


@pytest.fixture
def make_run(tools: harness.Tools, base_dir: Path, image: Path):
    """A factory for runs with other runtime settings (NRI timeout); all cleaned up."""
    made: list[Iterator[harness.Run]] = []

    def make(**kwargs) -> harness.Run:
        gen = _run(tools, base_dir, image, **kwargs)
        made.append(gen)
        return next(gen)

    yield make
    for gen in made:
        for _ in gen:
            pass
