"""The checkpoint format of the policy's state: writing a snapshot and reading its entries.

One module owns the format so that the writer (`snapshot`) and the reader (`saved_entries`,
`read_entry`, used by `restore`) cannot drift apart. An entry holds per container its pool, kind,
exclusive CPUs, memory zone and whether its cold start still runs; the snapshot is versioned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from nri_topology.policy.types import CpuKind
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.policy.engine import Engine, Grant

SNAPSHOT_VERSION = 1


@lru_cache(maxsize=4096)
def _format(cpus: frozenset[int]) -> str:
    """cpuset.format, cached: the daemon snapshots after every change, and most containers share
    a handful of zones and an empty exclusive set."""
    return cpuset.format(cpus)


def snapshot(engine: Engine) -> dict[str, Any]:
    """JSON-able state: per container its pool, kind, CPUs and memory zone (versioned).

    An entry depends only on fields a grant never changes after it is committed, but for whether
    a cold start runs; so entries are kept per grant object and made anew only for a new grant or
    a finished cold start. Entries are never changed once returned: the checkpoint encoder keeps
    them to compare with the next.
    """
    kept = engine.snapshot_entries
    fresh: dict[str, tuple[Grant, bool, dict[str, Any]]] = {}
    out: dict[str, Any] = {}
    grants = engine.grants
    for cid in sorted(grants):
        g = grants[cid]
        cold = g.cold_start is not None
        hit = kept.get(cid)
        if hit is not None and hit[0] is g and hit[1] is cold:
            entry = hit[2]
            fresh[cid] = hit
        else:
            entry = {
                "pool": engine.pools[g.pool].name,
                "kind": str(g.kind),
                "exclusive": _format(g.exclusive),
                "isolated": g.isolated,
                "shared": g.shared,
                "zone": _format(g.zone),
                "memory": g.memory,
                "cold_start": cold,
            }
            fresh[cid] = (g, cold, entry)
        out[cid] = entry
    engine.snapshot_entries = fresh
    return {"version": SNAPSHOT_VERSION, "containers": out}


def saved_entries(saved: Mapping[str, Any] | None) -> tuple[dict[str, Mapping[str, Any]], str]:
    """The per-container entries of a snapshot, or none and why it was not usable."""
    if saved is None:
        return {}, "no saved state"
    if not isinstance(saved, Mapping) or saved.get("version") != SNAPSHOT_VERSION:
        version = saved.get("version") if isinstance(saved, Mapping) else None
        return {}, f"saved state version {version!r} is not {SNAPSHOT_VERSION}"
    containers = saved.get("containers")
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
    )
