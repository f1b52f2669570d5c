"""Containers' cpuset files read and written only beneath the cgroup root: the cgroups path
checked, symlinks and `..` refused by openat2 and by the walk alike, files never created, and
each outcome as the kernel says it (on real files, a read-only mount, and a real v1 cpuset)."""

from __future__ import annotations

import errno
import os
import posixpath
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_topology.daemon import cgroupfs
from nri_topology.daemon.cgroupfs import (
    CPUS,
    MEMS,
    CgroupFS,
    Outcome,
    Result,
    cgroup_dir,
    cgroup_root,
    expand_slice,
    outcome,
)
from nri_topology.daemon.drift import Applied
from nri_topology.policy.types import Placement
from nri_topology.topology import cpuset

F = frozenset
PATH = "/kubepods/besteffort/podU/abc"
REL = "kubepods/besteffort/podU/abc"
PLACEMENT = Placement(F({0, 1}), F({0}))
UID = "289c1e4f_aae7_4550_ad08_c97aba7d10c9"  # the kubelet's pod slice: the pod's uid, - as _
CID = "0123456789abcdef" * 4

# --- which directory a cgroups path names


@pytest.mark.parametrize(
    ("path", "rel"),
    [
        (PATH, REL),
        (
            "kubepods-burstable-podU.slice:cri-containerd:abc",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podU.slice/"
            "cri-containerd-abc.scope",
        ),
        ("kubepods-podU.slice:crio:abc", "kubepods.slice/kubepods-podU.slice/crio-abc.scope"),
        (  # as CRI-O 1.36.3's systemd cgroup manager reports it (tests/vm, crio_systemd)
            f"kubepods-besteffort-pod{UID}.slice:crio:{CID}",
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID}.slice/"
            f"crio-{CID}.scope",
        ),
        ("-.slice:docker:abc", "docker-abc.scope"),
        (":docker:abc", "system.slice/docker-abc.scope"),  # no slice: runc's default
        ("a-b.slice:x:c.slice", "a.slice/a-b.slice/c.slice"),  # a slice unit, no prefix
        ("/a:b:c", "a:b:c"),  # absolute: cgroupfs, colons and all
        ("", None),
        ("relative/path", None),
        ("/", None),
        ("/../../victim", None),
        ("/kubepods/../../victim", None),
        ("/kubepods/./abc", None),
        ("/kubepods//abc", None),
        ("//kubepods/abc", None),
        ("/kubepods/abc/", None),
        ("/kubepods/a\0b", None),
        ("/..", None),
        ("kubepods/../x.slice:crio:abc", None),  # a slice with a /
        ("kubepods.slice/x.slice:crio:abc", None),
        ("kubepods.slice:crio:../../victim", None),  # a name with a /
        ("kubepods.slice:a/b:abc", None),  # a prefix with a /
        ("kubepods.slice:crio:", None),  # no name
        ("kubepods.slice:crio:a\0b", None),
        ("kubepods:crio:abc", None),  # not a slice
        ("a:b", None),
        ("a:b:c:d", None),
    ],
)
def test_cgroup_dir(path: str, rel: str | None) -> None:
    assert cgroup_dir(path) == (PurePosixPath(rel) if rel is not None else None)


@pytest.mark.parametrize(
    ("name", "dirs"),
    [
        ("a.slice", ("a.slice",)),
        ("a-b-c.slice", ("a.slice", "a-b.slice", "a-b-c.slice")),
        ("-.slice", ()),  # the root slice
        (".slice", None),
        ("a", None),
        ("a.slice.x", None),
        ("a--b.slice", None),
        ("-a.slice", None),
        ("a-.slice", None),
        ("a/b.slice", None),
        ("../a.slice", None),
    ],
)
def test_expand_slice(name: str, dirs: tuple[str, ...] | None) -> None:
    assert expand_slice(name) == dirs


_PIECES = st.sampled_from(["/", ":", "-", ".", "..", ".slice", "a", "\0", "kubepods", ""])


