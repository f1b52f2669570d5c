"""Containers' cpuset files, read and written only beneath the cgroup root.

The cgroups path is the runtime's word (`Container.linux.cgroups_path`), so it is checked
before it names a directory, and that directory is opened without following a symlink or
leaving the root: openat2(2) with RESOLVE_BENEATH where the kernel has it, else one component
at a time. Only `cpuset.cpus` and `cpuset.mems` are opened, never created. A write says what
the kernel said, so one container's refusal does not read as a read-only mount; whether the
mount is read-only is asked of the mount.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import errno
import os
import platform
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from nri_topology.daemon.drift import Applied, parse_list
from nri_topology.policy.types import Placement
from nri_topology.topology import cpuset

# The only files ever opened in a container's cgroup.
File = Literal["cpuset.cpus", "cpuset.mems"]
CPUS: File = "cpuset.cpus"
MEMS: File = "cpuset.mems"

_SLICE = ".slice"


def cgroup_root(sysfs_root: Path) -> Path:
    """Where cpuset files live: the v2 hierarchy, or v1's cpuset controller."""
    root = sysfs_root / "fs" / "cgroup"
    if (root / "cgroup.controllers").exists():
        return root
    return root / "cpuset"


def expand_slice(name: str) -> tuple[str, ...] | None:
    """A systemd slice's nested directories, `a-b.slice` -> (`a.slice`, `a-b.slice`); none for
    the root slice `-.slice`; None for a name systemd refuses (no `.slice` suffix, a `/`, an
    empty part between dashes)."""
    stem = name.removesuffix(_SLICE)
    if stem == name or "/" in name:
        return None
    if stem == "-":
        return ()
    parts = stem.split("-")
    if "" in parts:
        return None
    return tuple("-".join(parts[: i + 1]) + _SLICE for i in range(len(parts)))


def cgroup_dir(cgroups_path: str) -> PurePosixPath | None:
    """A container's cgroup directory relative to the cgroup root, from the cgroups path the
    runtime reports; None when the path is neither form or could name anything outside.

    cgroupfs driver: an absolute path (`/kubepods/burstable/pod<uid>/<id>`) of plain names, no
    `.`, `..` or empty one. systemd driver: `slice:prefix:name`, the scope `prefix-name.scope`
    (a name ending in `.slice` is the unit itself) inside the slice's nested directories; an
    empty slice is `system.slice`, as runc takes it.
    """
    if cgroups_path.startswith("/"):
        parts: Iterable[str] = cgroups_path[1:].split("/")
    else:
        fields = cgroups_path.split(":")
        if len(fields) != 3:
            return None
        slice_name, prefix, name = fields
        slices = expand_slice(slice_name or "system" + _SLICE)
        if slices is None or not name:
            return None
        parts = (*slices, name if name.endswith(_SLICE) else f"{prefix}-{name}.scope")
    if not all(p not in ("", ".", "..") and "/" not in p and "\0" not in p for p in parts):
        return None
    return PurePosixPath(*parts)


class Outcome(enum.Enum):
    """How writing a placement into a container's cgroup went."""

    WRITTEN = "written"
    GONE = "gone"  # no cgroup, or no such file in it: exited, or not created yet
    BUSY = "busy"  # EBUSY: a child cgroup holds what the write takes away
    REFUSED = "refused"  # any other refusal of the kernel (EINVAL, EACCES, ENOSPC, ...)
    OUTSIDE = "outside"  # the path leaves the root, or a symlink is on the way
    READ_ONLY = "read_only"  # the root's mount is read-only: nothing was tried


@dataclass(frozen=True, slots=True)
class Result:
    """A write's outcome, with the file and errno that ended it where there is one."""

    outcome: Outcome
    file: File | None = None
    errno: int | None = None


_OUTCOMES = {
    errno.ENOENT: Outcome.GONE,
    errno.ENOTDIR: Outcome.GONE,  # a file where a cgroup directory should be
    errno.ENODEV: Outcome.GONE,  # the cgroup was removed while open
    errno.EBUSY: Outcome.BUSY,
    errno.ELOOP: Outcome.OUTSIDE,  # a symlink (RESOLVE_NO_SYMLINKS, O_NOFOLLOW, the walk)
    errno.EXDEV: Outcome.OUTSIDE,  # leaving the root (RESOLVE_BENEATH, the walk)
}


def outcome(err: int) -> Outcome:
    """What an errno from opening or writing a cgroup file means for the write."""
    return _OUTCOMES.get(err, Outcome.REFUSED)


