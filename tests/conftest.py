"""Fixtures shared by test modules."""

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The daemon configures process-wide logging; give the next test what it had."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
