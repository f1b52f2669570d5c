"""A real container runtime with NRI (containerd 1.7, containerd 2.x or CRI-O), driven through the
CRI as a kubelet drives it, for the e2e tests.

Every `Run` owns a directory (the runtime's root, state, sockets, NRI plugin directories, runc
state, image store, logs), a cgroup parent (`/kubepods-e2e-<id>/...`) and an NRI socket, so runs
on one machine never share anything, and `Run.cleanup()` removes the pods, the processes it
started (the runtime, its shims or monitors, the plugin), mounts under the directory and the
cgroups. Where the runtimes behave differently the tests name the `Quirk` they depend on.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from nri_topology.cri import api_pb2 as cri
from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from nri_topology.nri.versions import parse_version
from nri_topology.policy.types import QoS
from nri_topology.testing import ociimage
from nri_topology.topology.cpuset import parse as parse_cpus
from tests import sockets

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CGROUP_ROOT = Path("/sys/fs/cgroup")
IMAGE = "e2e.local/busybox:1"
SLEEP = ["/bin/sleep", "1000000"]


def write_crio_files(policy: Path, cni: Path) -> None:
    """What CRI-O needs beside its binaries to run a pod: an image policy that takes the local
    test image, and the loopback network (CNI configuration in the directory `cni`)."""
    policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
    (cni / "10-loopback.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "lo", "plugins": [{"type": "loopback"}]})
    )


# The runtimes the suite runs on, as prepare.sh names them.
RUNTIMES = ("containerd-1.7", "containerd-2", "crio")


class SetupError(Exception):
    """The runtime cannot be had here; the tests skip (or fail, when e2e is required)."""


class Absent(SetupError):
    """The runtime is not on this machine at all (CRI-O without ../shared): the tests skip, also
    where e2e is required."""


class Quirk(enum.Enum):
    """A way a runtime differs from the others that a test sees; the value says how."""

    NO_SYNC_ON_RELAUNCH = (
        "containerd before 1.7.26 (NRI older than v0.7.0) sends no Synchronize to the plugins it "
        "launches, so a relaunched plugin does not learn the running containers"
    )


def quirks(runtime: str, version: str) -> frozenset[Quirk]:
    """By the release part of the version the runtime reports: `1.7.24~ds1` (Debian's) and
    `v1.7.25` (an upstream build) alike."""
    release = parse_version(version)
    if runtime.startswith("containerd") and release is not None and release < (1, 7, 26):
        return frozenset({Quirk.NO_SYNC_ON_RELAUNCH})
    return frozenset()


@dataclass(frozen=True)
class Tools:
    """One runtime's binaries and what the tests need beside them."""

    bin: Path
    runc: Path
    busybox: Path
    runtime: str = "containerd-1.7"
    version: str = ""

    @property
    def containerd_bin(self) -> Path:
        """The runtime's binaries (the name from before CRI-O was a runtime too)."""
        return self.bin

    @property
    def kind(self) -> str:
        """The family, containerd or crio: how the runtime is started, configured, fed images."""
        return "crio" if self.runtime == "crio" else "containerd"

    @property
    def quirks(self) -> frozenset[Quirk]:
        return quirks(self.runtime, self.version)


def prepare(runtime: str = "containerd-1.7") -> Tools:
    """Run prepare.sh (finds or fetches the runtime, runc, busybox)."""
    proc = subprocess.run(
        ["bash", str(HERE / "prepare.sh"), runtime], capture_output=True, text=True, check=False
    )
    if proc.returncode == 3:
        raise Absent(proc.stderr.strip().removeprefix("prepare: "))
    if proc.returncode != 0:
        raise SetupError(f"prepare.sh {runtime} failed: {proc.stderr.strip()[-2000:]}")
    found = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return Tools(
        Path(found["RUNTIME_BIN"]),
        Path(found["RUNC"]),
        Path(found["BUSYBOX"]),
        runtime,
        found["RUNTIME_VERSION"],
    )


def default_validator(tools: Tools) -> bool:
    """Whether the runtime's NRI has the default validator (containerd 2.2 and later, CRI-O
    1.36), which can require plugins: its default configuration has the section."""
    argv = [str(tools.bin / ("crio" if tools.kind == "crio" else "containerd")), "config"]
    if tools.kind == "containerd":
        argv.append("default")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return "default_validator" in proc.stdout


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0) -> object:
    """Poll `check` until it returns something true; its last exception or value in the error."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout}s (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cgroup_v2() -> bool:
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def hugetlb_controller() -> bool:
    """Whether the host has a hugetlb cgroup controller, as containerd and CRI-O test it: without
    one both drop a container's hugepage limits before NRI plugins see them."""
    if cgroup_v2():
        return "hugetlb" in (CGROUP_ROOT / "cgroup.controllers").read_text().split()
    return (CGROUP_ROOT / "hugetlb").is_dir()


