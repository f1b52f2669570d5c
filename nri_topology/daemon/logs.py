"""Log output: JSON lines for log collectors, colored console lines for people at a terminal.

Everything logs through structlog; messages from libraries using the standard `logging` module are
rendered by the same processors, so one run never mixes two formats.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from enum import StrEnum
from typing import IO, Any

import structlog

from nri_topology.policy.types import Decision, Update
from nri_topology.topology import cpuset


class LogFormat(StrEnum):
    AUTO = "auto"  # console when the stream is a terminal, else JSON
    JSON = "json"
    CONSOLE = "console"


LEVELS = ("debug", "info", "warning", "error")
_HANDLER_NAME = "nri-topology"  # our root handler, replaced on reconfiguration; others are kept
_UPDATES_LISTED = 8  # a decision log line names at most this many updated containers


def resolve(fmt: LogFormat, stream: IO[str]) -> LogFormat:
    """The concrete format for `fmt` on `stream` (AUTO becomes CONSOLE on a terminal)."""
    if fmt is not LogFormat.AUTO:
        return fmt
    isatty = getattr(stream, "isatty", None)
    return LogFormat.CONSOLE if isatty is not None and isatty() else LogFormat.JSON


def configure(
    fmt: LogFormat | str = LogFormat.AUTO, level: str = "info", stream: IO[str] | None = None
) -> LogFormat:
    """Set up structlog and stdlib logging for the whole process; returns the format chosen."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    out = sys.stderr if stream is None else stream
    chosen = resolve(LogFormat(fmt), out)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if chosen is LogFormat.JSON:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_colors_possible(out))
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    return chosen


def enabled(level: int) -> bool:
    """Whether structlog passes lines of `level` on, asked of the configured wrapper class: a
    module's logger is a lazy proxy that binds a new logger at every call, which costs more than
    the line is worth when it is filtered out anyway."""
    check = getattr(structlog.get_config()["wrapper_class"], "is_enabled_for", None)
    try:
        return check is None or bool(check(None, level))
    except Exception:  # a wrapper class whose check needs an instance: let the logger decide
        return True


def _colors_possible(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def summarize_updates(updates: Iterable[Update]) -> dict[str, Any]:
    """A short form of updates to other containers, for one log line."""
    ids = [u.container_id for u in updates]
    if not ids:
        return {}
    listed = ids[:_UPDATES_LISTED]
    summary: dict[str, Any] = {"updated": len(ids), "updated_ids": listed}
    if len(ids) > len(listed):
        summary["updated_more"] = len(ids) - len(listed)
    return summary


def decision_fields(decision: Decision, container: str, pod: str) -> dict[str, Any]:
    """The fields of the one log line every placement decision gets."""
    placement = decision.placement
    fields: dict[str, Any] = {
        "container": container,
        "container_id": decision.container_id,
        "pod": pod,
        "pool": decision.pool,
        "kind": str(decision.kind),
        "cpus": "" if placement.cpus is None else cpuset.format(placement.cpus),
        "mems": "" if placement.mems is None else cpuset.format(placement.mems),
        "reason": decision.reason,
    }
    if decision.exclusive:
        fields["exclusive"] = cpuset.format(decision.exclusive)
    if decision.memory_relaxed:
        fields["memory_relaxed"] = True
    if decision.degraded:
        fields["degraded"] = [str(d) for d in decision.degraded]
    if decision.moved:
        fields["moved"] = list(decision.moved)
    if decision.cold_start is not None:
        fields["cold_start_s"] = decision.cold_start.delay_ns / 1e9
    if decision.warnings:
        fields["warnings"] = [w.message for w in decision.warnings]
    fields.update(summarize_updates(decision.updates))
    return fields
