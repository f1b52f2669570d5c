"""Log output: format choice, JSON content, stdlib messages, the one-line decision summary."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from nri_topology.daemon import logs
from nri_topology.daemon.logs import LogFormat
from nri_topology.policy.types import ColdStart, CpuKind, Decision, Placement, Update


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.mark.parametrize(
    ("fmt", "stream", "want"),
    [
        (LogFormat.AUTO, io.StringIO(), LogFormat.JSON),
        (LogFormat.AUTO, Tty(), LogFormat.CONSOLE),
        (LogFormat.JSON, Tty(), LogFormat.JSON),
        (LogFormat.CONSOLE, io.StringIO(), LogFormat.CONSOLE),
    ],
)
def test_auto_picks_console_only_on_a_terminal(fmt: LogFormat, stream: io.StringIO, want) -> None:
    assert logs.resolve(fmt, stream) is want


def test_json_lines_carry_level_time_and_fields() -> None:
    out = io.StringIO()
    logs.configure("json", "info", out)
    structlog.get_logger("x").info("placed", pool="node0")
    structlog.get_logger("x").debug("hidden")
    logging.getLogger("lib").warning("from %s", "stdlib")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["event"], r["level"]) for r in lines] == [
        ("placed", "info"),
        ("from stdlib", "warning"),
    ]
    assert lines[0]["pool"] == "node0"
    assert lines[0]["timestamp"].endswith("Z")
    assert lines[1]["logger"] == "lib"


def test_console_output_is_not_json_and_reconfiguring_keeps_one_handler() -> None:
    out = io.StringIO()
    logs.configure("json", "debug", io.StringIO())
    logs.configure("console", "debug", out)
    structlog.get_logger().debug("hello", pool="node0")
    text = out.getvalue()
    assert "hello" in text and "pool" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert [h.get_name() for h in logging.getLogger().handlers].count("nri-topology") == 1


@pytest.mark.parametrize("bad", [("json", "loud"), ("yaml", "info")])
def test_bad_format_or_level_is_a_clear_error(bad: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match=r"loud|yaml"):
        logs.configure(bad[0], bad[1], io.StringIO())


def _decision(updates: int) -> Decision:
    return Decision(
        container_id="c1",
        pool="node1",
        kind=CpuKind.EXCLUSIVE,
        placement=Placement(frozenset({4, 5}), frozenset({1})),
        exclusive=frozenset({4, 5}),
        updates=tuple(Update(f"o{i}", Placement(frozenset({0}), None)) for i in range(updates)),
        reason="fits node1 best",
        cold_start=ColdStart(delay_ns=2_000_000_000, then_mems=frozenset({0, 1})),
    )


@pytest.mark.parametrize(
    ("updates", "want"),
    [
        (0, {}),
        (2, {"updated": 2, "updated_ids": ["o0", "o1"]}),
        (10, {"updated": 10, "updated_ids": [f"o{i}" for i in range(8)], "updated_more": 2}),
    ],
)
def test_decision_line_names_placement_reason_and_summarizes_updates(updates: int, want) -> None:
    fields = logs.decision_fields(_decision(updates), "ns/pod/app", "ns/pod")
    assert fields["cpus"] == "4-5" and fields["mems"] == "1" and fields["kind"] == "exclusive"
    assert fields["pool"] == "node1" and fields["reason"] == "fits node1 best"
    assert fields["cold_start_s"] == 2.0
    assert {k: v for k, v in fields.items() if k.startswith("updated")} == want


@pytest.mark.parametrize(
    ("configured", "level", "want"),
    [
        ("info", logging.DEBUG, False),
        ("info", logging.INFO, True),
        ("warning", logging.INFO, False),
        ("debug", logging.DEBUG, True),
        ("error", logging.WARNING, False),
    ],
)
def test_enabled_follows_the_configured_level(configured: str, level: int, want: bool) -> None:
    logs.configure("json", configured, io.StringIO())
    assert logs.enabled(level) is want


def test_enabled_without_a_level_filter_lets_the_logger_decide() -> None:
    structlog.configure(wrapper_class=structlog.BoundLogger)
    assert logs.enabled(logging.DEBUG)
