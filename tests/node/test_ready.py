"""Readiness that means it, on the real node: a surge upgrade whose new pod cannot take over
(the runtime's socket is not where its values say) stalls, and the old plugin goes on placing
pods and publishing the node's topology."""

from __future__ import annotations

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
    nrt,
    plugin_http,
    plugin_pods,
    the_plugin,
    values,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def release(node: cluster.Cluster):
    # The Guaranteed pod of earlier steps holds the CPU this module's needs.
    node.kubectl("delete", "pods", "--all", "-n", PODS, "--wait=true")
    with helm.Config(kubeconfig_path=node.kubeconfig, namespace=NAMESPACE) as config:
        config.install(
            helm.Chart.load(CHART), RELEASE, values(node), namespace=NAMESPACE,
            wait="watcher", timeout=180,
        )  # fmt: skip
        yield config
        config.uninstall(RELEASE, wait="watcher", timeout=180)
        node.kubectl("delete", "pods", "--all", "-n", PODS, "--wait=true")


def test_an_upgrade_with_wrong_socket_paths_leaves_the_old_plugin_placing(
    node: cluster.Cluster, release
) -> None:
    old = the_plugin(node)
    published = harness.wait_for("the NodeResourceTopology", lambda: nrt(node), 30)
    wrong = values(node)
    # A directory with no socket, on the run's shared mount (as HostToContainer needs).
    nowhere = node.run.dir / "nowhere"
    wrong["nri"] = {"socketDir": str(nowhere), "socketName": "nri.sock"}
    release.upgrade(helm.Chart.load(CHART), RELEASE, wrong, namespace=NAMESPACE)
    harness.wait_for("the surge pod", lambda: len(plugin_pods(node)) == 2, 60)
    (new,) = [p for p in plugin_pods(node) if p["metadata"]["name"] != old["metadata"]["name"]]
    # Well past the readiness probe's period (5 s) and the standby's own checks.
    time.sleep(20)
    pods = {p["metadata"]["name"]: p for p in plugin_pods(node)}
    assert set(pods) == {old["metadata"]["name"], new["metadata"]["name"]}, "the old pod stays"
    conditions = {c["type"]: c["status"] for c in pods[new["metadata"]["name"]]["status"].get(
        "conditions", [])}  # fmt: skip
    assert conditions.get("Ready") != "True", "a standby that cannot take over is not Ready"
    status, body = plugin_http(pods[new["metadata"]["name"]], "/readyz")
    assert status == 503 and str(nowhere) in body
    # the old plugin still places pods and keeps the node's object
    node.apply(workload("placed", cpu="1"))
    placed = node.wait_pod_ready(PODS, "placed")
    (exclusive,) = cpus(node, placed)
    assert exclusive not in cpus(node, pods[old["metadata"]["name"]])
    assert plugin_http(pods[old["metadata"]["name"]], "/readyz")[0] == 200
    assert nrt(node)["metadata"]["uid"] == published["metadata"]["uid"]
    release.rollback(RELEASE, wait="watcher", timeout=180)
    harness.wait_for("the stalled pod gone", lambda: len(plugin_pods(node)) == 1, 90)
    assert plugin_pods(node)[0]["metadata"]["name"] == old["metadata"]["name"]
