"""The chart on a real node, as an operator runs it: Helm v4 (helm-python-sdk) installs it into
the cluster of conftest.py, the real kubelet starts pods made through the API, and the real
DaemonSet controller rolls upgrades out. The checks are ordered steps on one cluster: each
builds on the state the previous ones left (the release, the pods and where they run).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_topology.config.schema import DEFAULT_METRICS_PORT
from tests.e2e import harness
from tests.node import cluster
from tests.node.conftest import IMAGE_REF
from tests.sockets import http_get
from tests.test_packaging import CHART, SOCKET_LAYOUTS, socket_layout_values

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm v4) not installed")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

RELEASE = "nri-topology"
NAMESPACE = "kube-system"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
PODS = "default"


def values(node: cluster.Cluster, **more: Any) -> dict[str, Any]:
    """The chart's values for this node: its image as built, never pulled; both sockets in the
    run's one directory; the state file and the kubelet's configuration where this node has
    them."""
    run = node.run
    base: dict[str, Any] = {
        "image": {"repository": IMAGE_REF, "tag": cluster.version(), "pullPolicy": "Never"},
        "nri": {"socketDir": str(run.dir), "socketName": run.nri_socket.name},
        "cri": {"socketDir": str(run.dir), "socketName": run.sock.name},
        "stateDir": str(run.dir / "plugin-state"),
        "kubeletDir": str(node.kubelet_dir),
        "config": {"kubelet": {"config": str(node.kubelet_dir / "config.yaml")}},
    }
    return {**base, **more}


@pytest.fixture(scope="module")
def helm_config(node: cluster.Cluster):
    with helm.Config(kubeconfig_path=node.kubeconfig, namespace=NAMESPACE) as config:
        yield config


def plugin_pods(node: cluster.Cluster) -> list[dict]:
    return [
        p
        for p in node.pods(NAMESPACE, SELECTOR)
        if p["metadata"]["labels"]["app.kubernetes.io/name"] == "nri-topology"
    ]


def the_plugin(node: cluster.Cluster) -> dict:
    """The one plugin pod, Ready."""
    (pod,) = plugin_pods(node)
    return node.wait_pod_ready(NAMESPACE, pod["metadata"]["name"])


def plugin_http(pod: dict, path: str) -> tuple[int, str]:
    """The plugin's metrics server, at its pod's address on the node's bridge."""
    return http_get(pod["status"]["podIP"], DEFAULT_METRICS_PORT, path)


def workload(name: str, cpu: str | None = None) -> dict:
    """A pod of one busybox container: Guaranteed with `cpu`, else BestEffort."""
    limits = {"cpu": cpu, "memory": "64Mi"} if cpu else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": PODS},
        "spec": {
            "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
            "dnsPolicy": "Default",  # the node has no cluster DNS
            "containers": [{
                "name": "c", "image": harness.IMAGE, "imagePullPolicy": "Never",
                "command": harness.SLEEP,
                "resources": {"requests": limits, "limits": limits} if cpu else {},
            }],
        },
    }  # fmt: skip


def cpus(node: cluster.Cluster, pod: dict) -> set[int]:
    """The pod's container's CPUs, from its cgroup (checked against its process's affinity)."""
    return harness.parse_cpus(node.run.cpus(node.container_id(pod)))


def placements(node: cluster.Cluster) -> dict[str, set[int]]:
    """The CPUs of every workload pod's container, by pod name."""
    return {p["metadata"]["name"]: cpus(node, p) for p in node.pods(PODS)}


def nrt(node: cluster.Cluster) -> dict | None:
    out = node.kubectl(
        "get", "noderesourcetopologies.topology.node.k8s.io", "-o", "json", check=False
    )
    items = json.loads(out or '{"items": []}')["items"]
    return next((i for i in items if i["metadata"]["name"] == cluster.NODE), None)


def test_each_socket_layout_is_accepted_by_the_apiserver(node: cluster.Cluster) -> None:
    """The renders test_packaging checks, applied (server-side dry run) to a real apiserver,
    which refuses what the schemas let through (duplicate mount paths)."""
    chart = helm.Chart.load(CHART)
    for layout in SOCKET_LAYOUTS:
        rendered = chart.render(socket_layout_values(layout), name=RELEASE, namespace=NAMESPACE)
        docs = [d for n in sorted(rendered) for d in yaml.safe_load_all(rendered[n]) if d]
        node.apply(docs, "--dry-run=server")