# openat2(2), Linux 5.6: the same number on these architectures; elsewhere the walk.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(root_fd: int, rel: str) -> int:
    """The directory `rel` beneath `root_fd`, resolved by the kernel: no `..` past the root, no
    symlink, no magic link."""
    how = _OpenHow(_DIR, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPENAT2 or -1),  # -1, no such call: ENOSYS
        ctypes.c_int(root_fd),
        ctypes.c_char_p(os.fsencode(rel)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return fd


def _walk(root_fd: int, rel: str) -> int:
    """What `_openat2` does, for kernels without it: each component opened from the one before
    without following it, a symlink refused (ELOOP), `.` and `..` too (EXDEV)."""
    fd = os.dup(root_fd)
    try:
        for part in rel.split("/"):
            if part in ("", ".", ".."):
                raise OSError(errno.EXDEV, "leaves the cgroup root", rel)
            step = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                raise OSError(errno.ELOOP, "symlink in the cgroup path", rel)
            if not stat.S_ISDIR(mode):
                raise OSError(errno.ENOTDIR, "not a cgroup directory", rel)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _probe(root_fd: int) -> bool:
    """Whether openat2 works here: the kernel may predate it (ENOSYS), a seccomp profile may
    refuse it (EPERM)."""
    if _SYS_OPENAT2 is None:
        return False
    try:
        os.close(_openat2(root_fd, "."))
    except OSError:
        return False
    return True


def _write(dir_fd: int, name: File, text: str) -> None:
    """No O_CREAT: a missing file is a cgroup gone, not one to make. O_TRUNC as a shell's `>`
    (cgroup files take it; plain files standing for them need it)."""
    flags = os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(dir_fd: int, name: File) -> str:
    """Like `_write`, never through a symlink."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with open(fd, encoding="ascii") as f:
        return f.read()


class CgroupFS:
    """The cgroup root (of v2, or of v1's cpuset controller), with what is decided of it once:
    whether its mount is read-only, whether openat2 resolves paths beneath it.

    `openat2=False` forces the component walk (tests); None probes the kernel at first use.
    """

    def __init__(self, root: Path, openat2: bool | None = None) -> None:
        self.root = root
        self._openat2 = openat2
        self._read_only: bool | None = None

    @property
    def read_only(self) -> bool:
        """Whether the root's mount is read-only, asked of the mount at first use."""
        if self._read_only is None:
            try:
                self._read_only = bool(os.statvfs(self.root).f_flag & os.ST_RDONLY)
            except OSError:  # no root at all: every container is gone (`found` says so)
                self._read_only = False
        return self._read_only

    @contextlib.contextmanager
    def _dir(self, rel: PurePosixPath) -> Iterator[int]:
        """The cgroup directory `rel`, opened (O_PATH) beneath the root."""
        root = os.open(self.root, _DIR)
        try:
            if self._openat2 is None:
                self._openat2 = _probe(root)
            fd = (_openat2 if self._openat2 else _walk)(root, str(rel))
        finally:
            os.close(root)
        try:
            yield fd
        finally:
            os.close(fd)

    def read(self, cgroups_path: str) -> Applied | None:
        """The container's cpusets as its cgroup holds them; None when they cannot be read."""
        rel = cgroup_dir(cgroups_path)
        if rel is None:
            return None
        try:
            with self._dir(rel) as d:
                return Applied(parse_list(_read(d, CPUS)), parse_list(_read(d, MEMS)))
        except (OSError, ValueError):  # ValueError: not ASCII, or not a CPU list
            return None

    def write(self, cgroups_path: str, placement: Placement) -> Result:
        """Write a placement's cpusets into the container's cgroup (cpus, then mems, those
        the placement sets); the first failure ends it."""
        if self.read_only:
            return Result(Outcome.READ_ONLY)
        rel = cgroup_dir(cgroups_path)
        if rel is None:
            return Result(Outcome.OUTSIDE)
        name: File | None = None
        try:
            with self._dir(rel) as d:
                for name, value in ((CPUS, placement.cpus), (MEMS, placement.mems)):
                    if value is not None:
                        _write(d, name, cpuset.text(value))
        except OSError as exc:
            return Result(outcome(exc.errno or 0), name, exc.errno)
        return Result(Outcome.WRITTEN)

    def found(self, cgroups_paths: Iterable[str]) -> int:
        """How many of these cgroups are directories beneath the root: none of the live
        containers' means a wrong root (say, a pod's own cgroup namespace), not that all of
        them exited."""
        n = 0
        for path in cgroups_paths:
            rel = cgroup_dir(path)
            if rel is None:
                continue
            with contextlib.suppress(OSError), self._dir(rel):
                n += 1
        return n
