"""Decided versus applied: where a container's cgroup is, and whether it holds its placement.

Pure functions; reading the files and repairing drift is `verify.Verifier`'s job. The runtime can
lose an update sent for a container that is created but not yet started (it stores the new
cpuset in the spec, but runc already created the container from the old one), so the only
trustworthy view of what a container runs on is its cgroup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from nri_topology.topology import cpuset


@dataclass(frozen=True, slots=True)
class Applied:
    """A container's cpuset as its cgroup holds it (None: not readable or not set)."""

    cpus: frozenset[int] | None
    mems: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class Drift:
    """A container whose cgroup differs from its placement, field by field (None: agrees)."""

    container_id: str
    cpus: tuple[frozenset[int], frozenset[int]] | None  # (decided, applied)
    mems: tuple[frozenset[int], frozenset[int]] | None


def compare(
    container_id: str,
    cpus: frozenset[int] | None,
    mems: frozenset[int] | None,
    applied: Applied,
) -> Drift | None:
    """The drift of one container; fields the plugin leaves alone (None) never drift."""
    cpu = None
    if cpus is not None and applied.cpus is not None and applied.cpus != cpus:
        cpu = (cpus, applied.cpus)
    mem = None
    if mems is not None and applied.mems is not None and applied.mems != mems:
        mem = (mems, applied.mems)
    if cpu is None and mem is None:
        return None
    return Drift(container_id, cpu, mem)


def parse_list(text: str) -> frozenset[int] | None:
    """A cpuset file's content; None when empty (cgroup v2: not set, the parent's applies)."""
    text = text.strip()
    return cpuset.parse(text) if text else None


def _systemd_slice(name: str) -> PurePosixPath:
    """`a-b-c.slice` -> `a.slice/a-b.slice/a-b-c.slice`, as systemd nests slices."""
    if name in ("", "-.slice"):
        return PurePosixPath()
    stem = name.removesuffix(".slice")
    parts = stem.split("-")
    return PurePosixPath(*("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts))))


def cgroup_dir(cgroups_path: str) -> PurePosixPath | None:
    """A container's cgroup directory relative to the cgroup root (of v2, or of v1's cpuset
    controller), from the cgroups path the runtime reports in NRI (`Container.linux`).

    cgroupfs driver: an absolute path (`/kubepods/burstable/pod<uid>/<id>`). systemd driver:
    `slice:prefix:name` (`kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`), the scope
    `prefix-name.scope` inside the nested slices. None when the path is neither.
    """
    if not cgroups_path:
        return None
    if cgroups_path.startswith("/"):
        return PurePosixPath(cgroups_path.lstrip("/"))
    parts = cgroups_path.split(":")
    if len(parts) != 3:
        return None
    slice_name, prefix, name = parts
    scope = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
    return _systemd_slice(slice_name) / scope
