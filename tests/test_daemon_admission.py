"""Degraded placements and consolidation moves through the daemon with the real policy.

The 20-CPU desktop with one whole CPU reserved: a BestEffort pod, then a 19-CPU Guaranteed pod.
The kubelet admits both; the Guaranteed container gets its 19 CPUs and the BestEffort one moves to
the reserved CPU through an update in the same reply. A second BestEffort pod runs on the reserved
CPU too, degraded: a warning, and the metric counts it.
"""

from __future__ import annotations

import structlog.testing

from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import Degradation
from nri_topology.simulate import machine_spec
from nri_topology.testing.harness import connected
from nri_topology.topology import cpuset

DESKTOP = machine_spec.load_bundled("desktop")[1]


def _pod(i: int, qos: str) -> api_pb2.PodSandbox:
    pod = api_pb2.PodSandbox(id=f"p{i}", name=f"pod{i}", namespace="work", uid=f"u{i}")
    pod.linux.cgroup_parent = f"/kubepods/{qos}podu{i}"
    return pod


def _container(i: int, cpus: int = 0) -> api_pb2.Container:
    ctr = api_pb2.Container(id=f"c{i}", pod_sandbox_id=f"p{i}", name="app")
    res = ctr.linux.resources
    if cpus:
        res.cpu.shares.value = cpus * 1024
        res.cpu.quota.value = cpus * 100_000
        res.cpu.period.value = 100_000
    else:
        res.cpu.shares.value = 2
    return ctr


def _degraded(plugin: TopologyPlugin, what: Degradation) -> float:
    value = plugin.metrics.registry.get_sample_value(
        "nri_topology_degraded_placements_total", {"degradation": str(what)}
    )
    assert value is not None  # every label value exists from the start
    return value


async def test_best_effort_moves_to_the_reserved_cpu_for_a_19_cpu_pod() -> None:
    options = Options(reserved_resources=CpuAmount(milli=1000))
    plugin = TopologyPlugin(Policy(DESKTOP, options))
    assert all(_degraded(plugin, d) == 0 for d in Degradation)
    async with connected(plugin) as (peer, _):
        be, big = _pod(0, "besteffort/"), _pod(1, "")
        await peer.run_pod_sandbox(be)
        await peer.create_container(be, _container(0))
        await peer.run_pod_sandbox(big)
        reply = await peer.create_container(big, _container(1, cpus=19))
        pinned = cpuset.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(pinned) == 19
        reserved = DESKTOP.all_cpus - pinned
        assert list(reply.update) == []  # the re-pin follows the reply
        await plugin.settle()
        assert [u.container_id for u in peer.unsolicited_updates] == ["c0"]
        assert cpuset.parse(peer.containers["c0"].linux.resources.cpu.cpus) == reserved
        assert (
            plugin.metrics.registry.get_sample_value("nri_topology_consolidation_moves_total") == 1
        )
        assert _degraded(plugin, Degradation.RESERVED_CPUS) == 0  # it was moved, not created

        late = _pod(2, "besteffort/")
        await peer.run_pod_sandbox(late)
        with structlog.testing.capture_logs() as logs:
            reply = await peer.create_container(late, _container(2))
        assert cpuset.parse(reply.adjust.linux.resources.cpu.cpus) == reserved
        assert _degraded(plugin, Degradation.RESERVED_CPUS) == 1
        warnings = [e for e in logs if e["event"] == "placement degraded"]
        assert warnings and warnings[0]["degraded"] == ["reserved-cpus"]
        assert warnings[0]["log_level"] == "warning"
