"""The checkpoint format of the policy's state: writing a snapshot and reading its entries.

One module owns the format so that the writer (`snapshot`, `entry`) and the reader
(`saved_entries`, `read_entry`, used by `restore`) cannot drift apart. An entry holds per
container its pool, kind, exclusive CPUs, memory zone, the shared CPU and memory charged, and
whether its cold start still runs; the snapshot is versioned. The engine says which containers'
entries changed (`Engine.take_changed`), so a checkpoint writes only those anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nri_topology.policy.types import CpuKind
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.policy.accounts.grant import Grant
    from nri_topology.policy.engine.engine import Engine

SNAPSHOT_VERSION = 1
_MAX_TEXT = 1 << 16  # of the saved CPU list: far more than any machine's list takes
ENTRIES = "containers"  # the key of the per-container map
RESERVED = "reserved"  # the reserved CPUs, kept by a quantity reservation after a restart


def snapshot(engine: Engine, entries: bool = True) -> dict[str, Any]:
    """JSON-able state: per container its pool, kind, CPUs and memory zone (versioned); with an
    empty map of containers when not `entries` (their entries then come from `entry`)."""
    grants = engine.grants
    out = {cid: _entry(engine, grants[cid]) for cid in sorted(grants)} if entries else {}
    return {
        "version": SNAPSHOT_VERSION,
        RESERVED: cpuset.text(engine.reserved_cpus),
        ENTRIES: out,
    }


def entry(engine: Engine, container_id: str) -> dict[str, Any] | None:
    """The entry of one container in a snapshot, None when it holds nothing."""
    g = engine.grants.get(container_id)
    return None if g is None else _entry(engine, g)


def _entry(engine: Engine, g: Grant) -> dict[str, Any]:
    return {
        "pool": engine.pools[g.pool].name,
        "kind": str(g.kind),
        "exclusive": cpuset.text(g.exclusive),
        "isolated": g.isolated,
        "shared": g.shared,
        "zone": cpuset.text(g.zone),
        "memory": g.memory,
        "cold_start": g.cold_start is not None,
    }


def saved_reserved(saved: Mapping[str, Any] | None, cpus: int) -> frozenset[int]:
    """The reserved CPUs of a snapshot (of `cpus` CPUs' machine); none when it holds no valid
    list (missing in checkpoints written before it was saved)."""
    if not isinstance(saved, Mapping) or saved.get("version") != SNAPSHOT_VERSION:
        return frozenset()
    text = saved.get(RESERVED)
    if not isinstance(text, str) or len(text) > _MAX_TEXT:
        return frozenset()
    try:
        return cpuset.parse(text, cpus)
    except ValueError:
        return frozenset()


def saved_entries(saved: Mapping[str, Any] | None) -> tuple[dict[str, Mapping[str, Any]], str]:
    """The per-container entries of a snapshot, or none and why it was not usable."""
    if saved is None:
        return {}, "no saved state"
    if not isinstance(saved, Mapping) or saved.get("version") != SNAPSHOT_VERSION:
        version = saved.get("version") if isinstance(saved, Mapping) else None
        return {}, f"saved state version {version!r} is not {SNAPSHOT_VERSION}"
    containers = saved.get(ENTRIES)
    if not isinstance(containers, Mapping):
        return {}, "saved state has no containers map"
    return {str(k): v for k, v in containers.items() if isinstance(v, Mapping)}, ""


@dataclass(frozen=True, slots=True)
class SavedEntry:
    """One container's saved entry. CPU and node lists stay text: the reader checks them against
    the machine it runs on (a checkpoint may be damaged or forged)."""

    pool: str
    kind: CpuKind
    exclusive: str
    isolated: bool
    zone: str
    cold_start: bool  # missing: assumed still running
    # What the grant was charged: less than the request when it was placed over-committed or
    # squeezed. Restore re-adopts in its own order, so it cannot work these out again. None:
    # missing (charge the request).
    shared: int | None
    memory: int | None


def read_entry(entry: Mapping[str, Any]) -> SavedEntry:
    """The fields of a saved entry; KeyError or ValueError when one is missing or malformed."""
    pool, cpus, nodes, kind, isolated = (
        entry[k] for k in ("pool", "exclusive", "zone", "kind", "isolated")
    )
    return SavedEntry(
        pool=str(pool),
        kind=CpuKind(str(kind)),
        exclusive=str(cpus),
        isolated=bool(isolated),
        zone=str(nodes),
        cold_start=bool(entry.get("cold_start", True)),
        shared=_charge(entry.get("shared")),
        memory=_charge(entry.get("memory")),
    )


def _charge(value: Any) -> int | None:
    """A saved charge: a non-negative integer, else None; ValueError when it is malformed."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"charge {str(value)[:40]!r} is not a non-negative integer")
    return value
