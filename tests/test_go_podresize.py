"""An in-place pod resize through containerd/nri's own Go adaptation (0.12 or later): the plugin,
asked for UpdatePodSandbox, re-places the container holding the pod's resources and sends its
new cpuset through UpdateContainers, which the adaptation accepts
(benchmarks/go_side/podresize)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks import go_side
from benchmarks.workload import daemon_command, sysfs_root
from nri_topology.nri import api_pb2
from nri_topology.topology import cpuset

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


def pod_resources(cpus: int) -> api_pb2.LinuxResources:
    """A Guaranteed pod's resources of `cpus` CPUs and 1 GiB, as the kubelet writes them."""
    res = api_pb2.LinuxResources()
    res.cpu.shares.value = 1024 * cpus
    res.cpu.quota.value = 100_000 * cpus
    res.cpu.period.value = 100_000
    res.memory.limit.value = GIB
    return res


def requests(cpus: int, resized: int) -> list[tuple[api_pb2.PodSandbox, api_pb2.Container]]:
    """The pod stating `cpus` CPUs with its one container stating none, then the pod resized."""
    pod = api_pb2.PodSandbox(id="p1", name="pod1", namespace="ns", uid="u1")
    pod.linux.cgroup_parent = "/kubepods/podu1"
    pod.linux.pod_resources.CopyFrom(pod_resources(cpus))
    ctr = api_pb2.Container(id="c1", pod_sandbox_id="p1", name="app", created_at=1)
    ctr.linux.resources.cpu.shares.value = 2
    bigger = api_pb2.PodSandbox()
    bigger.CopyFrom(pod)
    bigger.linux.pod_resources.CopyFrom(pod_resources(resized))
    return [(pod, ctr), (bigger, api_pb2.Container())]


def run_podresize(binary: str, sysfs: Path, cpus: int, resized: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nri-go-resize-") as tmp:
        sock, reqs = Path(tmp) / "nri.sock", Path(tmp) / "requests.bin"
        go_side.write_requests(reqs, requests(cpus, resized))
        plugin = daemon_command(sock, sysfs, tmp, "info")
        cmd = [binary, f"-socket={sock}", f"-request={reqs}", f"-plugin-log={tmp}/out.log"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [*cmd, "--", *plugin], capture_output=True, text=True, cwd=ROOT, env=env, check=False
        )
        assert proc.returncode == 0, proc.stderr + (Path(tmp) / "plugin.log").read_text()[-3000:]
    return json.loads(proc.stdout)


def podresize_binary() -> str:
    if not go_side.toolchain_cached():
        pytest.skip(f"no Go toolchain in {go_side.CACHE} (benchmarks/go_side.py downloads it once)")
    binary = go_side.build().get("PODRESIZE", "")
    if not binary:
        pytest.skip("the Go side is built against containerd/nri before 0.12 (no UpdatePodSandbox)")
    return binary


def test_a_pod_resize_under_the_go_adaptation(tmp_path: Path) -> None:
    binary = podresize_binary()
    result = run_podresize(binary, sysfs_root("4-socket", tmp_path), 2, 4)
    assert result["resize_error"] == ""
    assert len(cpuset.parse(result["cpus_created"])) == 2  # the pod's 2 CPUs, exclusive
    assert len(cpuset.parse(result["cpus_resized"])) == 4  # the resize reached the adaptation


def test_a_refused_pod_resize_fails_the_event_under_the_go_adaptation(tmp_path: Path) -> None:
    binary = podresize_binary()
    result = run_podresize(binary, sysfs_root("4-socket", tmp_path), 2, 1000)
    assert "nri-topology" in result["resize_error"]
    assert result["cpus_resized"] == result["cpus_created"]
