"""Fixtures shared by test modules, and where test files go."""

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import settings

_SHM = Path("/dev/shm")

# Property tests check behaviour, never time: on a loaded 2-core machine one example can take
# twenty times its usual time, and hypothesis' per-example deadline then fails a correct test.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")


def pytest_configure(config: pytest.Config) -> None:
    """Put `tmp_path` on a memory file system when the host has one and no --basetemp is given.

    Tests write thousands of small files (sysfs trees, checkpoints written with fsync); on a busy
    disk that is most of their time. Each run gets a directory of its own, removed at the end.
    """
    if config.option.basetemp or not (_SHM.is_dir() and os.access(_SHM, os.W_OK)):
        return
    base = tempfile.mkdtemp(prefix="nri-topology-pytest-", dir=_SHM)
    config.option.basetemp = base
    config.add_cleanup(lambda: shutil.rmtree(base, ignore_errors=True))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths must stay within 108 bytes; pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        yield Path(tmp)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The daemon configures process-wide logging; give the next test what it had."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
