"""The plugin on a systemd + cgroup v2 node with emulated NUMA: a Debian 13 guest under QEMU.

image.sh builds (or finds cached) the guest from Debian's packages; the host adds a 9p share with
the repository, a wheelhouse for the guest's Python (the guest reaches no package index) with the
project's wheel, and the test image. In the guest, run.sh installs the plugin as the shipped
systemd unit (docs/operations.md), starts containerd with the systemd cgroup driver (runc, and
crun as a second runtime handler) and runs guest.py, whose checks each become one test here.
CRI-O, which Debian does not package, comes from $NRI_TOPOLOGY_CRIO or ../shared/runtimes/crio
beside the checkout (as for the e2e suite) through the share: its check, last, stops containerd
and runs CRI-O with its systemd cgroup manager; without a CRI-O here that check skips.
The machine: 2 sockets x 2 cores, one CPU per NUMA node (0-3) and node 4 memory-only, with SLIT
distances and HMAT latencies and bandwidths. Timings in the guest mean nothing under software
emulation; only results count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nri_topology.testing import ociimage
from tests.e2e.conftest import _unavailable
from tests.e2e.harness import IMAGE, REPO, SLEEP, write_crio_files

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(5400)]

HERE = Path(__file__).resolve().parent
CHECKS = (
    "topology", "placement", "drift", "plugin_restart", "runtime_restart", "hugepages",
    "set_property", "daemon_reload", "crun", "crio_systemd",
)  # fmt: skip
GUEST_PYTHON = "3.13"
BOOT_TIMEOUT = float(os.environ.get("NRI_TOPOLOGY_VM_TIMEOUT", 3600))
CPU_NODES, MEMORY_ONLY, NODE_MIB = 4, 4, 512


def distance(a: int, b: int) -> int:
    """SLIT: 10 local, 12 within a socket (nodes 0-1, 2-3), 21 across; node 4 hangs off node 2."""
    if a == b:
        return 10
    if MEMORY_ONLY in (a, b):
        other = b if a == MEMORY_ONLY else a
        return 17 if other == 2 else 28
    return 12 if a // 2 == b // 2 else 21


def numa_args() -> list[str]:
    args = []
    for n in range(CPU_NODES + 1):
        args += ["-object", f"memory-backend-ram,size={NODE_MIB}M,id=m{n}"]
    for n in range(CPU_NODES):
        args += ["-numa", f"node,nodeid={n},memdev=m{n}"]
    args += ["-numa", f"node,nodeid={MEMORY_ONLY},memdev=m{MEMORY_ONLY},initiator=2"]
    for n in range(CPU_NODES):
        args += ["-numa", f"cpu,node-id={n},socket-id={n // 2},core-id={n % 2},thread-id=0"]
    for a in range(CPU_NODES + 1):
        for b in range(a + 1, CPU_NODES + 1):
            args += ["-numa", f"dist,src={a},dst={b},val={distance(a, b)}"]
    for i in range(CPU_NODES):
        for t in range(CPU_NODES + 1):
            d = distance(i, t)
            base = f"hmat-lb,initiator={i},target={t},hierarchy=memory"
            args += ["-numa", f"{base},data-type=access-latency,latency={d * 10}"]
            args += ["-numa", f"{base},data-type=access-bandwidth,bandwidth={200 // d}G"]
    return args


def accel_args() -> list[str]:
    """KVM where the CPU has hardware virtualization, else software emulation (a /dev/kvm
    without VMX or SVM is a nested page-table hypervisor that cannot run Debian's kernel)."""
    flags = Path("/proc/cpuinfo").read_text()
    if Path("/dev/kvm").exists() and (" vmx" in flags or " svm" in flags):
        return ["-accel", "kvm", "-cpu", "host"]
    return ["-accel", "tcg,thread=multi", "-cpu", "max,vendor=GenuineIntel"]


def qemu_argv(image: dict[str, str], overlay: Path, share: Path, console: Path) -> list[str]:
    return [
        "qemu-system-x86_64", *accel_args(),
        "-machine", "q35,hmat=on",
        "-smp", f"{CPU_NODES},sockets=2,cores=2,threads=1",
        "-m", f"{NODE_MIB * (CPU_NODES + 1)}M",
        *numa_args(),
        "-kernel", image["KERNEL"], "-initrd", image["INITRD"],
        "-append", "console=ttyS0 root=/dev/vda rw",
        "-drive", f"file={overlay},if=virtio,format=qcow2",
        "-virtfs", f"local,path={share},mount_tag=hostshare,security_model=none",
        "-nic", "none", "-display", "none", "-no-reboot",
        "-serial", f"file:{console}",
    ]  # fmt: skip


def crio_dir() -> Path | None:
    """CRI-O's binaries (crio, pinns) where tests/e2e/prepare.sh finds them; None when absent."""
    found = Path(os.environ.get("NRI_TOPOLOGY_CRIO") or REPO.parent / "shared/runtimes/crio")
    return found if (found / "crio").is_file() and (found / "pinns").is_file() else None


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nri-topology/vm"
    return Path(os.environ.get("NRI_TOPOLOGY_VM_CACHE", default))


def wheelhouse(python: str = GUEST_PYTHON) -> Path:
    """The locked dependencies as wheels for the guest's Python, cached by the lock's hash."""
    lock = REPO / "requirements/demo.lock"
    key = hashlib.sha256(lock.read_bytes() + python.encode()).hexdigest()[:16]
    out = cache_dir() / f"wheels-{key}"
    if (out / ".done").exists():
        return out
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes",
         "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "manylinux2014_x86_64", "-r", str(lock), "-d", str(tmp)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (tmp / ".done").touch()
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def make_share(share: Path, python: str = GUEST_PYTHON) -> None:
    wheels = share / "wheels"
    shutil.copytree(wheelhouse(python), wheels)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
         str(REPO)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    repo = share / "repo"
    for part in ("requirements", "systemd", "config", "tests/vm"):
        shutil.copytree(REPO / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "tests/e2e").mkdir(parents=True)
    shutil.copyfile(REPO / "tests/e2e/harness.py", repo / "tests/e2e/harness.py")
    shutil.copyfile(REPO / "tests/sockets.py", repo / "tests/sockets.py")  # the harness's
    shutil.copyfile(HERE / "run.sh", share / "run.sh")
    layer = ociimage.layer(ociimage.busybox_entries(Path("/bin/busybox")))
    (share / "busybox.tar").write_bytes(ociimage.image_archive(IMAGE, [layer], cmd=SLEEP))
    crio = crio_dir()
    if crio is not None:  # run.sh installs it; the rest, as the e2e harness writes it
        (share / "crio").mkdir()
        for name in ("crio", "pinns"):
            shutil.copy2(crio / name, share / "crio" / name)
        write_crio_files(share / "crio/policy.json", share / "crio")


def usable() -> None:
    """Skips (or fails, where e2e is required) where no guest can be run here."""
    if os.environ.get("NRI_TOPOLOGY_E2E") == "skip":
        pytest.skip("e2e: NRI_TOPOLOGY_E2E=skip")
    if os.geteuid() != 0:
        _unavailable("the VM test needs root (it builds the guest's file system)")
    if not Path("/bin/busybox").exists():
        _unavailable("no static busybox at /bin/busybox (apt-get install busybox-static)")


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    usable()
    proc = subprocess.run(["bash", str(HERE / "image.sh")], capture_output=True, text=True)
    if proc.returncode != 0:
        _unavailable(f"the guest image cannot be built: {proc.stderr.strip()[-2000:]}")
    base = tmp_path_factory.mktemp("vm")
    try:
        make_share(base / "share")
    except subprocess.CalledProcessError as exc:
        _unavailable(f"the guest's share cannot be made: {exc.stderr.strip()[-2000:]}")
    return boot(proc.stdout, base)


def boot(image_lines: str, base: Path) -> dict[str, dict]:
    """Boot the image (image.sh's KEY=VALUE lines) on the share in `base` until it powers off:
    the results of the checks it ran, by name."""
    image = dict(line.split("=", 1) for line in image_lines.splitlines() if "=" in line)
    share = base / "share"
    overlay = base / "overlay.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", image["DISK"],
         str(overlay)],
        check=True,
    )  # fmt: skip
    console = base / "console.log"
    started = time.monotonic()
    with contextlib.suppress(subprocess.TimeoutExpired):  # qemu is killed; the results say
        subprocess.run(
            qemu_argv(image, overlay, share, console),
            check=False, timeout=BOOT_TIMEOUT, capture_output=True,
        )  # fmt: skip
    took = time.monotonic() - started
    log = (share / "run.log").read_text(errors="replace") if (share / "run.log").exists() else ""
    status = (share / "run.status").read_text().strip() if (share / "run.status").exists() else ""
    print(f"guest ran {took:.0f}s, run.sh status {status or 'none'}")
    print("--- run.log (tail):\n" + "\n".join(log.splitlines()[-40:]))
    print("--- console (tail):\n" + "\n".join(
        console.read_text(errors="replace").splitlines()[-30:] if console.exists() else []
    ))  # fmt: skip
    result = share / "result.json"
    if not result.exists():
        pytest.fail(f"the guest wrote no results (run.sh status {status or 'none'})", False)
    return {r["check"]: r for r in json.loads(result.read_text())}


