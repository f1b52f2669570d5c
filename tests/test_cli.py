"""The `nri-topology` entry point itself."""

import os
import subprocess
import sys

import nri_topology


def test_closed_pipe_ends_quietly() -> None:
    """Output into a reader that went away (`… | head -1`) ends without a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nri_topology.cli", "simulate"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr
    assert "Exception ignored" not in proc.stderr
    assert proc.returncode == 141


def test_unknown_command_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nri_topology.cli", "frobnicate"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nri_topology.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert proc.stdout == f"nri-topology {nri_topology.__version__}\n"
