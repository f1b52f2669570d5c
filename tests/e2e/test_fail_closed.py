"""Failing closed on a real CRI-O (docs/operations.md, "Failing closed"): with the runtime's NRI
default validator requiring nri-topology, a container is not created while the plugin is away
(refused as the kubelet would see it, and created on its retry once the plugin is back, placed by
it), and a pod that tolerates the missing plugin starts anyway.

CRI-O 1.36.3 comes from ../shared/runtimes/crio (the test skips, saying why, without it);
containerd 1.7 and 2.1 have no default validator to require a plugin with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from nri_topology.cri import api_pb2 as cri
from nri_topology.kubelet import linux_resources as kubelet
from tests.e2e.harness import (
    CGROUP_ROOT,
    REPO,
    SLEEP,
    Cri,
    _processes_with,
    cgroup_v2,
    free_port,
    qos_named,
    resources,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CRIO = REPO.parent / "shared" / "runtimes" / "crio"
TOLERATE = "tolerate-missing-plugins.nri.io"
IMAGE = "localhost/busybox:v1"
VALIDATOR = f"""
[crio.nri.default_validator]
nri_enable_default_validator = true
nri_validator_required_plugins = ["nri-topology"]
nri_validator_tolerate_missing_plugins_annotation = "{TOLERATE}"
"""


def _image_spec(name: str) -> cri.ImageSpec:
    """An ImageSpec with `user_specified_image` (field 18), which CRI-O requires; as raw field
    bytes where the generated messages lack it."""
    spec = cri.ImageSpec(image=name)
    if "user_specified_image" in cri.ImageSpec.DESCRIPTOR.fields_by_name:
        setattr(spec, "user_specified_image", name)  # noqa: B010
        return spec
    raw = name.encode()
    assert len(raw) < 128  # a one-byte length
    field = b"\x92\x01" + bytes([len(raw)]) + raw
    return cri.ImageSpec.FromString(spec.SerializeToString() + field)


class CrioRun:
    """A private CRI-O with NRI and the default validator, and the plugin beside it."""

    def __init__(self, base: Path) -> None:
        self.id = uuid.uuid4().hex[:10]
        self.dir = base / f"crio-{self.id}"
        self.store = self.dir / "store"
        self.kubepods = f"/kubepods-e2e-{self.id}"
        for d in ("nri/plugins", "nri/conf.d", "pod-logs", "cni", "store"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        shutil.copy(CRIO / "10-loopback.conflist", self.dir / "cni")
        text = (CRIO / "crio.conf.in").read_text()
        for key, value in {
            "@RUN@": str(self.dir),
            "@STORE@": str(self.store),
            "@HERE@": str(CRIO),
            "@RUNC@": str(CRIO / "runc-oomclamp"),
            "@CNI_CONF@": str(self.dir / "cni"),
        }.items():
            text = text.replace(key, value)
        (self.dir / "crio.conf").write_text(text + VALIDATOR)
        self.crio: subprocess.Popen | None = None
        self.plugin: subprocess.Popen | None = None
        self.port = free_port()
        self.plugin_log = self.dir / "plugin.log"
        self.cri: Cri | None = None

    def import_image(self, archive: Path) -> None:
        storage = f"containers-storage:[overlay@{self.store}/root+{self.store}/runroot]"
        for name in (IMAGE, "localhost/pause:v1"):
            subprocess.run(
                ["skopeo", "--policy", str(CRIO / "policy.json"), "copy", "-q",
                 f"oci-archive:{archive}", f"{storage}{name}"],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip

    def start_crio(self) -> None:
        log = (self.dir / "crio.log").open("ab")
        self.crio = subprocess.Popen(
            [str(CRIO / "crio"), "--config", str(self.dir / "crio.conf"),
             "--config-dir", str(self.dir / "no-drop-ins")],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()
        sock = self.dir / "crio.sock"
        wait_for("CRI-O's socket", lambda: sock.exists() or self.crio.poll() is not None, 60)
        assert self.crio.poll() is None, self.log_tail("crio.log")
        self.cri = Cri(sock)
        wait_for("CRI-O answers", self._answers, 60)

    def _answers(self) -> bool:
        assert self.cri is not None
        with contextlib.suppress(grpc.RpcError):
            self.cri.version()
            return True
        return False

    def start_plugin(self) -> None:
        script = Path(sys.executable).parent / "nri-topology"
        entry = [str(script)] if script.exists() else [sys.executable, "-m", "nri_topology.cli"]
        (self.dir / "plugin.yaml").write_text("")
        log = self.plugin_log.open("ab")
        self.plugin = subprocess.Popen(
            [*entry, "run", "--config", str(self.dir / "plugin.yaml"),
             "--socket", str(self.dir / "nri.sock"), "--state", str(self.dir / "state.json"),
             "--metrics-port", str(self.port), "--log-format", "json"],
            stdout=log, stderr=log, start_new_session=True, cwd=REPO,
        )  # fmt: skip
        log.close()
        wait_for("plugin registered", self._plugin_ready, 60)

    def _plugin_ready(self) -> bool:
        import http.client

        assert self.plugin is not None
        assert self.plugin.poll() is None, self.log_tail("plugin.log")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def stop_plugin(self) -> None:
        if self.plugin is not None and self.plugin.poll() is None:
            self.plugin.send_signal(signal.SIGTERM)
            self.plugin.wait(15)
        self.plugin = None

    def log_tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.dir / name).read_text(errors="replace").splitlines()[-lines:])
        return ""

    def run_sandbox(self, name: str, qos: str, annotations: dict | None = None) -> tuple:
        assert self.cri is not None
        uid = str(uuid.uuid4())
        config = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=uid, namespace="e2e"),
            log_directory=str(self.dir / "pod-logs" / uid),
            annotations=annotations or {},
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=kubelet.cgroup_parent(qos_named(qos), uid, self.kubepods),
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER)
                ),
            ),
        )
        resp = self.cri.runtime("RunPodSandbox", cri.RunPodSandboxRequest(config=config))
        return resp.pod_sandbox_id, config

    def create(self, sandbox: tuple, qos: str, cpu_milli: int) -> str:
        """CreateContainer and StartContainer, as the kubelet calls them; the container id."""
        assert self.cri is not None
        pod_id, config = sandbox
        ctr = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="c0"),
            image=_image_spec(IMAGE),
            command=SLEEP,
            annotations=dict(config.annotations),
            log_path="c0.log",
            linux=cri.LinuxContainerConfig(
                resources=resources(qos, cpu_milli, 64 << 20),
                security_context=cri.LinuxContainerSecurityContext(
                    namespace_options=cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER)
                ),
            ),
        )
        cid = self.cri.runtime(
            "CreateContainer",
            cri.CreateContainerRequest(pod_sandbox_id=pod_id, config=ctr, sandbox_config=config),
        ).container_id
        self.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=cid))
        return cid

    def cleanup(self) -> None:
        if self.cri is not None and self.crio is not None and self.crio.poll() is None:
            with contextlib.suppress(Exception):  # sleep as pid 1 ignores SIGTERM: no grace
                ctrs = self.cri.runtime("ListContainers", cri.ListContainersRequest()).containers
                for ctr in ctrs:
                    stop = cri.StopContainerRequest(container_id=ctr.id, timeout=0)
                    self.cri.runtime("StopContainer", stop)
            with contextlib.suppress(Exception):
                pods = self.cri.runtime("ListPodSandbox", cri.ListPodSandboxRequest()).items
                for pod in pods:
                    with contextlib.suppress(Exception):
                        req = cri.StopPodSandboxRequest(pod_sandbox_id=pod.id)
                        self.cri.runtime("StopPodSandbox", req)
                        rm = cri.RemovePodSandboxRequest(pod_sandbox_id=pod.id)
                        self.cri.runtime("RemovePodSandbox", rm)
        self.stop_plugin()
        if self.crio is not None and self.crio.poll() is None:
            self.crio.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.crio.wait(30)
            if self.crio.poll() is None:
                self.crio.kill()
        if self.cri is not None:
            self.cri.close()
        for pid in _processes_with(str(self.dir)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        marker = str(self.dir)
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(marker)
        ]
        for target in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)
        roots = [CGROUP_ROOT] if cgroup_v2() else [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]
        for root in roots:
            top = root / self.kubepods.lstrip("/")
            if top.is_dir():
                for d in sorted(
                    (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
                ):
                    with contextlib.suppress(OSError):
                        d.rmdir()
                with contextlib.suppress(OSError):
                    top.rmdir()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def crio(base_dir: Path, image: Path) -> Iterator[CrioRun]:
    if not (CRIO / "crio").exists():
        pytest.skip(f"e2e: no CRI-O build at {CRIO} (../shared is not beside the checkout)")
    missing = [tool for tool in ("conmon", "skopeo") if shutil.which(tool) is None]
    if missing or not Path("/usr/sbin/runc").exists():
        pytest.skip(f"e2e: CRI-O needs {', '.join(missing) or 'runc'} (apt-get install)")
    run = CrioRun(base_dir)
    try:
        run.import_image(image)
        run.start_crio()
        yield run
    finally:
        print(f"--- crio log:\n{run.log_tail('crio.log', 40)}")
        print(f"--- plugin log:\n{run.log_tail('plugin.log', 40)}")
        run.cleanup()


def test_required_plugin_away_refuses_creation_then_places_on_retry(crio: CrioRun) -> None:
    crio.start_plugin()
    placed = crio.create(crio.run_sandbox("before", "burstable"), "burstable", 200)
    assert placed in crio.plugin_log.read_text()

    crio.stop_plugin()  # restarting, upgraded, crashed: the runtime has no nri-topology
    waiting = crio.run_sandbox("during", "burstable")
    with pytest.raises(grpc.RpcError) as refused:
        crio.create(waiting, "burstable", 200)
    assert 'required plugin "nri-topology" not present' in refused.value.details()
    tolerant = crio.run_sandbox("tolerant", "besteffort", {TOLERATE: "true"})
    crio.create(tolerant, "besteffort", 0)  # the plugin's own pod, static pods

    crio.start_plugin()
    retried = crio.create(waiting, "burstable", 200)  # the kubelet's retry
    log = crio.plugin_log.read_text()
    assert retried in log and '"event": "container created"' in log