def test_install_starts_a_ready_plugin(node: cluster.Cluster, helm_config) -> None:
    started = time.monotonic()
    helm_config.install(
        helm.Chart.load(CHART), RELEASE, values(node), namespace=NAMESPACE,
        wait="watcher", timeout=180,
    )  # fmt: skip
    pod = the_plugin(node)
    print(f"plugin pod Ready {time.monotonic() - started:.1f}s after helm install")
    assert plugin_http(pod, "/readyz")[0] == 200


def test_guaranteed_pod_is_exclusive_and_besteffort_shrinks(node: cluster.Cluster) -> None:
    node.apply(workload("besteffort"))
    be = node.wait_pod_ready(PODS, "besteffort")
    assert cpus(node, be) == harness.online_cpus()
    node.apply(workload("guaranteed", cpu="1"))
    g = node.wait_pod_ready(PODS, "guaranteed")
    (exclusive,) = cpus(node, g)
    rest = harness.online_cpus() - {exclusive}
    harness.wait_for("BestEffort shrunk", lambda: cpus(node, be) == rest, 15)
    assert exclusive not in cpus(node, the_plugin(node))


def comparable(zones: list[dict]) -> list[dict]:
    """The zones but for what changes while the plugin runs: availability (its placements), and
    memory amounts, which on a machine with hot-plugged memory (as CI's) differ between the
    plugin's start and now."""
    return [
        {**z, "resources": [
            {"name": r["name"]} if r["name"] == "memory" else {**r, "available": None}
            for r in z.get("resources", [])
        ]}
        for z in zones
    ]  # fmt: skip


def cpu_of(zone: dict, field: str) -> int:
    """A zone's CPU amount in millicores."""
    (cpu,) = [r[field] for r in zone["resources"] if r["name"] == "cpu"]
    return int(cpu[:-1]) if cpu.endswith("m") else 1000 * int(cpu)


def test_published_topology_is_the_plugins_own(node: cluster.Cluster) -> None:
    """The object the plugin publishes through the chart's account is what `nri-topology
    topology --nrt` prints in its pod (which places nothing), but for the CPU the Guaranteed
    pod holds, no longer available."""
    pod = the_plugin(node)
    printed = json.loads(node.kubectl(
        "exec", "-n", NAMESPACE, pod["metadata"]["name"], "--", "nri-topology", "topology",
        "--nrt", "--config", "/etc/nri-topology/config.yaml", "--sysfs", "/host/sys",
    ))  # fmt: skip
    published = harness.wait_for("the NodeResourceTopology", lambda: nrt(node), 30)
    assert isinstance(published, dict)
    for key in ("attributes", "topologyPolicies"):
        assert published.get(key) == printed.get(key), key
    assert comparable(published["zones"]) == comparable(printed["zones"])
    (zone,) = [z for z in printed["zones"] if z["type"] == "Node"]
    assert cpu_of(zone, "available") == cpu_of(zone, "allocatable")
    harness.wait_for(
        "the Guaranteed pod's CPU taken from the published availability",
        lambda: [
            cpu_of(z, "available") for z in nrt(node)["zones"] if z["type"] == "Node"
        ] == [cpu_of(zone, "allocatable") - 1000],
        30,
    )  # fmt: skip


def mounts_of(node: cluster.Cluster, pod: dict) -> list[str]:
    """The mount points the pod's container sees, from the host's /proc."""
    pid = node.run.pid(node.container_id(pod))
    return [line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]


def test_the_runtimes_mounts_do_not_stay_in_the_plugins_pod(node: cluster.Cluster) -> None:
    """The socket directory holds the runtime's rootfs mounts. The plugin's pod (replaced here,
    to start after a container; its successor adopts every placement unmoved) gets those of its
    start, and a container's goes when the runtime removes it: the kernel detaches a mount
    whose directory is removed in every namespace. A container started later never enters
    (propagation None)."""
    node.apply(workload("short"))
    short = node.container_id(node.wait_pod_ready(PODS, "short"))
    before = placements(node)
    old = the_plugin(node)
    node.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--wait=true")
    harness.wait_for("the successor", lambda: len(plugin_pods(node)) == 1, 60)
    plugin = the_plugin(node)
    assert plugin["metadata"]["name"] != old["metadata"]["name"]
    assert placements(node) == before
    node.apply(workload("later"))
    later = node.container_id(node.wait_pod_ready(PODS, "later"))
    seen = mounts_of(node, plugin)
    assert [m for m in seen if short in m], "mounts of the pod's start are copied"
    assert not [m for m in seen if later in m], "later mounts stay out"
    node.kubectl("delete", "pod", "-n", PODS, "short", "later", "--wait=true")
    harness.wait_for(
        "the rootfs gone from the plugin's pod",
        lambda: not [m for m in mounts_of(node, plugin) if short in m], 30,
    )  # fmt: skip


