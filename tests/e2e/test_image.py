"""The product image (packaging/image/build.py) run on each runtime the way the DaemonSet
(packaging/kubernetes/daemonset.yaml) runs it: its image, arguments, mounts (host NRI socket
directory, read-only sysfs, the host's cgroups read-write, state and config directories on the
host) and security context."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nri_topology.cri import api_pb2 as cri
from tests.e2e.conftest import _unavailable
from tests.e2e.harness import REPO, Pod, Run, container_labels, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30


@pytest.fixture(scope="session")
def product_image(e2e_enabled: None, base_dir: Path) -> tuple[Path, dict]:
    if sys.version_info[:2] != (3, 11):
        _unavailable("the image build needs Python 3.11 (the image's Python, Debian 12's)")
    out = base_dir / "nri-topology.oci.tar"
    proc = subprocess.run(
        [sys.executable, str(REPO / "packaging/image/build.py"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"image build failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    info = json.loads(proc.stdout)
    print(f"image {info['image']}: {info['bytes'] / 1e6:.1f} MB in {info['seconds']} s")
    return out, info


def daemonset() -> tuple[dict, dict]:
    docs = list(yaml.safe_load_all((REPO / "packaging/kubernetes/daemonset.yaml").read_text()))
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    return ds["spec"]["template"]["spec"], cm


def run_as_daemonset(run: Run, image: str, sysfs: str = "/host/sys") -> Pod:
    """The DaemonSet's pod, with host paths of this run and host network (no CNI here);
    `sysfs` in place of its `--sysfs`."""
    spec, cm = daemonset()
    (container,) = spec["containers"]
    assert container["image"] == image, "the DaemonSet and the build must name the same image"
    host = {
        "/var/run/nri": run.dir,  # the runtime's NRI socket is <run>/nri.sock
        "/run/containerd": run.dir,  # its CRI socket is <run>/containerd.sock (CRI-O: crio.sock)
        "/sys": Path("/sys"),
        "/sys/fs/cgroup": Path("/sys/fs/cgroup"),
        "/var/lib/nri-topology": run.dir / "host-state",
    }
    config_dir = run.dir / "configmap"
    config_dir.mkdir(exist_ok=True)
    for key, text in cm["data"].items():
        (config_dir / key).write_text(text)
    paths = {}
    for volume in spec["volumes"]:
        if "hostPath" in volume:
            path = volume["hostPath"]["path"]
            # Host directories the test does not provide (kubelet sockets) are empty ones.
            paths[volume["name"]] = host.get(path, run.dir / "host" / path.lstrip("/"))
        elif "configMap" in volume:
            paths[volume["name"]] = config_dir
    for p in paths.values():
        p.mkdir(parents=True, exist_ok=True)
    mounts = [
        cri.Mount(
            container_path=m["mountPath"],
            host_path=str(paths[m["name"]]),
            readonly=m.get("readOnly", False),
        )
        for m in container["volumeMounts"]
    ]
    # CRI-O's CRI socket is crio.sock, in the same directory here (the DaemonSet's comment).
    given = {
        "--metrics-port": str(run.plugin_port),
        "--sysfs": sysfs,
        "--cri-socket": f"/run/containerd/{run.sock.name}",
    }

    def arg(a: str) -> str:
        key = a.split("=", 1)[0]
        return f"{key}={given[key]}" if key in given else a

    args = [arg(a) for a in container["args"]]
    assert f"--sysfs={sysfs}" in args
    security = container["securityContext"]
    config = run.pod_config("nri-topology-x", "burstable", namespace="kube-system")
    sandbox = run.cri.runtime("RunPodSandbox", cri.RunPodSandboxRequest(config=config))
    pod = Pod(sandbox.pod_sandbox_id, "nri-topology-x", "kube-system", "burstable", config)
    run.pods[pod.id] = pod
    created = run.cri.runtime(
        "CreateContainer",
        cri.CreateContainerRequest(
            pod_sandbox_id=pod.id,
            sandbox_config=config,
            config=cri.ContainerConfig(
                metadata=cri.ContainerMetadata(name=container["name"]),
                labels=container_labels(config, container["name"]),
                image=cri.ImageSpec(image=image, user_specified_image=image),
                args=args,
                mounts=mounts,
                log_path="plugin.log",
                linux=cri.LinuxContainerConfig(
                    resources=cri.LinuxContainerResources(
                        cpu_shares=51, cpu_period=100000, memory_limit_in_bytes=256 << 20
                    ),
                    security_context=cri.LinuxContainerSecurityContext(
                        namespace_options=config.linux.security_context.namespace_options,
                        readonly_rootfs=security["readOnlyRootFilesystem"],
                        no_new_privs=not security["allowPrivilegeEscalation"],
                        capabilities=cri.Capability(
                            drop_capabilities=security["capabilities"]["drop"]
                        ),
                    ),
                ),
            ),
        ),
    )
    run.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=created.container_id))
    return pod


def test_image_runs_as_the_daemonset_and_places(run: Run, product_image) -> None:
    archive, info = product_image
    started = time.monotonic()
    run.import_archive(archive, info["image"])
    print(f"image imported in {time.monotonic() - started:.1f}s")
    plugin = run_as_daemonset(run, info["image"])
    try:
        wait_for("plugin in the image ready", lambda: run.plugin_http("/readyz")[0] == 200, 60)
    except TimeoutError:
        for log in (run.dir / "logs").rglob("plugin.log"):
            print(log.read_text()[-3000:])
        raise
    _, text = run.plugin_http("/status?format=json")
    assert run.metric("nri_topology_cgroup_writes_enabled") == 1, json.loads(text)["updates"]
    be = run.run_pod("be", "besteffort")
    g = run.run_pod("g", "guaranteed", cpu_milli=1000, memory=GIB // 4)
    exclusive = parse_cpus(run.cpus(g.containers[0]))
    assert len(exclusive) == 1
    # Written through the host's cgroups mounted in the pod, before the start returned.
    assert parse_cpus(run.cpus(be.containers[0])) == online_cpus() - exclusive
    assert run.metric("nri_topology_cgroup_writes_total", outcome="written") == 1
    assert run.metric("nri_topology_exclusive_window_seconds_sum") == 0
    run.settled()  # the runtime's re-pin of `be` follows
    # The state lives on the host, where the next plugin pod finds it.
    state = run.dir / "host-state" / "state.json"
    wait_for("checkpoint on the host", state.exists, 10)
    assert g.containers[0].id in json.loads(state.read_text())["body"]["policy"]["containers"]
    # Deleting the plugin's pod moves nothing; a new one adopts the placements, even one told
    # to find the cgroups in the pod's own /sys, where none of the runtime's containers' cgroups
    # are (its own cgroup, on v1; its cgroup namespace, on v2): it says so, and writes nothing.
    before = {c.id: run.cpus(c) for p in (be, g) for c in p.containers}
    run.remove_pod(plugin)
    time.sleep(1)
    assert {c.id: run.cpus(c) for p in (be, g) for c in p.containers} == before
    wrong = run_as_daemonset(run, info["image"], sysfs="/sys")
    wait_for("new plugin pod ready", lambda: run.plugin_http("/readyz")[0] == 200, 60)
    assert {c.id: run.cpus(c) for p in (be, g) for c in p.containers} == before
    assert run.metric("nri_topology_cgroup_writes_enabled") == 0
    assert run.metric("nri_topology_errors_total", reason="cgroup_root") == 1
    _, text = run.plugin_http("/status?format=json")
    assert json.loads(text)["updates"]["cgroup_writes_off"].startswith(
        "the cgroup root holds none of the runtime's containers"
    )
    (warned,) = [
        e
        for e in pod_log(run, wrong)
        if e.get("event", "").startswith("none of the runtime's containers has its cgroup")
    ]
    assert warned["cgroup_root"].startswith("/sys/fs/cgroup"), warned


def pod_log(run: Run, pod: Pod) -> list[dict]:
    """The JSON lines a pod's containers wrote to stdout or stderr (CRI log format)."""
    out = []
    for log in (run.dir / "logs" / pod.config.metadata.uid).rglob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, IndexError):
                out.append(json.loads(line.split(" ", 3)[3]))
    return out


def test_image_build_is_reproducible(product_image, base_dir: Path) -> None:
    _, info = product_image
    again = base_dir / "again.oci.tar"
    proc = subprocess.run(
        [sys.executable, str(REPO / "packaging/image/build.py"), "--out", str(again)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout)["archive_digest"] == info["archive_digest"]
    again.unlink()