@given(st.one_of(st.text(), st.lists(_PIECES, max_size=12).map("".join)))
def test_an_accepted_path_stays_beneath_the_root(path: str) -> None:
    rel = cgroup_dir(path)
    if rel is None:
        return
    assert not rel.is_absolute() and rel.parts
    assert ".." not in rel.parts and "." not in rel.parts
    assert "\0" not in str(rel)
    assert posixpath.normpath(f"/root/{rel}").startswith("/root/")


def test_cgroup_root_v1_and_v2(tmp_path: Path) -> None:
    (tmp_path / "fs/cgroup/cpuset").mkdir(parents=True)
    assert cgroup_root(tmp_path) == tmp_path / "fs/cgroup/cpuset"
    (tmp_path / "fs/cgroup/cgroup.controllers").write_text("cpuset cpu\n")
    assert cgroup_root(tmp_path) == tmp_path / "fs/cgroup"


@pytest.mark.parametrize(
    ("err", "want"),
    [
        (errno.ENOENT, Outcome.GONE),
        (errno.ENOTDIR, Outcome.GONE),
        (errno.ENODEV, Outcome.GONE),
        (errno.EBUSY, Outcome.BUSY),
        (errno.ELOOP, Outcome.OUTSIDE),
        (errno.EXDEV, Outcome.OUTSIDE),
        (errno.EINVAL, Outcome.REFUSED),
        (errno.EACCES, Outcome.REFUSED),  # also v1's "not within the parent": never read_only
        (errno.EPERM, Outcome.REFUSED),
        (errno.EROFS, Outcome.REFUSED),  # one file's; the root's mount decides read_only
        (errno.ENOSPC, Outcome.REFUSED),
        (errno.EISDIR, Outcome.REFUSED),
    ],
)
def test_outcome_of_errno(err: int, want: Outcome) -> None:
    assert outcome(err) is want


# --- real files standing for the cgroups, through openat2 and through the walk


def _cgroup(root: Path, rel: str = REL, cpus: str = "0-19", mems: str = "0") -> Path:
    d = root / rel
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
    (d / "cpuset.mems").write_text(mems + "\n")
    return d