def warnings(node: cluster.Cluster) -> list[str]:
    """Warning events of the workload pods (a start that failed, a probe, a kill)."""
    events = node.get("events", "-n", PODS, "--field-selector", "type=Warning")["items"]
    return [
        f"{e['involvedObject']['name']}: {e['reason']} {e['message']}"
        for e in events
        if e["involvedObject"]["kind"] == "Pod"
    ]


def test_surge_upgrade_moves_nothing_and_fails_no_start(node: cluster.Cluster, helm_config) -> None:
    """A harmless change (the log level) rolled out by the DaemonSet controller: the new pod
    starts beside the old one and takes over; a pod started meanwhile runs, nothing moves."""
    before = placements(node)
    (old,) = plugin_pods(node)
    done: list[BaseException | None] = []

    def upgrade() -> None:
        try:
            helm_config.upgrade(
                helm.Chart.load(CHART), RELEASE, values(node, logLevel="debug"),
                namespace=NAMESPACE, wait="watcher", timeout=180,
            )  # fmt: skip
            done.append(None)
        except BaseException as exc:
            done.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=upgrade)
    thread.start()
    harness.wait_for("the surge pod", lambda: len(plugin_pods(node)) == 2, 60)
    node.apply(workload("during"))
    thread.join(240)
    assert done == [None], done
    print(f"surge upgrade rolled out in {time.monotonic() - started:.1f}s")
    harness.wait_for("the old plugin pod gone", lambda: len(plugin_pods(node)) == 1, 60)
    new = the_plugin(node)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert "--log-level=debug" in new["spec"]["containers"][0]["args"]
    during = node.wait_pod_ready(PODS, "during")
    assert during["status"]["containerStatuses"][0]["restartCount"] == 0
    (exclusive,) = before["guaranteed"]
    assert exclusive not in cpus(node, during)
    after = placements(node)
    assert {k: after[k] for k in before} == before
    assert warnings(node) == []


def metric(pod: dict, name: str, **labels: str) -> float:
    return harness.metric_sample(plugin_http(pod, "/metrics")[1], name, **labels)


def test_configuration_change_is_applied_live(node: cluster.Cluster, helm_config) -> None:
    """`helm upgrade` of the configuration only: the ConfigMap changes, the pod stays, the
    plugin reloads it (the kubelet refreshes the mounted file within its sync period) and the
    published topology follows; nothing moves."""
    before = placements(node)
    pod = the_plugin(node)
    applied = metric(pod, "nri_topology_config_reloads_total", result="applied")
    published = nrt(node)
    config = values(node, logLevel="debug")
    config["config"]["policy"] = {"reserved_resources": {"cpu": "500m"}}
    helm_config.upgrade(
        helm.Chart.load(CHART), RELEASE, config, namespace=NAMESPACE, wait="watcher", timeout=180
    )
    harness.wait_for(
        "the configuration reloaded",
        lambda: metric(pod, "nri_topology_config_reloads_total", result="applied") > applied,
        90,
    )
    assert [p["metadata"]["name"] for p in plugin_pods(node)] == [pod["metadata"]["name"]]
    assert metric(pod, "nri_topology_config_reloads_total", result="rejected") == 0
    harness.wait_for(
        "the topology republished", lambda: nrt(node)["zones"] != published["zones"], 30
    )
    assert placements(node) == before


def test_uninstall_leaves_no_topology_and_moves_nothing(node: cluster.Cluster, helm_config) -> None:
    """The pre-delete hook stops the plugins and deletes their NodeResourceTopology; the pods
    stay where they are; the host keeps the state file (docs/operations.md, "Uninstall")."""
    before = placements(node)
    assert nrt(node) is not None
    started = time.monotonic()
    helm_config.uninstall(RELEASE, wait="watcher", timeout=180)
    print(f"helm uninstall took {time.monotonic() - started:.1f}s")
    assert nrt(node) is None
    assert node.pods(NAMESPACE) == []
    assert (
        node.get("jobs,serviceaccounts,daemonsets", "-n", NAMESPACE, "-l", SELECTOR)["items"] == []
    )
    assert (node.run.dir / "plugin-state" / "state.json").is_file()
    assert placements(node) == before
