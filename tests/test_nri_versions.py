"""Event bits are cut down for runtimes whose NRI predates v0.10 (docs/protocol.md §7)."""

from __future__ import annotations

import pytest

from nri_topology.nri import api_pb2
from nri_topology.nri.versions import (
    OLD_VALID_EVENTS,
    VALID_EVENTS,
    event_bit,
    parse_version,
    valid_events,
)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"NRI_version": "v0.12.2"}, VALID_EVENTS),
        ({"NRI_version": "v0.10.0"}, VALID_EVENTS),
        ({"NRI_version": "v0.9.1-0.20250219030224-e597e7849f24"}, OLD_VALID_EVENTS),
        (
            {"NRI_version": "(devel)", "runtime_name": "containerd", "runtime_version": "v2.2.1"},
            VALID_EVENTS,
        ),
        ({"runtime_name": "containerd", "runtime_version": "v2.1.6"}, OLD_VALID_EVENTS),
        ({"runtime_name": "containerd", "runtime_version": "1.7.16"}, OLD_VALID_EVENTS),
        ({"runtime_name": "cri-o", "runtime_version": "1.34.0"}, VALID_EVENTS),
        ({"runtime_name": "CRI-O", "runtime_version": "1.33.8"}, OLD_VALID_EVENTS),
        ({"runtime_name": "podman", "runtime_version": "9.9.9"}, OLD_VALID_EVENTS),
        ({"runtime_name": "containerd", "runtime_version": "garbage"}, OLD_VALID_EVENTS),
        ({}, OLD_VALID_EVENTS),
    ],
)
def test_valid_events(fields: dict[str, str], expected: int) -> None:
    assert valid_events(api_pb2.ConfigureRequest(**fields)) == expected


def test_event_bits() -> None:
    assert event_bit(api_pb2.RUN_POD_SANDBOX) == 0x1
    assert event_bit(api_pb2.CREATE_CONTAINER) == 0x8
    assert event_bit(api_pb2.VALIDATE_CONTAINER_ADJUSTMENT) == 0x2000
    for bad in (api_pb2.UNKNOWN, api_pb2.LAST):
        with pytest.raises(ValueError):
            event_bit(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v1.7.16", (1, 7, 16)), ("1.34.0-rc.1", (1, 34, 0)), ("v2", None), ("", None)],
)
def test_parse_version(text: str, expected: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == expected
