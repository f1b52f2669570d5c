"""The kubelet's static CPU manager left on, on the real node: the containers it pinned keep
exactly the cpusets it gave them, when the plugin starts, at a reload and after a kubelet restart
(which re-pins them through the runtime); everything else stays off their CPUs. Last in the
suite: it restarts the kubelet with another CPU manager policy."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e import harness
from tests.node import cluster
from tests.node.test_node import (
    CHART,
    NAMESPACE,
    PODS,
    RELEASE,
    cpus,
    helm,
    metric,
    the_plugin,
    values,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

STATIC = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"}
# With CPU 0 reserved the node's allocatable CPU is the one the pinned pod takes: the plugin asks
# for none, or the scheduler preempts the pinned pod for the plugin's system-node-critical one.
NO_CPU = {"requests": {"cpu": "0", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}


def kubelet_pins(node: cluster.Cluster) -> dict[str, dict[str, str]]:
    """The kubelet's checkpoint entries: pod uid -> container -> cpuset."""
    state = json.loads((node.kubelet_dir / "cpu_manager_state").read_text())
    return state.get("entries") or {}


def now(node: cluster.Cluster, name: str) -> dict:
    """The pod as it is now (a restarted container has a new id)."""
    return node.get("pod", "-n", PODS, name)


def restart_kubelet(node: cluster.Cluster, *, new_policy: bool, **config: object) -> None:
    """Stop and start the kubelet; with another CPU manager policy its checkpoint goes (it
    refuses one of another policy), a plain restart keeps it, as on a node."""
    node.stop("kubelet")
    if new_policy:
        (node.kubelet_dir / "cpu_manager_state").unlink(missing_ok=True)
    node.start_kubelet(**config)


@pytest.fixture(scope="module")
def static_node(node: cluster.Cluster):
    restart_kubelet(node, new_policy=True, **STATIC)
    yield node
    node.kubectl("delete", "pods", "--all", "-n", PODS, "--wait=true")
    restart_kubelet(node, new_policy=True, cpuManagerPolicy="none")


def test_the_kubelets_pins_stay_its_own(static_node: cluster.Cluster) -> None:
    node = static_node
    node.apply(workload("pinned", cpu="1"))
    pinned = node.wait_pod_ready(PODS, "pinned")
    uid = pinned["metadata"]["uid"]
    given = harness.parse_cpus(kubelet_pins(node)[uid]["c"])
    assert cpus(node, now(node, "pinned")) == given
    with helm.Config(kubeconfig_path=node.kubeconfig, namespace=NAMESPACE) as release:
        release.install(
            helm.Chart.load(CHART), RELEASE, values(node, resources=NO_CPU), namespace=NAMESPACE,
            wait="watcher", timeout=180,
        )  # fmt: skip
        try:
            plugin = the_plugin(node)
            node.apply(workload("besteffort"))
            node.wait_pod_ready(PODS, "besteffort")
            rest = harness.online_cpus() - given
            harness.wait_for(
                "BestEffort off the kubelet's CPUs",
                lambda: cpus(node, now(node, "besteffort")) == rest,
            )
            assert cpus(node, now(node, "pinned")) == given, "at start"
            assert not cpus(node, plugin) & given

            applied = metric(plugin, "nri_topology_config_reloads_total", result="applied")
            changed = values(node, resources=NO_CPU)
            changed["config"]["policy"] = {"reserved_resources": {"cpu": "500m"}}
            release.upgrade(helm.Chart.load(CHART), RELEASE, changed, namespace=NAMESPACE)
            harness.wait_for(
                "the configuration reloaded",
                lambda: (
                    metric(plugin, "nri_topology_config_reloads_total", result="applied") > applied
                ),
                90,
            )
            assert cpus(node, now(node, "pinned")) == given, "at reload"

            restart_kubelet(node, new_policy=False, **STATIC)
            node.wait_pod_ready(PODS, "pinned")
            assert harness.parse_cpus(kubelet_pins(node)[uid]["c"]) == given
            # the kubelet re-pins at its reconcile period (10 s) after the restart: two of them
            time.sleep(25)
            assert cpus(node, now(node, "pinned")) == given, (
                "after the kubelet's restart and re-pin"
            )
            assert cpus(node, now(node, "besteffort")) == rest
        finally:
            # the uninstall hook's pod needs CPU the pinned pod holds
            node.kubectl("delete", "pods", "--all", "-n", PODS, "--wait=true")
            release.uninstall(RELEASE, wait="watcher", timeout=180)
