"""Device locality from sysfs: synthetic PCI trees, and the DAX devices of a shared dump."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_topology.daemon.convert import DeviceRef, device_refs
from nri_topology.daemon.hints import sysfs_hints
from nri_topology.nri import api_pb2
from nri_topology.policy.types import HintSource, TopologyHint
from nri_topology.topology.devices import DeviceError, DeviceLocator, Locality
from tests.machines import TOPOLOGIES, add_pci_device, extract


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    # A GPU on node 1: its DRM card is a child of the PCI function.
    add_pci_device(root, "0000:3b:00.0", node=1, cpus="8-15", char=(226, 0), child="drm/card0")
    # An NVMe disk on node 0 with a partition: block devices nest below the controller.
    add_pci_device(root, "0000:5e:00.0", node=0, cpus="0-7", block=(259, 0), child="nvme/nvme0/n1")
    part = root / "devices/pci0000:00/0000:5e:00.0/nvme/nvme0/n1/n1p1"
    part.mkdir(parents=True)
    (root / "dev/block/259:1").symlink_to(os.path.relpath(part, root / "dev/block"))
    # A NIC whose firmware reports no node: only its local CPUs say where it is.
    add_pci_device(root, "0000:af:00.0", node=-1, cpus="16-23", char=(240, 3))
    # Two functions of one IOMMU group on different nodes (VFIO passthrough of both).
    add_pci_device(root, "0000:d8:00.0", node=2, iommu_group=42)
    add_pci_device(root, "0000:d8:00.1", node=3, iommu_group=42)
    # /dev/null: a virtual device, no locality.
    null = root / "devices/virtual/mem/null"
    null.mkdir(parents=True)
    (root / "dev/char/1:3").symlink_to(os.path.relpath(null, root / "dev/char"))
    return root


GPU = ("0000:3b:00.0",), {1}, set(range(8, 16))
NVME = ("0000:5e:00.0",), {0}, set(range(8))


@pytest.mark.parametrize(
    ("kind", "major", "minor", "path", "expected"),
    [
        ("c", 226, 0, "/dev/dri/card0", GPU),
        ("b", 259, 0, "/dev/nvme0n1", NVME),
        ("b", 259, 1, "/dev/nvme0n1p1", NVME),
        ("c", 240, 3, "/dev/net/x", (("0000:af:00.0",), set(), set(range(16, 24)))),
        ("c", 1, 3, "/dev/null", None),
        ("c", 10, 196, "/dev/vfio/42", (("0000:d8:00.0", "0000:d8:00.1"), {2, 3}, set())),
    ],
    ids=["gpu-drm-child", "nvme", "partition", "no-node-only-cpus", "virtual", "vfio-group"],
)
def test_device_locality(sys_root: Path, kind, major, minor, path, expected) -> None:
    found = DeviceLocator(sys_root).device(kind, major, minor, path)
    if expected is None:
        assert found is None
    else:
        devices, nodes, cpus = expected
        assert found == Locality(devices, frozenset(nodes), frozenset(cpus))


def test_unknown_device_and_group_are_errors_naming_the_file(sys_root: Path) -> None:
    locator = DeviceLocator(sys_root)
    with pytest.raises(DeviceError, match="dev/char/9:9 does not exist"):
        locator.device("c", 9, 9)
    with pytest.raises(DeviceError, match="iommu_groups/7/devices does not exist"):
        locator.vfio_group("7")


def test_results_are_cached_per_device(sys_root: Path) -> None:
    locator = DeviceLocator(sys_root)
    first = locator.device("c", 226, 0)
    (sys_root / "devices/pci0000:00/0000:3b:00.0/numa_node").write_text("0\n")
    assert locator.device("c", 226, 0) is first
    assert DeviceLocator(sys_root).device("c", 226, 0) != first  # a new locator reads again


def test_mount_paths_by_stat_and_vfio_name(sys_root: Path, tmp_path: Path) -> None:
    locator = DeviceLocator(sys_root)
    assert locator.path("/dev/vfio/42") is not None
    assert locator.path(str(tmp_path)) is None  # a directory is no device
    with pytest.raises(DeviceError, match="No such file"):
        locator.path(str(tmp_path / "gone"))
    null = os.stat("/dev/null")  # a real char device node: looked up by its major:minor
    assert (os.major(null.st_rdev), os.minor(null.st_rdev)) == (1, 3)
    assert locator.path("/dev/null") is None


def test_nri_devices_and_device_mounts_become_refs() -> None:
    ctr = api_pb2.Container(id="c")
    ctr.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
    ctr.linux.devices.add(path="/dev/fifo", type="p")
    ctr.mounts.add(destination="/dev/vfio/42", source="/dev/vfio/42", options=["rbind", "rw"])
    ctr.mounts.add(destination="/disk", source="/dev/sdb", options=["ro"])
    ctr.mounts.add(destination="/data", source="/var/lib/data", options=["rbind"])
    assert device_refs(ctr) == (
        DeviceRef(HintSource.DEVICES, "/dev/dri/card0", "c", 226, 0),
        DeviceRef(HintSource.MOUNTS, "/dev/vfio/42"),
    )


def test_sysfs_hints_name_device_and_pci_function_and_warn_on_unknown(sys_root: Path) -> None:
    refs = (
        DeviceRef(HintSource.DEVICES, "/dev/dri/card0", "c", 226, 0),
        DeviceRef(HintSource.DEVICES, "/dev/null", "c", 1, 3),
        DeviceRef(HintSource.DEVICES, "/dev/gone", "c", 9, 9),
        DeviceRef(HintSource.MOUNTS, "/dev/vfio/42"),
    )
    hints, warnings = sysfs_hints(DeviceLocator(sys_root), refs)
    assert hints == (
        TopologyHint(
            HintSource.DEVICES,
            "/dev/dri/card0 (0000:3b:00.0)",
            frozenset({1}),
            frozenset(range(8, 16)),
        ),
        TopologyHint(
            HintSource.MOUNTS, "/dev/vfio/42 (0000:d8:00.0,0000:d8:00.1)", frozenset({2, 3})
        ),
    )
    assert len(warnings) == 1 and "/dev/gone" in warnings[0]


@pytest.mark.skipif(
    not (TOPOLOGIES / "hwloc-fakeheteromemtiers.tar.bz2").is_file(),
    reason="shared topology dumps (../shared) not present",
)
def test_dax_devices_of_a_shared_dump() -> None:
    """The dump keeps the DAX devices (with numa_node) but not /sys/dev: link them as the kernel
    does for their char devices, then look them up by number. The dumps have no PCI trees (the
    GPU dump names its GPUs in /proc/driver/nvidia only)."""
    sys_root = extract("hwloc-fakeheteromemtiers.tar.bz2") / "fakeheteromemtiers" / "sys"
    expected: dict[str, int] = {}
    for numa in sorted((sys_root / "devices").rglob("dax*.0/numa_node")):
        expected[numa.parent.name] = int(numa.read_text())
    assert len(expected) >= 4
    locator = DeviceLocator(sys_root)
    for minor, name in enumerate(sorted(expected)):
        link = sys_root / "dev" / "char" / f"252:{minor}"
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            target = next((sys_root / "devices").rglob(name))
            link.symlink_to(os.path.relpath(target, link.parent))
        found = locator.device("c", 252, minor)
        assert found is not None and found.nodes == {expected[name]}, name


def _rule(
    allow: bool,
    kind: str = "",
    major: int | None = None,
    minor: int | None = None,
    access: str = "rwm",
) -> api_pb2.LinuxDeviceCgroup:
    r = api_pb2.LinuxDeviceCgroup(allow=allow, type=kind, access=access)
    if major is not None:
        r.major.value = major
    if minor is not None:
        r.minor.value = minor
    return r


def test_read_only_devices_and_privileged_containers_give_no_refs() -> None:
    ctr = api_pb2.Container(id="c")
    ctr.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
    ctr.linux.devices.add(path="/dev/sdb", type="b", major=8, minor=16)
    rules = ctr.linux.resources.devices
    rules.extend([_rule(False, access="rwm"), _rule(True, "c", 226, 0, "rw")])
    rules.append(_rule(True, "b", 8, 16, "r"))
    assert [r.path for r in device_refs(ctr)] == ["/dev/dri/card0"]  # sdb is read-only
    rules.append(_rule(True, access="rwm"))  # privileged: every device allowed
    assert device_refs(ctr) == ()


def test_known_says_what_the_cache_answers(sys_root: Path) -> None:
    locator = DeviceLocator(sys_root)
    assert not locator.known("c", 226, 0)
    locator.device("c", 226, 0)
    assert locator.known("c", 226, 0) and not locator.known("b", 226, 0)
    assert not locator.known("c", 10, 196, "/dev/vfio/42")
    locator.device("c", 10, 196, "/dev/vfio/42")
    assert locator.known("c", 10, 196, "/dev/vfio/42")
    with pytest.raises(DeviceError):
        locator.device("c", 9, 9)
    assert not locator.known("c", 9, 9)  # unknown devices are looked up again
