"""Where devices sit: the NUMA nodes and local CPUs of a device, read from sysfs.

A device is named as the runtime names it to the plugin: a character or block device by its
major:minor, a VFIO group by its number (`/dev/vfio/N`), or a device node path among the
container's mounts. From sysfs (relative to its root):

* `dev/{char,block}/MAJ:MIN` links to the device's directory under `devices/`;
* `kernel/iommu_groups/N/devices/*` link to the PCI functions of VFIO group N;
* from the device's directory upwards to `devices/`, the first `numa_node` that is not -1 gives
  the node, the first `local_cpulist` the CPUs. So a partition finds its disk's controller, an
  NVMe namespace its PCI function, a GPU's DRM card its PCI device.

A device under `devices/virtual` (a tty, `/dev/null`, the VFIO group nodes themselves) and one
whose parents say nothing has no locality: `None`, not an error. Results are cached per device
(devices do not move between NUMA nodes); reading is blocking I/O, so the daemon reads a device
it has not seen before (`known` says which) off its event loop.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from nri_topology.topology import cpuset

_VFIO_GROUP = re.compile(r"^/dev/vfio/(?:devices/)?(\d+)$")


@dataclass(frozen=True, slots=True)
class Locality:
    """A device's NUMA nodes and local CPUs; `devices` names the sysfs devices it came from."""

    devices: tuple[str, ...]
    nodes: frozenset[int]
    cpus: frozenset[int]


class DeviceError(Exception):
    """A device the runtime named that sysfs does not know (the message says which file)."""


class DeviceLocator:
    """Localities of devices under one sysfs root, each looked up once."""

    def __init__(self, sysfs_root: str | Path) -> None:
        self.root = Path(sysfs_root)
        self._devices = (self.root / "devices").resolve()
        self._by_number: dict[tuple[str, int, int], Locality | None] = {}
        self._by_group: dict[str, Locality | None] = {}

    def device(self, kind: str, major: int, minor: int, path: str = "") -> Locality | None:
        """A char ("c", "u") or block ("b") device; DeviceError when sysfs has no entry.

        A VFIO group node (`path` /dev/vfio/N) is looked up by its group: its own major:minor
        is a virtual device that says nothing about the hardware behind it.
        """
        m = _VFIO_GROUP.match(path)
        if m:
            return self.vfio_group(m.group(1))
        sub = "block" if kind == "b" else "char"
        key = (sub, major, minor)
        if key not in self._by_number:
            link = self.root / "dev" / sub / f"{major}:{minor}"
            if not os.path.lexists(link):
                raise DeviceError(f"{link} does not exist")
            self._by_number[key] = self._walk(Path(os.path.realpath(link)))
        return self._by_number[key]

    def known(self, kind: str, major: int, minor: int, path: str = "") -> bool:
        """Whether `device` would answer from the cache, without touching sysfs."""
        m = _VFIO_GROUP.match(path)
        if m:
            return m.group(1) in self._by_group
        return ("block" if kind == "b" else "char", major, minor) in self._by_number

    def vfio_group(self, group: str) -> Locality | None:
        """The PCI functions of an IOMMU group, together; DeviceError when the group is unknown."""
        if group not in self._by_group:
            members = self.root / "kernel" / "iommu_groups" / group / "devices"
            if not members.is_dir():
                raise DeviceError(f"{members} does not exist")
            found = [self._walk(Path(os.path.realpath(m))) for m in sorted(members.iterdir())]
            self._by_group[group] = _union([f for f in found if f is not None])
        return self._by_group[group]

    def path(self, path: str) -> Locality | None:
        """A device node path on the host: a VFIO group by name, else by its major:minor."""
        m = _VFIO_GROUP.match(path)
        if m:
            return self.vfio_group(m.group(1))
        try:
            st = os.stat(path)
        except OSError as e:
            raise DeviceError(f"{path}: {e.strerror}") from None
        if stat.S_ISCHR(st.st_mode):
            return self.device("c", os.major(st.st_rdev), os.minor(st.st_rdev))
        if stat.S_ISBLK(st.st_mode):
            return self.device("b", os.major(st.st_rdev), os.minor(st.st_rdev))
        return None

    def _walk(self, start: Path) -> Locality | None:
        """Nodes and CPUs from the device's directory and its parents up to `devices/`."""
        if not start.is_relative_to(self._devices) or start.is_relative_to(
            self._devices / "virtual"
        ):
            return None
        nodes: frozenset[int] | None = None
        cpus: frozenset[int] | None = None
        where = start
        at = start
        while at != self._devices and at.is_relative_to(self._devices):
            if nodes is None:
                node = _read_int(at / "numa_node")
                if node is not None and node >= 0:
                    nodes, where = frozenset({node}), at
            if cpus is None:
                text = _read(at / "local_cpulist")
                if text is not None:
                    try:
                        found = cpuset.parse(text)
                    except cpuset.CpuSetError:
                        found = frozenset()
                    if found:
                        cpus = found
                        if nodes is None:
                            where = at
            if nodes is not None and cpus is not None:
                break
            at = at.parent
        if nodes is None and cpus is None:
            return None
        return Locality((where.name,), nodes or frozenset(), cpus or frozenset())


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _union(found: list[Locality]) -> Locality | None:
    if not found:
        return None
    return Locality(
        tuple(d for f in found for d in f.devices),
        frozenset().union(*(f.nodes for f in found)),
        frozenset().union(*(f.cpus for f in found)),
    )