# --- cgroups ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cpuset:
    cpus: str
    mems: str


def cgroup_dir(pid: int) -> Path:
    """The cpuset cgroup directory of a process, read from /proc/PID/cgroup (v1 or v2)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if cgroup_v2() and controllers == "":
            return CGROUP_ROOT / path.lstrip("/")
        if "cpuset" in controllers.split(","):
            return CGROUP_ROOT / "cpuset" / path.lstrip("/")
    raise LookupError(f"process {pid} has no cpuset cgroup")


def read_cpuset(pid: int) -> Cpuset:
    d = cgroup_dir(pid)
    return Cpuset((d / "cpuset.cpus").read_text().strip(), (d / "cpuset.mems").read_text().strip())


def affinity(pid: int) -> str:
    """The CPUs the kernel lets the process run on (follows its cpuset)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise LookupError(pid)


# --- CRI ----------------------------------------------------------------------------------


class Cri:
    """The CRI over the runtime's gRPC socket: one method per RPC the tests use."""

    def __init__(self, sock: Path) -> None:
        self._channel = grpc.insecure_channel(
            f"unix://{sock}", options=[("grpc.max_receive_message_length", 64 << 20)]
        )

    def close(self) -> None:
        self._channel.close()

    def call(self, service: str, method: str, request, response_type, timeout: float = 60.0):
        rpc = self._channel.unary_unary(
            f"/runtime.v1.{service}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return rpc(request, timeout=timeout)

    def runtime(self, method: str, request, timeout: float = 60.0):
        return self.call(
            "RuntimeService", method, request, getattr(cri, method + "Response"), timeout
        )

    def version(self) -> cri.VersionResponse:
        return self.runtime("Version", cri.VersionRequest(version="v1"), timeout=5)

    def image_present(self, name: str) -> bool:
        resp = self.call(
            "ImageService",
            "ImageStatus",
            cri.ImageStatusRequest(image=cri.ImageSpec(image=name)),
            cri.ImageStatusResponse,
        )
        return bool(resp.image.id)


# --- pods ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """What a container runs beside its resources: the test image's `sleep` by default;
    `capabilities` added to the runtime's default set."""

    command: tuple[str, ...] = tuple(SLEEP)
    mounts: tuple[cri.Mount, ...] = ()
    capabilities: tuple[str, ...] = ()


@dataclass
class Container:
    id: str
    name: str

    def __repr__(self) -> str:
        return f"Container({self.name}, {self.id[:12]})"


@dataclass
class Pod:
    id: str
    name: str
    namespace: str
    qos: str
    config: cri.PodSandboxConfig
    containers: list[Container] = field(default_factory=list)


def qos_named(name: str) -> QoS:
    """ "guaranteed", "burstable" or "besteffort", as the kubelet names its QoS cgroups."""
    return next(q for q in QoS if q.value.lower() == name)


def memory_capacity() -> int:
    """The node's memory as the kubelet reads it (MemTotal), which oom_score_adj is relative to."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise SetupError("no MemTotal in /proc/meminfo")


HUGEPAGES = Path("/sys/kernel/mm/hugepages")


def page_size_name(size_kb: int) -> str:
    """A page size as the kubelet writes it in a hugepage limit: `2MB`, `1GB`."""
    size, units = size_kb, ["KB", "MB", "GB", "TB"]
    while size % 1024 == 0 and len(units) > 1:
        size, units = size // 1024, units[1:]
    return f"{size}{units[0]}"


def host_page_sizes() -> list[int]:
    """The hugepage sizes the kernel offers, in kB (`hugepages-2048kB` under sysfs)."""
    if not HUGEPAGES.is_dir():
        return []
    return sorted(
        int(d.name.removeprefix("hugepages-").removesuffix("kB")) for d in HUGEPAGES.iterdir()
    )


def hugepage_limits(asked: dict[int, int]) -> list[cri.HugepageLimit]:
    """The hugepage limits the kubelet gives a container: one for every size the host offers, 0
    for those not asked for, the bytes asked (`hugepages-<size>` limit, equal to its request)
    for the others; `asked` maps page size in kB to bytes.

    None where the host has no hugetlb controller mounted: containerd then drops them, but CRI-O
    (which finds the controller in /proc/cgroups, mounted or not) hands them to runc, which fails
    to create the container, even for limits of 0."""
    if not hugetlb_controller():
        return []
    sizes = sorted(set(host_page_sizes()) | set(asked))
    return [cri.HugepageLimit(page_size=page_size_name(s), limit=asked.get(s, 0)) for s in sizes]


def resources(
    qos: str, cpu_milli: int, memory: int, hugepages: dict[int, int] | None = None
) -> cri.LinuxContainerResources:
    """Linux resources as the kubelet computes them: `cpu_milli` and `memory` are a Guaranteed
    container's requests and limits, a Burstable one's requests; a BestEffort one has neither.
    `hugepages`: bytes asked per page size in kB (see `hugepage_limits`)."""
    cls = qos_named(qos)
    amounts = {
        QoS.GUARANTEED: Amounts(cpu_milli, cpu_milli, memory, memory),
        QoS.BURSTABLE: Amounts(cpu_milli, 0, memory, 0),
        QoS.BEST_EFFORT: Amounts(),
    }[cls]
    r = kubelet.resources(amounts)
    return cri.LinuxContainerResources(
        cpu_shares=r.cpu_shares or 0,
        cpu_period=r.cpu_period or 0,
        cpu_quota=r.cpu_quota or 0,
        memory_limit_in_bytes=r.memory_limit or 0,
        oom_score_adj=kubelet.oom_score_adj(cls, amounts.memory_request, memory_capacity()),
        hugepage_limits=hugepage_limits(hugepages or {}),
    )


def pod_labels(name: str, namespace: str, uid: str) -> dict[str, str]:
    """The labels the kubelet puts on a pod sandbox (CRI-O names pods and containers by them)."""
    return {
        "io.kubernetes.pod.name": name,
        "io.kubernetes.pod.namespace": namespace,
        "io.kubernetes.pod.uid": uid,
    }


def container_labels(pod: cri.PodSandboxConfig, name: str) -> dict[str, str]:
    """The labels the kubelet puts on a container of `pod`."""
    meta = pod.metadata
    return {**pod_labels(meta.name, meta.namespace, meta.uid), "io.kubernetes.container.name": name}


# --- processes ------------------------------------------------------------------------------


def _processes_with(marker: str) -> list[int]:
    """Pids whose command line mentions `marker` (our run directory): our shims and plugins."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"
            ):
                pids.append(int(entry.name))
    return pids


