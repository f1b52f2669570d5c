"""Which NRI version a runtime speaks, and so which event bits it accepts (docs/protocol.md §7).

A runtime with NRI older than v0.10.0 refuses a Configure reply carrying bits it does not know and
drops the plugin, so the event mask must be cut down unless the runtime is known to be newer.
"""

from __future__ import annotations

import re

from nri_topology.nri import api_pb2

OLD_VALID_EVENTS = 0x07FF
"""Event bits known to runtimes with NRI up to v0.9.x (events 1-11)."""
VALID_EVENTS = 0x3FFF
"""Event bits known to runtimes with NRI v0.10.0 or newer (events 1-14)."""

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
_UNKNOWN_VERSIONS = {"", "(devel)", "0.0.0-unknown", "v0.0.0-unknown"}

# Earliest release of each runtime embedding NRI v0.10.0 or newer (docs/protocol.md §7).
_FIRST_RELEASE_WITH_NRI_0_10 = {"containerd": (2, 2, 0), "cri-o": (1, 34, 0)}


def event_bit(event: int) -> int:
    """Mask bit of an `api_pb2.Event` value."""
    if not api_pb2.UNKNOWN < event < api_pb2.LAST:
        raise ValueError(f"not a subscribable NRI event: {event}")
    return 1 << (event - 1)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`v1.7.16`, `1.34.0-rc.1`, `v0.3.1-0.2023…` → numeric triple; None when not a version."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch)


def runtime_nri_version(req: api_pb2.ConfigureRequest) -> tuple[int, int, int] | None:
    """The runtime's NRI version if reported; None when the runtime is too old to say."""
    if req.NRI_version in _UNKNOWN_VERSIONS:
        return None
    return parse_version(req.NRI_version)


def runtime_knows_v010_events(req: api_pb2.ConfigureRequest) -> bool:
    """Whether the runtime accepts event bits 12-14, from its NRI version or its own version."""
    nri = runtime_nri_version(req)
    if nri is not None:
        return nri >= (0, 10, 0)
    first = _FIRST_RELEASE_WITH_NRI_0_10.get(req.runtime_name.strip().lower())
    version = parse_version(req.runtime_version)
    return first is not None and version is not None and version >= first


def runtime_serves_updates_apart(req: api_pb2.ConfigureRequest) -> bool:
    """Whether the runtime's NRI adaptation serves UpdateContainers without taking the lock it
    relays events under (v0.12.1 and later). Older ones take it before the runtime's own NRI
    lock, which every event takes first: an UpdateContainers that meets an event deadlocks both
    (docs/protocol.md §6.6)."""
    nri = runtime_nri_version(req)
    return nri is not None and nri >= (0, 12, 1)


def valid_events(req: api_pb2.ConfigureRequest) -> int:
    """The event bits this runtime is known to accept."""
    return VALID_EVENTS if runtime_knows_v010_events(req) else OLD_VALID_EVENTS