def _has_openat2(root: Path) -> bool:
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        return cgroupfs._probe(fd)
    finally:
        os.close(fd)


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def fs(request: pytest.FixtureRequest, tmp_path: Path) -> CgroupFS:
    """The cgroup root in tmp_path/root, resolved by openat2 or by the component walk."""
    root = tmp_path / "root"
    root.mkdir()
    if request.param and not _has_openat2(root):
        pytest.skip("this kernel has no openat2 (Linux < 5.6), or a seccomp profile refuses it")
    return CgroupFS(root, openat2=request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A cgroup-like directory outside the root, which nothing may write."""
    return _cgroup(tmp_path, "victim", "0-7", "0")


def _untouched(victim: Path) -> bool:
    return (victim / "cpuset.cpus").read_text() == "0-7\n"


def test_written_and_read_back_nothing_else_touched(fs: CgroupFS) -> None:
    d = _cgroup(fs.root)
    (d / "cgroup.procs").write_text("1\n")
    assert fs.write(PATH, PLACEMENT) == Result(Outcome.WRITTEN)
    assert (d / "cpuset.cpus").read_text() == "0-1"
    assert (d / "cpuset.mems").read_text() == "0"
    assert (d / "cgroup.procs").read_text() == "1\n"
    assert sorted(p.name for p in d.iterdir()) == ["cgroup.procs", CPUS, MEMS]
    assert fs.read(PATH) == Applied(F({0, 1}), F({0}))


def test_only_what_the_placement_sets(fs: CgroupFS) -> None:
    d = _cgroup(fs.root)
    assert fs.write(PATH, Placement(F({3}), None)).outcome is Outcome.WRITTEN
    assert ((d / "cpuset.cpus").read_text(), (d / "cpuset.mems").read_text()) == ("3", "0\n")


def test_a_missing_file_is_gone_and_never_created(fs: CgroupFS) -> None:
    d = _cgroup(fs.root)
    (d / "cpuset.mems").unlink()
    assert fs.write(PATH, PLACEMENT) == Result(Outcome.GONE, MEMS, errno.ENOENT)
    assert not (d / "cpuset.mems").exists()
    assert fs.read(PATH) is None


@pytest.mark.parametrize(
    ("path", "setup", "want"),
    [
        ("/kubepods/besteffort/podU/exited", None, Result(Outcome.GONE, None, errno.ENOENT)),
        (f"{PATH}/{CPUS}", None, Result(Outcome.GONE, None, errno.ENOTDIR)),
        (PATH, "dir_for_file", Result(Outcome.REFUSED, MEMS, errno.EISDIR)),
        ("neither-absolute-nor-systemd", None, Result(Outcome.OUTSIDE)),
        ("/../../victim", None, Result(Outcome.OUTSIDE)),
        ("/kubepods/../../victim", None, Result(Outcome.OUTSIDE)),
    ],
)
def test_write_outcomes(fs: CgroupFS, outside: Path, path: str, setup: str | None, want) -> None:
    d = _cgroup(fs.root)
    if setup == "dir_for_file":
        (d / "cpuset.mems").unlink()
        (d / "cpuset.mems").mkdir()
    assert fs.write(path, PLACEMENT) == want
    assert _untouched(outside)


def test_a_symlinked_directory_is_outside(fs: CgroupFS, outside: Path) -> None:
    (fs.root / "kubepods/besteffort").mkdir(parents=True)
    (fs.root / "kubepods/besteffort/podU").symlink_to(outside.parent)
    link = "/kubepods/besteffort/podU/victim"
    assert fs.write(link, PLACEMENT) == Result(Outcome.OUTSIDE, None, errno.ELOOP)
    assert fs.read(link) is None
    assert fs.found([link]) == 0
    assert _untouched(outside)


def test_a_symlinked_file_is_outside(fs: CgroupFS, outside: Path) -> None:
    d = _cgroup(fs.root)
    (d / "cpuset.cpus").unlink()
    (d / "cpuset.cpus").symlink_to(outside / "cpuset.cpus")
    assert fs.write(PATH, PLACEMENT) == Result(Outcome.OUTSIDE, CPUS, errno.ELOOP)
    assert fs.read(PATH) is None
    assert _untouched(outside)


@pytest.mark.parametrize("resolve", [cgroupfs._openat2, cgroupfs._walk], ids=["openat2", "walk"])
@pytest.mark.parametrize("rel", ["../victim", "kubepods/../../victim", "/victim"])
def test_dotdot_and_absolute_never_resolve_outside(tmp_path: Path, resolve, rel: str) -> None:
    """Below the path check: the resolvers themselves keep to the root."""
    root = tmp_path / "root"
    (root / "kubepods").mkdir(parents=True)
    _cgroup(tmp_path, "victim")
    if resolve is cgroupfs._openat2 and not _has_openat2(root):
        pytest.skip("this kernel has no openat2")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as raised:
            os.close(resolve(fd, rel))
        assert raised.value.errno == errno.EXDEV
    finally:
        os.close(fd)


def test_found_counts_the_contained_directories(fs: CgroupFS, outside: Path) -> None:
    _cgroup(fs.root)
    _cgroup(fs.root, "kubepods.slice/kubepods-podV.slice/crio-x.scope")
    (fs.root / "kubepods/link").symlink_to(outside)
    paths = [
        PATH,
        "kubepods-podV.slice:crio:x",
        "/kubepods/besteffort/podU/exited",
        "/kubepods/link",
        "/../victim",
        "",
    ]
    assert fs.found(paths) == 2
    assert CgroupFS(fs.root / "no-such-root").found(paths) == 0


# --- read-only: the root's mount, not one file's errno


def _bind_read_only(d: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root for a read-only bind mount")
    try:
        subprocess.run(["mount", "--bind", str(d), str(d)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount read-only here: {exc}")


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory of cgroups, later bind-mounted read-only by the test; unmounted after."""
    d = tmp_path / "ro"
    d.mkdir()
    yield d
    if os.geteuid() == 0:  # a bind mount within one file system: os.path.ismount cannot tell
        subprocess.run(["umount", str(d)], check=False, capture_output=True)


def test_a_read_only_mount_of_the_root_is_read_only(read_only: Path) -> None:
    d = _cgroup(read_only)
    _bind_read_only(read_only)
    fs = CgroupFS(read_only)
    assert fs.read_only
    assert fs.write(PATH, PLACEMENT) == Result(Outcome.READ_ONLY)
    assert (d / "cpuset.cpus").read_text() == "0-19\n"
    assert fs.read(PATH) == Applied(F(range(20)), F({0}))


def test_one_unwritable_cgroup_is_refused_not_read_only(read_only: Path) -> None:
    """EROFS from one container's files (a mount below the root), or EACCES from their modes,
    is that container's refusal: the others are still written."""
    root = read_only.parent
    d = _cgroup(root, "ro/abc")
    _cgroup(root, "rw/abc")
    if os.geteuid() == 0:
        _bind_read_only(read_only)
        err = errno.EROFS
    else:
        for f in d.iterdir():
            f.chmod(0o444)
        err = errno.EACCES
    fs = CgroupFS(root)
    assert fs.write("/ro/abc", PLACEMENT) == Result(Outcome.REFUSED, CPUS, err)
    assert not fs.read_only
    assert fs.write("/rw/abc", PLACEMENT) == Result(Outcome.WRITTEN)


# --- the kernel's own refusals, on a real cgroup v1 cpuset

V1 = Path("/sys/fs/cgroup/cpuset")


@pytest.fixture
def v1_cpuset() -> Iterator[tuple[Path, int, int]]:
    """A fresh cpuset `top` on CPUs a and b, its child `child` on b alone, and `child/grand`
    with no CPUs yet; removed afterwards. Yields (top, a, b)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make cpuset cgroups")
    if not (V1 / "cpuset.cpus").is_file() or (V1 / "cgroup.controllers").exists():
        pytest.skip("no cgroup v1 cpuset controller at /sys/fs/cgroup/cpuset")
    online = sorted(cpuset.parse((V1 / "cpuset.cpus").read_text().strip()))
    if len(online) < 2:
        pytest.skip("needs two CPUs in the root cpuset")
    a, b = online[:2]
    mems = (V1 / "cpuset.mems").read_text().strip()
    top = V1 / f"nri-topology-test-{uuid.uuid4().hex[:12]}"
    made: list[Path] = []
    try:
        for d, cpus in ((top, f"{a},{b}"), (top / "child", str(b)), (top / "child/grand", None)):
            try:
                d.mkdir()
            except OSError as exc:
                pytest.skip(f"cannot make a cpuset cgroup here: {exc}")
            made.append(d)
            if cpus is not None:
                (d / "cpuset.cpus").write_text(cpus)
                (d / "cpuset.mems").write_text(mems)
        yield top, a, b
    finally:
        for d in reversed(made):
            d.rmdir()


def test_kernel_busy_and_refused_on_v1(v1_cpuset: tuple[Path, int, int]) -> None:
    top, a, b = v1_cpuset
    fs = CgroupFS(V1)
    # taking b from top while its child runs on b: EBUSY
    assert fs.write(f"/{top.name}", Placement(F({a}), None)) == Result(
        Outcome.BUSY, CPUS, errno.EBUSY
    )
    # a for the grandchild, whose parent holds only b: not within the parent's
    refused = fs.write(f"/{top.name}/child/grand", Placement(F({a}), None))
    assert refused.outcome is Outcome.REFUSED and refused.file == CPUS
    assert refused.errno in (errno.EACCES, errno.EINVAL)
    assert not fs.read_only
    # within it, written and read back through the kernel's files
    grand = f"/{top.name}/child/grand"
    assert fs.write(grand, Placement(F({b}), None)) == Result(Outcome.WRITTEN)
    assert fs.read(grand) == Applied(F({b}), None)  # v1: mems never set, empty
    held = fs.read(f"/{top.name}")
    assert held is not None and held.cpus == F({a, b})  # the busy write changed nothing