def _stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# The runtime's configuration template (in this directory) by runtime.
CONFIGS = {
    "containerd-1.7": "containerd.toml.in",
    "containerd-2": "containerd-2.toml.in",
    "crio": "crio.conf.in",
}


def metric_sample(text: str, name: str, **labels: str) -> float:
    """One sample of a metrics page in the text exposition format (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:]+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted(filter(None, (m.group(2) or "").split(","))))
            if got == want:
                return float(m.group(3))
    return 0.0


class Run:
    """One runtime with NRI, its pods and (optionally) the plugin, in a directory of its own."""

    def __init__(
        self, tools: Tools, base: Path, *, nri_timeout: str = "2s", runtime_config: str = ""
    ) -> None:
        """`runtime_config`: more of the runtime's configuration (TOML), after the template's."""
        self.tools = tools
        self.runtime_config = runtime_config
        self.id = uuid.uuid4().hex[:10]
        # Unix socket paths are limited to 108 bytes: keep the directory short.
        self.dir = base / f"nri-e2e-{self.id}"
        self.dir.mkdir(parents=True)
        self.kubepods = f"/kubepods-e2e-{self.id}"
        self.nri_socket = self.dir / "nri.sock"
        self.sock = self.dir / ("crio.sock" if tools.kind == "crio" else "containerd.sock")
        self.nri_timeout = nri_timeout
        self.daemon: subprocess.Popen | None = None
        self.plugin: subprocess.Popen | None = None
        self.plugin_port = free_port()
        self.cri: Cri | None = None
        self.pods: dict[str, Pod] = {}
        self.state = self.dir / "plugin-state.json"
        self.plugin_log = self.dir / "plugin.log"
        self.plugin_config = self.dir / "plugin-config.yaml"
        self._fake_proc: Path | None = None
        for d in ("nri/plugins", "nri/conf.d", "cni/bin", "cni/conf", "images"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        if tools.kind == "crio":
            self._shared_mount()

    def _shared_mount(self) -> None:
        """CRI-O refuses a host path for a container whose mount is neither shared nor slave, as
        on a machine without systemd (whose / is private): make the run directory a shared mount
        of its own, as it would be under systemd."""
        for argv in (["mount", "--bind", str(self.dir), str(self.dir)],
                     ["mount", "--make-rshared", str(self.dir)]):  # fmt: skip
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SetupError(f"{' '.join(argv)}: {proc.stderr.strip()}")

    # --- the runtime --------------------------------------------------------------------

    def has(self, quirk: Quirk) -> bool:
        return quirk in self.tools.quirks

    def config_text(self) -> str:
        text = (HERE / CONFIGS[self.tools.runtime]).read_text()
        for key, value in {
            "@RUN@": str(self.dir),
            "@RUNC@": str(self.tools.runc),
            "@PAUSE@": IMAGE,
            "@NRI_TIMEOUT@": self.nri_timeout,
            "@SNAPSHOTTER@": os.environ.get("NRI_TOPOLOGY_E2E_SNAPSHOTTER", "overlayfs"),
            "@STORAGE_DRIVER@": self.storage_driver,
            "@HERE@": str(self.tools.bin),
            "@CONMON@": shutil.which("conmon") or "/usr/bin/conmon",
        }.items():
            text = text.replace(key, value)
        return text + self.runtime_config

    @property
    def storage_driver(self) -> str:
        """CRI-O's containers-storage driver: overlay, or vfs where containerd's snapshotter
        is told to be native (no overlayfs mounts in the temporary directory)."""
        native = os.environ.get("NRI_TOPOLOGY_E2E_SNAPSHOTTER") == "native"
        return "vfs" if native else "overlay"

    def _runtime_argv(self) -> list[str]:
        if self.tools.kind == "crio":
            config = self.dir / "crio.conf"
            config.write_text(self.config_text())
            (self.dir / "crio.conf.d").mkdir(exist_ok=True)
            write_crio_files(self.dir / "policy.json", self.dir / "cni/conf")
            return [str(self.tools.bin / "crio"), "--config", str(config),
                    "--config-dir", str(self.dir / "crio.conf.d")]  # fmt: skip
        config = self.dir / "containerd.toml"
        config.write_text(self.config_text())
        return [str(self.tools.bin / "containerd"), "--config", str(config)]

    def start_runtime(self) -> None:
        env = dict(os.environ)
        env["PATH"] = f"{self.tools.bin}:{env.get('PATH', '/usr/bin:/bin')}"
        log = self.runtime_log.open("ab")
        self.daemon = subprocess.Popen(
            self._runtime_argv(), stdout=log, stderr=log, env=env, start_new_session=True
        )
        log.close()
        if self.cri is None:
            self.cri = Cri(self.sock)

        def up() -> bool:
            if self.daemon is not None and self.daemon.poll() is not None:
                raise SetupError(f"{self.tools.runtime} exited: {self.runtime_log_tail()}")
            return bool(self.cri and self.cri.version().runtime_version)

        try:
            wait_for(f"{self.tools.runtime}'s CRI", up, timeout=60)
        except TimeoutError as exc:
            raise SetupError(f"{exc}\n{self.runtime_log_tail()}") from None

    def stop_runtime(self, sig: int = signal.SIGTERM) -> None:
        if self.daemon is not None:
            _stop_process(self.daemon, sig)
            self.daemon = None

    # The names from before the runtime could be CRI-O.
    start_containerd = start_runtime
    stop_containerd = stop_runtime

    @property
    def runtime_log(self) -> Path:
        return self.dir / f"{self.tools.kind}.log"

    def runtime_log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.runtime_log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    containerd_log_tail = runtime_log_tail

    def ctr(self, *args: str) -> str:
        """containerd's own client on this run's containerd."""
        if self.tools.kind != "containerd":
            raise NotImplementedError(f"ctr on {self.tools.runtime}")
        cmd = [str(self.tools.bin / "ctr"), "-a", str(self.sock), "-n", "k8s.io", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    def import_archive(self, archive: Path, name: str) -> None:
        """An OCI image archive into the runtime's image store, as the image `name`."""
        if self.tools.kind == "crio":
            store = f"{self.storage_driver}@{self.dir}/store/root+{self.dir}/store/runroot"
            subprocess.run(
                ["skopeo", "--policy", str(self.dir / "policy.json"), "copy", "--quiet",
                 f"oci-archive:{archive}", f"containers-storage:[{store}]{name}"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
        else:
            self.ctr("images", "import", "--no-unpack", str(archive))
        # containerd's CRI learns of imported images from an event: wait until it sees this one.
        wait_for("image visible to the CRI", lambda: self.cri and self.cri.image_present(name), 60)

    def import_image(self, archive: Path) -> None:
        self.import_archive(archive, IMAGE)

    # --- the plugin ---------------------------------------------------------------------

    def write_plugin_config(self, text: str = "", proc_isolcpus: str | None = None) -> None:
        """The plugin's YAML config; with `proc_isolcpus` a proc root whose command line
        isolates those CPUs (this machine's /proc/meminfo copied), to test isolated placement."""
        if proc_isolcpus is not None:
            proc = self.dir / "proc"
            proc.mkdir(exist_ok=True)
            (proc / "cmdline").write_text(f"BOOT_IMAGE=/vmlinuz isolcpus={proc_isolcpus}\n")
            shutil.copyfile("/proc/meminfo", proc / "meminfo")
            text += f"\ntopology:\n  proc_root: {proc}\n"
        self.plugin_config.write_text(text)

    def plugin_args(self) -> list[str]:
        return [
            "--socket", str(self.nri_socket),
            "--state", str(self.state),
            "--metrics-port", str(self.plugin_port),
            "--log-format", "json",
            "--log-level", "debug",
            "--cri-socket", str(self.sock),
        ]  # fmt: skip

    def start_plugin(
        self, extra: list[str] | None = None, wait: bool = True, checkout: Path | None = None
    ) -> None:
        """`nri-topology run` as the systemd unit starts it: connects to the NRI socket.

        `checkout`: run the plugin of that source tree instead (benchmarks comparing two
        commits in one run), with this interpreter and its packages."""
        if not self.plugin_config.exists():
            self.write_plugin_config()
        # The unit's ExecStart: the venv's console script, `run $NRI_TOPOLOGY_ARGS`.
        script = Path(sys.executable).parent / "nri-topology"
        entry = [str(script)] if script.exists() else [sys.executable, "-m", "nri_topology.cli"]
        env = None
        if checkout is not None:  # `-m` looks in the working directory first
            entry = [sys.executable, "-m", "nri_topology.cli"]
            env = {**os.environ, "PYTHONPATH": str(checkout)}
        cmd = [*entry, "run", "--config", str(self.plugin_config)]
        log = self.plugin_log.open("ab")
        self.plugin = subprocess.Popen(
            [*cmd, *self.plugin_args(), *(extra or [])],
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=checkout or REPO,
            env=env,
        )
        log.close()
        if wait:
            self.wait_plugin_ready()

    def install_plugin(self, conf_d: str | None = None) -> None:
        """Install the shipped launcher (packaging/nri/90-nri-topology) for containerd to start,
        with this checkout's Python and this run's paths in place of the installed ones.

        With `conf_d`, that is the conf.d file and the launcher's options are the shipped ones
        (only the log file differs): the run's settings must then come from `conf_d`."""
        launcher = (REPO / "packaging/nri/90-nri-topology").read_text()
        launcher = launcher.replace("/opt/nri-topology/venv/bin/python", sys.executable)
        # state, metrics port, log format, the CRI socket (not the NRI socket: fd 3)
        args = " ".join([*self.plugin_args()[2:8], "--cri-socket", str(self.sock)])
        if conf_d is not None:
            args = ""
        launcher = launcher.replace(
            "--log-file /var/log/nri-topology.log",
            f"--log-file {self.plugin_log} {args} --log-level debug",
        )
        if not self.plugin_config.exists():
            self.write_plugin_config()
        launcher = launcher.replace(
            "-m nri_topology.cli run", f"-m nri_topology.cli run --config {self.plugin_config}"
        )
        path = self.dir / "nri/plugins/90-nri-topology"
        path.write_text(f"#!/bin/sh\ncd {REPO}\n" + launcher.split("\n", 1)[1])
        path.chmod(0o755)
        conf = self.dir / "nri/conf.d/90-nri-topology.conf"
        if conf_d is None:
            shutil.copyfile(REPO / "packaging/nri/90-nri-topology.conf", conf)
        else:
            conf.write_text(conf_d)

    def launched_plugin_pid(self) -> int | None:
        for pid in _processes_with(f"--log-file {self.plugin_log}"):
            return pid
        return None

    def stop_plugin(self, sig: int = signal.SIGTERM) -> None:
        if self.plugin is not None:
            _stop_process(self.plugin, sig)
            self.plugin = None

    def plugin_http(self, path: str) -> tuple[int, str]:
        return sockets.http_get("127.0.0.1", self.plugin_port, path)

    def wait_plugin_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.plugin is not None and self.plugin.poll() is not None:
                raise SetupError(
                    f"plugin exited {self.plugin.returncode}: {self.plugin_log_tail()}"
                )
            return self.plugin_http("/readyz")[0] == 200

        wait_for("plugin ready", ready, timeout)

    def plugin_log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.plugin_log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def plugin_events(self) -> list[dict]:
        out = []
        with contextlib.suppress(OSError):
            for line in self.plugin_log.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the plugin's /metrics (0 when absent)."""
        _, text = self.plugin_http("/metrics")
        return metric_sample(text, name, **labels)

    def checkpoint(self) -> dict:
        """The plugin's placements by container id, as its checkpoint holds them."""
        doc = json.loads(self.state.read_text())
        return doc["body"]["policy"]["containers"]

    def placed(self, container: Container | str, timeout: float = 10) -> dict:
        """One container's checkpoint entry, once the plugin has written it (in the background,
        within about a second of the change)."""
        cid = container if isinstance(container, str) else container.id
        found = wait_for(
            f"{cid[:12]} in the checkpoint", lambda: self.checkpoint().get(cid), timeout
        )
        assert isinstance(found, dict)
        return found

    # --- pods -------------------------------------------------------------------------

    def pod_config(
        self, name: str, qos: str, namespace: str = "e2e", annotations: dict | None = None
    ) -> cri.PodSandboxConfig:
        uid = str(uuid.uuid4())
        parent = kubelet.cgroup_parent(qos_named(qos), uid, self.kubepods)
        return cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=uid, namespace=namespace),
            log_directory=str(self.dir / "logs" / uid),
            labels={"e2e-run": self.id, **pod_labels(name, namespace, uid)},
            annotations=annotations or {},
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=parent,
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER)
                ),
            ),
        )

    def run_pod(
        self,
        name: str,
        qos: str = "besteffort",
        cpu_milli: int = 0,
        memory: int = 64 << 20,
        namespace: str = "e2e",
        annotations: dict | None = None,
        containers: int = 1,
        start: bool = True,
        hugepages: dict[int, int] | None = None,
        spec: Spec | None = None,
    ) -> Pod:
        """A pod as the kubelet makes it: sandbox, then each container created and started;
        `hugepages` (bytes per page size in kB) and `spec` are each container's."""
        assert self.cri is not None
        config = self.pod_config(name, qos, namespace, annotations)
        sandbox = self.cri.runtime("RunPodSandbox", cri.RunPodSandboxRequest(config=config))
        pod = Pod(sandbox.pod_sandbox_id, name, namespace, qos, config)
        self.pods[pod.id] = pod
        for i in range(containers):
            self.add_container(
                pod,
                f"c{i}",
                cpu_milli,
                memory,
                annotations=annotations,
                start=start,
                hugepages=hugepages,
                spec=spec,
            )
        return pod

    def create_container(
        self,
        pod: Pod,
        name: str,
        cpu_milli: int = 0,
        memory: int = 64 << 20,
        annotations: dict | None = None,
        attempt: int = 0,
        hugepages: dict[int, int] | None = None,
        spec: Spec | None = None,
    ) -> str:
        assert self.cri is not None
        spec = spec or Spec()
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name, attempt=attempt),
            image=cri.ImageSpec(image=IMAGE, user_specified_image=IMAGE),
            command=list(spec.command),
            mounts=list(spec.mounts),
            labels=container_labels(pod.config, name),
            annotations=annotations or {},
            log_path=f"{name}.log",
            linux=cri.LinuxContainerConfig(
                resources=resources(pod.qos, cpu_milli, memory, hugepages),
                # The kubelet gives every container its pod's namespace modes.
                security_context=cri.LinuxContainerSecurityContext(
                    namespace_options=pod.config.linux.security_context.namespace_options,
                    capabilities=cri.Capability(add_capabilities=list(spec.capabilities)),
                ),
            ),
        )
        return self.cri.runtime(
            "CreateContainer",
            cri.CreateContainerRequest(
                pod_sandbox_id=pod.id, config=config, sandbox_config=pod.config
            ),
        ).container_id

    def add_container(
        self,
        pod: Pod,
        name: str,
        cpu_milli: int = 0,
        memory: int = 64 << 20,
        annotations: dict | None = None,
        start: bool = True,
        attempt: int = 0,
        hugepages: dict[int, int] | None = None,
        spec: Spec | None = None,
    ) -> Container:
        """A container created (attempt N of its name in the pod, as the kubelet counts) and
        started."""
        assert self.cri is not None
        cid = self.create_container(
            pod, name, cpu_milli, memory, annotations, attempt, hugepages, spec
        )
        container = Container(cid, name)
        pod.containers.append(container)
        if start:
            self.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=cid))
        return container

    def remove_pod(self, pod: Pod) -> None:
        self._remove_sandbox(pod.id)
        self.pods.pop(pod.id, None)

    def _remove_sandbox(self, pod_id: str) -> None:
        """As the kubelet deletes a pod with no grace period: its containers stopped first (CRI-O
        would give the sandbox's a stop timeout each: `sleep` as PID 1 ignores SIGTERM)."""
        assert self.cri is not None
        listed = self.cri.runtime(
            "ListContainers",
            cri.ListContainersRequest(filter=cri.ContainerFilter(pod_sandbox_id=pod_id)),
        )
        for c in listed.containers:
            self.cri.runtime("StopContainer", cri.StopContainerRequest(container_id=c.id))
        self.cri.runtime("StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod_id))
        self.cri.runtime("RemovePodSandbox", cri.RemovePodSandboxRequest(pod_sandbox_id=pod_id))

    def pid(self, container_id: str) -> int:
        assert self.cri is not None
        resp = self.cri.runtime(
            "ContainerStatus", cri.ContainerStatusRequest(container_id=container_id, verbose=True)
        )
        return int(json.loads(resp.info["info"])["pid"])

    def exec(self, container: Container | str, *cmd: str) -> subprocess.CompletedProcess:
        """Run `cmd` inside the container (its namespaces and mounts) through the CRI's ExecSync,
        as `kubectl exec` does."""
        assert self.cri is not None
        cid = container if isinstance(container, str) else container.id
        resp = self.cri.runtime(
            "ExecSync", cri.ExecSyncRequest(container_id=cid, cmd=list(cmd), timeout=30), 40
        )
        return subprocess.CompletedProcess(
            list(cmd), resp.exit_code, resp.stdout.decode(errors="replace"),
            resp.stderr.decode(errors="replace"),
        )  # fmt: skip

    def cpuset(self, container: Container | str) -> Cpuset:
        """The container's real cpuset, read from its cgroup."""
        cid = container if isinstance(container, str) else container.id
        return read_cpuset(self.pid(cid))

    def settled(self, timeout: float = 15) -> None:
        """Wait until every placed container's cgroup holds the plugin's placement: re-pins of
        other containers follow the reply, so right after a pod starts they may be on their way."""

        def applied() -> bool:
            _, text = self.plugin_http("/status?format=json")
            placed = {c["container_id"]: c["cpus"] for c in json.loads(text)["containers"]}
            live = [c.id for pod in self.pods.values() for c in pod.containers]
            return all(
                parse_cpus(self.cpuset(cid).cpus) == parse_cpus(placed[cid])
                for cid in live
                if placed.get(cid)
            )

        wait_for("re-pins applied", applied, timeout)

    def cpus(self, container: Container | str) -> str:
        """The container's cgroup cpuset.cpus, checked against where its process may run."""
        cid = container if isinstance(container, str) else container.id
        pid = self.pid(cid)
        cpus = read_cpuset(pid).cpus
        if parse_cpus(cpus) != parse_cpus(affinity(pid)):
            raise AssertionError(
                f"{cid}: cgroup cpus {cpus} but the process may run on {affinity(pid)}"
            )
        return cpus

    # --- cleanup ----------------------------------------------------------------------

    def cleanup(self) -> None:
        """Remove everything this run made; safe to call more than once."""
        if self.cri is not None and self.daemon is not None and self.daemon.poll() is None:
            with contextlib.suppress(Exception):
                for pod in self.cri.runtime(
                    "ListPodSandbox", cri.ListPodSandboxRequest(), timeout=30
                ).items:
                    with contextlib.suppress(Exception):
                        self._remove_sandbox(pod.id)
        self.stop_plugin()
        self.stop_runtime()
        if self.cri is not None:
            self.cri.close()
            self.cri = None
        marker = str(self.dir)
        for pid in _processes_with(marker):  # shims, launched plugins, containers left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in _processes_with(marker):
            with contextlib.suppress(Exception):
                wait_for(f"pid {pid} gone", lambda p=pid: not Path(f"/proc/{p}").exists(), 5)
        self._unmount()
        self._remove_cgroups()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _unmount(self) -> None:
        marker = str(self.dir)
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(marker)
        ]
        for target in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)

    def _remove_cgroups(self) -> None:
        roots = [CGROUP_ROOT] if cgroup_v2() else [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]
        for root in roots:
            top = root / self.kubepods.lstrip("/")
            if not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    def leftovers(self) -> list[str]:
        """What cleanup failed to remove (the tests assert there is nothing)."""
        out = [f"process {pid}" for pid in _processes_with(str(self.dir))]
        out += [
            f"mount {line.split()[4]}"
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(self.dir))
        ]
        roots = [CGROUP_ROOT] if cgroup_v2() else [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]
        out += [
            f"cgroup {r / self.kubepods.lstrip('/')}"
            for r in roots
            if (r / self.kubepods.lstrip("/")).exists()
        ]
        return out


def write_image(tools: Tools, out: Path) -> Path:
    """The test image (busybox sleeping) as an OCI archive at `out`."""
    layer = ociimage.layer(ociimage.busybox_entries(tools.busybox))
    out.write_bytes(ociimage.image_archive(IMAGE, [layer], cmd=SLEEP))
    return out


@contextlib.contextmanager
def running(
    tools: Tools, base: Path, image: Path, *, show_logs: bool = False, **kwargs
) -> Iterator[Run]:
    """A run with its runtime started and `image` imported; on exit everything it made is removed,
    and must be (SetupError when the runtime cannot be had). `show_logs` prints the logs' tails
    first (pytest shows them when the test failed)."""
    run = Run(tools, base, **kwargs)
    try:
        run.start_runtime()
        run.import_image(image)
        yield run
    finally:
        if show_logs:
            print(f"--- {run.tools.runtime} log:\n{run.runtime_log_tail(80)}")
            print(f"--- plugin log:\n{run.plugin_log_tail(40)}")
        run.cleanup()
        left = run.leftovers()
        assert not left, f"cleanup left {left}"


def online_cpus() -> set[int]:
    return parse_cpus(Path("/sys/devices/system/cpu/online").read_text())
