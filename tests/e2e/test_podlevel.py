"""Pod-level resources (KEP-2837) on each real runtime: a Guaranteed pod that states its CPUs
for the pod (the sandbox's Linux resources, as the kubelet sends them) and a container that
states none gets the pod's CPUs exclusively; without them it would share every CPU. And the pod
resized in place (the kubelet's CRI UpdatePodSandboxResources, which the runtime relays to the
plugins as NRI UpdatePodSandbox): the container is placed again with the pod's new CPUs, where
the runtime has that call (containerd 2.2 and later)."""

from __future__ import annotations

import grpc
import pytest

from nri_topology.cri import api_pb2 as cri
from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from tests.e2e.harness import Pod, Run, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

MIB = 1 << 20


def pod_resources(cpu_milli: int) -> cri.LinuxContainerResources:
    """A Guaranteed pod's own resources of `cpu_milli` and 256 MiB, as the kubelet sends them."""
    r = kubelet.resources(Amounts(cpu_milli, cpu_milli, 256 * MIB, 256 * MIB))
    return cri.LinuxContainerResources(
        cpu_shares=r.cpu_shares or 0,
        cpu_period=r.cpu_period or 0,
        cpu_quota=r.cpu_quota or 0,
        memory_limit_in_bytes=r.memory_limit or 0,
    )


def pod_level(run: Run, name: str, cpu_milli: int) -> Pod:
    """A Guaranteed pod stating `cpu_milli` and 256 MiB for the pod, one container stating none
    (no requests or limits: the kubelet gives it the least CPU shares and nothing else)."""
    assert run.cri is not None
    config = run.pod_config(name, "guaranteed")
    config.linux.resources.CopyFrom(pod_resources(cpu_milli))
    sandbox = run.cri.runtime("RunPodSandbox", cri.RunPodSandboxRequest(config=config))
    pod = Pod(sandbox.pod_sandbox_id, name, "e2e", "guaranteed", config)
    run.pods[pod.id] = pod
    run.add_container(pod, "app", cpu_milli=0, memory=0)  # the kubelet's settings for none
    return pod


def test_a_container_stating_nothing_gets_its_pods_cpus(run: Run) -> None:
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs")
    run.start_plugin()
    pod = pod_level(run, "podlevel", 1000)
    got = parse_cpus(run.cpus(pod.containers[0]))
    placed = run.placed(pod.containers[0])
    assert placed["kind"] == "exclusive" and len(got) == 1, (placed, got)


def test_a_pod_resized_in_place_places_its_container_again(run: Run) -> None:
    if len(online_cpus()) < 2:
        pytest.skip("needs at least 2 CPUs")
    run.start_plugin()
    pod = pod_level(run, "resized", 500)  # a fraction of a CPU: shared CPUs
    container = pod.containers[0]
    assert run.placed(container)["kind"] == "shared"
    assert run.cri is not None
    resize = cri.UpdatePodSandboxResourcesRequest(
        pod_sandbox_id=pod.id, resources=pod_resources(1000)
    )
    try:
        run.cri.runtime("UpdatePodSandboxResources", resize)
    except grpc.RpcError as exc:
        if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
            raise
        pytest.skip(f"{run.tools.runtime} {run.tools.version} has no UpdatePodSandboxResources")
    # one whole CPU for the pod: its container holds it alone, sent apart from the event's reply
    # through the transport (UpdateContainers on containerd 2.4, the CRI on 2.3 and CRI-O)
    wait_for(
        "the container placed again",
        lambda: run.checkpoint().get(container.id, {}).get("kind") == "exclusive",
        30,
    )
    wait_for("its cpuset narrowed", lambda: len(parse_cpus(run.cpus(container))) == 1, 30)