# CRI-O is not on every machine: without it its check skips (also where e2e is required, as in
# the e2e suite), before the guest boots for it.
NO_CRIO = pytest.mark.skipif(
    crio_dir() is None,
    reason="e2e: no CRI-O here: neither $NRI_TOPOLOGY_CRIO nor ../shared/runtimes/crio beside "
    "the checkout holds crio and pinns",
)


@pytest.mark.parametrize(
    "check", [pytest.param(c, marks=NO_CRIO) if c == "crio_systemd" else c for c in CHECKS]
)
def test_guest_check(guest: dict[str, dict], check: str) -> None:
    assert check in guest, f"the guest did not get to {check}"
    r = guest[check]
    print(f"{check}: {r['detail']} ({r['seconds']}s)")
    assert r["ok"], r["detail"]


# The Debian 12 guest (image-bookworm.sh, guest_bookworm.py), booted after the Debian 13 one's
# checks: systemd 252's daemon-reload and daemon-reexec, which write the scopes' properties back.
BOOKWORM_CHECKS = ("daemon_reload_252", "daemon_reexec_252")
BOOKWORM_PYTHON = "3.11"


@pytest.fixture(scope="module")
def bookworm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    usable()
    script = HERE / "image-bookworm.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if proc.returncode != 0:  # a second guest that cannot be built here is said, not failed
        pytest.skip(f"e2e: the Debian 12 guest cannot be built: {proc.stderr.strip()[-2000:]}")
    base = tmp_path_factory.mktemp("vm-bookworm")
    try:
        make_share(base / "share", BOOKWORM_PYTHON)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"e2e: the Debian 12 guest's share cannot be made: {exc.stderr[-2000:]}")
    (base / "share/guest").write_text("guest_bookworm.py\n")
    return boot(proc.stdout, base)


@pytest.mark.parametrize("check", BOOKWORM_CHECKS)
def test_bookworm_check(bookworm: dict[str, dict], check: str) -> None:
    assert check in bookworm, f"the Debian 12 guest did not get to {check}"
    r = bookworm[check]
    print(f"{check}: {r['detail']} ({r['seconds']}s)")
    assert r["ok"], r["detail"]
