"""Packaging: manifests valid against the Kubernetes schemas, the chart rendered by real Helm (v4,
as a library: the helm-python-sdk test extra) and checked, its values schema generated from the
configuration models, and the install files consistent with each other and the NRI launch rules.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shlex
import shutil
import stat
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nri_topology.cli import build_parser
from nri_topology.config.load import config_from, parse_config
from nri_topology.config.schema import DEFAULT_METRICS_PORT, Config
from nri_topology.configured import policy_options

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
HELM = PACKAGING / "helm"
CHART = HELM / "nri-topology"
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


# --- the chart, rendered by Helm itself ---------------------------------------------------------

try:  # Helm v4 as a library (test extra helm-python-sdk); the chart tests need it
    import helm_python as helm
except ImportError:  # pragma: no cover - a platform without its wheel
    helm = None

needs_helm = pytest.mark.skipif(helm is None, reason="helm-python-sdk (Helm v4) not installed")


def _nested(overrides: dict[str, Any]) -> dict[str, Any]:
    """{"metrics.port": 1} -> {"metrics": {"port": 1}}, as `helm --set` spells values."""
    values: dict[str, Any] = {}
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return values


def render_chart(overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's manifests as `helm template nri-topology -n kube-system` renders them."""
    if helm is None:
        pytest.skip("helm-python-sdk (Helm v4) not installed")
    chart = helm.Chart.load(CHART)
    rendered = chart.render(
        _nested(overrides or {}), name="nri-topology", namespace="kube-system", is_install=True
    )
    docs: list[dict[str, Any]] = []
    for name in sorted(rendered):
        docs += [d for d in yaml.safe_load_all(rendered[name]) if d]
    return docs


@needs_helm
def test_helm_lint_is_clean() -> None:
    assert helm is not None
    report = helm.lint(CHART, strict=True)
    assert report["errors"] == []
    # severity 2 = warning, 3 = error; info ("icon is recommended") is allowed
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_committed_values_schema_is_the_generated_one() -> None:
    spec = importlib.util.spec_from_file_location("values_schema", HELM / "values_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (CHART / "values.schema.json").read_text()
    assert committed == module.render(), "run: python packaging/helm/values_schema.py"


@needs_helm
@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"metrics": {"port": "abc"}}, "/metrics/port"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"logLevel": "verbose"}, "/logLevel"),
        ({"logFormat": "text"}, "/logFormat"),
        ({"stateDir": "relative/dir"}, "/stateDir"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"metric": {"port": 1}}, "metric"),
        ({"config": {"policy": {"pin_cpus": True}}}, "pin_cpus"),
        ({"config": {"polcy": {}}}, "polcy"),
        ({"config": {"policy": {"distribute_min_group": 0}}}, "distribute_min_group"),
        ({"config": {"logging": {"level": "loud"}}}, "/config/logging/level"),
        ({"config": {"policy": {"default_memory_tiers": ["ssd"]}}}, "default_memory_tiers"),
        ({"config": {"nri": {"plugin_index": 100}}}, "/config/nri/plugin_index"),
    ],
)
def test_helm_refuses_bad_values(values: dict[str, Any], complaint: str) -> None:
    assert helm is not None
    chart = helm.Chart.load(CHART)
    with pytest.raises(helm.HelmValuesError, match=re.escape(complaint)):
        chart.render(values, name="nri-topology", namespace="kube-system")


# --- Kubernetes manifests ----------------------------------------------------------------------


def _static_docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((PACKAGING / "kubernetes" / "daemonset.yaml").read_text()))


def _hook(doc: dict[str, Any]) -> str:
    """The Helm hook the object belongs to ("" for the release's own objects)."""
    return (doc["metadata"].get("annotations") or {}).get("helm.sh/hook", "")


def _by_kind(docs: list[dict[str, Any]], hook: str = "") -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs if _hook(d) == hook}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    "source",
    [
        "daemonset.yaml",
        "noderesourcetopology-crd.yaml",
        "chart defaults",
        "chart with metrics service",
    ],
)
def test_manifests_validate_against_kubernetes_schemas(source: str, version: str) -> None:
    docs = {
        "daemonset.yaml": _static_docs,
        "noderesourcetopology-crd.yaml": lambda: list(
            yaml.safe_load_all((PACKAGING / "kubernetes" / source).read_text())
        ),
        "chart defaults": render_chart,
        "chart with metrics service": lambda: render_chart({"metrics.service": True}),
    }[source]()
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_validation_catches_a_misspelt_field() -> None:
    daemonset = _by_kind(_static_docs())["DaemonSet"]
    daemonset["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, K8S_VERSIONS[0], strict=True)


def test_chart_service_is_optional() -> None:
    assert "Service" not in _by_kind(render_chart())
    service = _by_kind(render_chart({"metrics.service": True}))["Service"]
    assert service["spec"]["ports"][0]["port"] == DEFAULT_METRICS_PORT


def test_the_old_port_is_named_only_as_nri_plugins_one() -> None:
    """8891 was the default until it turned out to be nri-plugins' metrics port too."""
    old = "88" + "91"
    places = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder in ("nri_topology", "packaging", "systemd", "config", "docs", "benchmarks", ".ci"):
        places += [p for p in (ROOT / folder).rglob("*") if p.is_file()]
    stale = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in places
        if p.suffix not in (".pyc", ".so", ".json") and "__pycache__" not in p.parts
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if old in line and "nri-plugins" not in line and p.name != "CHANGELOG.md"
    ]
    assert stale == [], f"port {old} still named as ours"


def test_every_install_names_the_default_metrics_port() -> None:
    for docs in (_static_docs(), render_chart()):
        container = _pod(docs)["containers"][0]
        assert container["ports"][0]["containerPort"] == DEFAULT_METRICS_PORT
        assert f"--metrics-port={DEFAULT_METRICS_PORT}" in container["args"]
    assert f"EXPOSE {DEFAULT_METRICS_PORT}" in (PACKAGING / "Containerfile").read_text()
    env = (ROOT / "systemd" / "nri-topology.env").read_text()
    assert f"--metrics-port {DEFAULT_METRICS_PORT}" in env
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert config["metrics"]["port"] == DEFAULT_METRICS_PORT


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return _by_kind(docs)["DaemonSet"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("docs", [_static_docs, render_chart], ids=["daemonset", "chart"])
def test_daemonset_mounts_socket_sysfs_state_and_config(docs: Callable[[], list]) -> None:
    pod = _pod(docs())
    container = pod["containers"][0]
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert host["nri-socket"] == "/var/run/nri" and host["sysfs"] == "/sys"
    assert host["state"] == "/var/lib/nri-topology"
    assert mounts["sysfs"]["readOnly"] and mounts["config"]["readOnly"]
    # the PodResources socket's directory where the config's default socket path expects it
    assert _host_file(pod, Config().hints.pod_resources.socket)
    args = container["args"]
    assert "--socket=/var/run/nri/nri.sock" in args
    # re-pins go through the runtime's CRI: its socket's directory, writable
    assert host["cri-socket"] == mounts["cri-socket"]["mountPath"] == "/run/containerd"
    assert not mounts["cri-socket"].get("readOnly")
    assert "--cri-socket=/run/containerd/containerd.sock" in args
    assert f"--sysfs={mounts['sysfs']['mountPath']}" in args
    assert f"--state={mounts['state']['mountPath']}/state.json" in args
    assert f"--config={mounts['config']['mountPath']}/config.yaml" in args
    assert {"operator": "Exists"} in pod["tolerations"]
    assert container["resources"]["limits"]["memory"]
    assert container["ports"][0]["name"] == "metrics"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def _host_file(pod: dict[str, Any], path: str) -> bool:
    """Whether `path` in the container is the host's `path`, read-only: under a read-only mount
    of a host path at the same place (a directory mount for files the kubelet replaces)."""
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    for m in pod["containers"][0]["volumeMounts"]:
        where = m["mountPath"].rstrip("/")
        if (path == where or path.startswith(where + "/")) and host.get(m["name"]) == where:
            return bool(m.get("readOnly"))
    return False


def _pod_config(docs: list[dict[str, Any]]) -> Config:
    """The configuration the pod runs with: its ConfigMap's config.yaml."""
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return parse_config(config_map["data"]["config.yaml"], "config.yaml")


@pytest.mark.parametrize("docs", [_static_docs, render_chart], ids=["daemonset", "chart"])
def test_the_kubelets_files_are_mounted_where_the_config_reads_them(
    docs: Callable[[], list],
) -> None:
    rendered = docs()
    pod, kubelet = _pod(rendered), _pod_config(rendered).kubelet
    assert kubelet.config, "the kubelet's configuration is read where kubeadm writes it"
    for path in (kubelet.cpu_manager_state, kubelet.memory_manager_state, kubelet.config):
        assert _host_file(pod, path), path
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "kubelet"]
    assert mount["mountPropagation"] == "HostToContainer"  # the kubelet's unmounts reach the pod


@needs_helm
def test_chart_mounts_a_kubelet_configuration_given_elsewhere() -> None:
    path = "/etc/kubernetes/kubelet-config.yaml"
    rendered = render_chart({"config.kubelet.config": path})
    assert _pod_config(rendered).kubelet.config == path
    assert _host_file(_pod(rendered), path)
    (volume,) = [v for v in _pod(rendered)["volumes"] if v["name"] == "kubelet-config"]
    assert volume["hostPath"] == {"path": path, "type": "File"}


@needs_helm
def test_chart_reads_the_kubelets_files_in_another_kubelet_directory() -> None:
    """k0s, MicroK8s and a kubelet started with its own --root-dir keep its files elsewhere."""
    kubelet_dir = "/var/lib/k0s/kubelet"
    rendered = render_chart({"kubeletDir": kubelet_dir, "config.kubelet.config": None})
    pod, config = _pod(rendered), _pod_config(rendered)
    for path in (config.kubelet.cpu_manager_state, config.kubelet.memory_manager_state,
                 config.hints.pod_resources.socket):  # fmt: skip
        assert path.startswith(kubelet_dir + "/") and _host_file(pod, path), path
    assert not [v for v in pod["volumes"] if v["name"] == "kubelet-config"]
    # what the configuration names is kept
    named = render_chart({"kubeletDir": kubelet_dir, "config.kubelet.cpu_manager_state": ""})
    assert _pod_config(named).kubelet.cpu_manager_state == ""


@pytest.mark.parametrize("docs", [_static_docs, render_chart], ids=["daemonset", "chart"])
def test_updates_start_the_new_pod_before_the_old_one_goes(docs: Callable[[], list]) -> None:
    daemonset = _by_kind(docs())["DaemonSet"]
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # the standby waits for the old pod's graceful stop, and longer
    grace = daemonset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert Config().state.lock_wait_seconds > grace


@pytest.mark.parametrize("docs", [_static_docs, render_chart], ids=["daemonset", "chart"])
def test_the_plugins_own_pod_starts_where_the_runtime_requires_it(docs: Callable[[], list]) -> None:
    template = _by_kind(docs())["DaemonSet"]["spec"]["template"]
    assert template["metadata"]["annotations"]["tolerate-missing-plugins.nri.io"] == "true"
    for snippet in ("containerd-2.toml", "crio.conf"):
        text = (PACKAGING / "runtime" / snippet).read_text()
        assert '"tolerate-missing-plugins.nri.io"' in text and '["nri-topology"]' in text


def test_chart_and_static_manifest_agree() -> None:
    static, chart = _pod(_static_docs()), _pod(render_chart())
    assert chart["volumes"] == static["volumes"]  # release "nri-topology" names alike
    static_args = static["containers"][0]["args"]
    chart_args = chart["containers"][0]["args"]
    assert set(static_args) <= set(chart_args)


# Where runtimes keep their sockets: (NRI directory, NRI socket, CRI directory, CRI socket). The
# node suite applies each render to a real apiserver (tests/node).
SOCKET_LAYOUTS = {
    "containerd": ("/var/run/nri", "nri.sock", "/run/containerd", "containerd.sock"),
    "cri-o": ("/var/run/nri", "nri.sock", "/var/run/crio", "crio.sock"),
    "k3s": ("/var/run/nri", "nri.sock", "/run/k3s/containerd", "containerd.sock"),
    # Both in one directory, spelt with a trailing slash once: one mount all the same.
    "one directory": ("/run/k3s/containerd", "nri.sock", "/run/k3s/containerd/", "containerd.sock"),
}


def socket_layout_values(layout: str) -> dict[str, Any]:
    nri_dir, nri_sock, cri_dir, cri_sock = SOCKET_LAYOUTS[layout]
    return {
        "nri": {"socketDir": nri_dir, "socketName": nri_sock},
        "cri": {"socketDir": cri_dir, "socketName": cri_sock},
    }


@needs_helm
@pytest.mark.parametrize("layout", SOCKET_LAYOUTS)
def test_chart_mounts_each_socket_layout_once(layout: str) -> None:
    """Duplicate mountPaths pass the schemas but the API server refuses the DaemonSet."""
    assert helm is not None
    chart = helm.Chart.load(CHART)
    rendered = chart.render(
        socket_layout_values(layout), name="nri-topology", namespace="kube-system"
    )
    docs = [d for name in sorted(rendered) for d in yaml.safe_load_all(rendered[name]) if d]
    pod = _pod(docs)
    container = pod["containers"][0]
    paths = [m["mountPath"].rstrip("/") for m in container["volumeMounts"]]
    assert len(paths) == len(set(paths)), paths
    host = {v["name"]: v.get("hostPath", {}).get("path", "").rstrip("/") for v in pod["volumes"]}
    assert len(pod["volumes"]) == len({v["name"] for v in pod["volumes"]})
    for flag in ("--socket=", "--cri-socket="):
        (arg,) = [a for a in container["args"] if a.startswith(flag)]
        socket_dir = os.path.dirname(os.path.normpath(arg.removeprefix(flag)))
        mounts = container["volumeMounts"]
        (mount,) = [m for m in mounts if m["mountPath"].rstrip("/") == socket_dir]
        assert host[mount["name"]] == socket_dir
        # chosen: the runtime's later mounts stay out (the template says why)
        assert mount["mountPropagation"] == "None"
        assert not mount.get("readOnly")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[0], strict=True)


def test_chart_values_flow_into_the_pod() -> None:
    pod = _pod(render_chart({"metrics.port": 9999, "stateDir": "/srv/nri", "logLevel": "debug"}))
    container = pod["containers"][0]
    assert "--metrics-port=9999" in container["args"]
    assert "--state=/srv/nri/state.json" in container["args"]
    assert "--log-level=debug" in container["args"]
    assert container["ports"][0]["containerPort"] == 9999


# --- host install files ------------------------------------------------------------------------


def test_nri_launcher_follows_the_launch_rules() -> None:
    launchers = [p for p in (PACKAGING / "nri").iterdir() if not p.suffix]
    assert len(launchers) == 1
    launcher = launchers[0]
    assert re.fullmatch(r"[0-9]{2}-[a-zA-Z0-9_.+-]+", launcher.name)
    assert launcher.stat().st_mode & stat.S_IXUSR
    assert (PACKAGING / "nri" / f"{launcher.name}.conf").is_file()
    lines = launcher.read_text().splitlines()
    assert lines[0] == "#!/bin/sh"  # absolute: the runtime starts it without PATH
    command = shlex.split(" ".join(line.rstrip("\\") for line in lines if not line.startswith("#")))
    assert command[0] == "exec" and os.path.isabs(command[1])
    assert command[2:5] == ["-m", "nri_topology.cli", "run"]
    assert "--socket" not in command  # the socket is fd 3 from NRI_PLUGIN_SOCKET


def test_logrotate_rotates_the_launchers_log_without_reopening() -> None:
    launcher = (PACKAGING / "nri" / "90-nri-topology").read_text()
    log_file = shlex.split(launcher.split("--log-file", 1)[1])[0]
    rules = (PACKAGING / "nri" / "nri-topology.logrotate").read_text()
    assert f"{log_file} {{" in rules
    assert "copytruncate" in rules.split()  # the plugin never reopens its log


def test_systemd_unit_and_environment_file() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(ROOT / "systemd" / "nri-topology.service")
    service = unit["Service"]
    exec_start = shlex.split(service["ExecStart"])
    assert os.path.isabs(exec_start[0]) and exec_start[1] == "run"
    assert service["EnvironmentFile"].lstrip("-") == "/etc/default/nri-topology"
    assert service["StateDirectory"] == "nri-topology"  # /var/lib/nri-topology, the default state
    assert service["KillSignal"] == "SIGTERM" and "HUP" in service["ExecReload"]
    env = (ROOT / "systemd" / "nri-topology.env").read_text()
    assigned = dict(
        line.split("=", 1) for line in env.splitlines() if line and not line.startswith("#")
    )
    assert set(assigned) == {"NRI_TOPOLOGY_ARGS"}
    assert shlex.split(shlex.split(assigned["NRI_TOPOLOGY_ARGS"])[0])[0] == "--config"


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file: section -> key -> every value given (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


UNIT = ROOT / "systemd" / "nri-topology.service"
HARDENING = {
    "CapabilityBoundingSet": "",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "SystemCallArchitectures": "native",
    "UMask": "0077",
    "IPAddressDeny": "any",
    "IPAddressAllow": "localhost",
}


@pytest.mark.parametrize(("key", "value"), HARDENING.items(), ids=list(HARDENING))
def test_systemd_unit_hardening(key: str, value: str) -> None:
    assert _unit(UNIT)["Service"].get(key) == [value]


def test_systemd_unit_limits_and_what_the_plugin_needs() -> None:
    service = _unit(UNIT)["Service"]
    filters = service["SystemCallFilter"]
    assert "@system-service" in filters
    assert any(f.startswith("~") and "@privileged" in f for f in filters)
    assert int(service["TasksMax"][0]) >= 40  # the event loop and the checkpoint thread pool
    assert service["MemoryMax"][0].endswith(("M", "G"))
    # what the plugin needs stays: the state directory, the NRI socket, sysfs and /proc/cmdline
    # to read, the loopback metrics endpoint
    assert service["StateDirectory"] == ["nri-topology"]
    assert "/run/nri" in service["ReadWritePaths"][0]
    # the cgroup tree, where re-pins are written first (updates.cgroup_first)
    assert "-/sys/fs/cgroup" in service["ReadWritePaths"][0].split()
    assert "ProtectControlGroups" not in service
    assert set(service["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    for absent in ("ProcSubset", "PrivateNetwork", "InaccessiblePaths", "User", "DynamicUser"):
        assert absent not in service


def test_systemd_unit_exposure_is_low(tmp_path: Path) -> None:
    """`systemd-analyze security` rates the unit; "OK" is up to 4.9, the unit aims below 2."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text())
    run = subprocess.run(
        [tool, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", run.stdout)
    if found is None:
        pytest.skip(f"this systemd-analyze cannot rate a unit offline: {run.stderr.strip()[:200]}")
    assert float(found.group(1)) <= 2.0, run.stdout


@pytest.mark.parametrize(
    ("name", "section", "keys"),
    [
        ("containerd-2.toml", ("plugins", "io.containerd.nri.v1.nri"), {"disable": False}),
        ("containerd-1.7.toml", ("plugins", "io.containerd.nri.v1.nri"), {"disable": False}),
        ("crio.conf", ("crio", "nri"), {"enable_nri": True}),
    ],
)
def test_runtime_snippets_enable_nri_with_the_default_paths(
    name: str, section: tuple[str, str], keys: dict[str, Any]
) -> None:
    table = tomllib.loads((PACKAGING / "runtime" / name).read_text())
    for part in section:
        table = table[part]
    assert keys.items() <= table.items()
    paths = set(table.values())
    assert {"/var/run/nri/nri.sock", "/opt/nri/plugins", "/etc/nri/conf.d"} <= paths


def test_containerfile_copies_existing_sources_and_runs_the_venv_entrypoint() -> None:
    text = (PACKAGING / "Containerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    assert 'ENTRYPOINT ["/opt/nri-topology/venv/bin/nri-topology"]' in text
    assert (
        "/opt/nri-topology/venv/bin/python" in (PACKAGING / "nri" / "90-nri-topology").read_text()
    )


def _run_args(argv: list[str]) -> Any:
    return build_parser(only="run").parse_args(argv)


@pytest.mark.parametrize("docs", [_static_docs, render_chart], ids=["daemonset", "chart"])
def test_manifest_arguments_are_accepted_by_run(docs: Callable[[], list]) -> None:
    args = _run_args(_pod(docs())["containers"][0]["args"])
    assert args.command == "run" and args.metrics_host == "0.0.0.0"


def test_host_install_arguments_are_accepted_by_run() -> None:
    env = (ROOT / "systemd" / "nri-topology.env").read_text()
    line = next(x for x in env.splitlines() if x.startswith("NRI_TOPOLOGY_ARGS="))
    assert _run_args(["run", *shlex.split(shlex.split(line.split("=", 1)[1])[0])]).config
    launcher = (PACKAGING / "nri" / "90-nri-topology").read_text().splitlines()
    words = shlex.split(" ".join(x.rstrip("\\") for x in launcher if not x.startswith("#")))
    assert _run_args(words[4:]).log_file == Path("/var/log/nri-topology.log")


def test_shipped_configurations_are_valid() -> None:
    configs = {
        "daemonset": _by_kind(_static_docs())["ConfigMap"]["data"]["config.yaml"],
        "chart": _by_kind(render_chart())["ConfigMap"]["data"]["config.yaml"],
        "nri drop-in": (PACKAGING / "nri" / "90-nri-topology.conf").read_text(),
    }
    # the defaults, and in a cluster the kubelet's configuration where kubeadm writes it
    kubeadm = config_from({"kubelet": {"config": "/var/lib/kubelet/config.yaml"}})
    for source, text in configs.items():
        assert parse_config(text, source) == (Config() if source == "nri drop-in" else kubeadm)
    chart = render_chart({"config": {"policy": {"reserved_resources": {"cpu": "2"}}}})
    text = _by_kind(chart)["ConfigMap"]["data"]["config.yaml"]
    assert policy_options(parse_config(text, "chart")).reserved_resources.milli == 2000
    assert parse_config(text, "chart").kubelet == kubeadm.kubelet


def test_chart_ships_the_same_crd_as_the_manifests() -> None:
    static = yaml.safe_load(
        (PACKAGING / "kubernetes" / "noderesourcetopology-crd.yaml").read_text()
    )
    chart = yaml.safe_load((CHART / "crds" / "noderesourcetopology.yaml").read_text())
    assert chart == static


@pytest.mark.parametrize("docs", [_static_docs, render_chart], ids=["daemonset", "chart"])
def test_the_pod_may_publish_node_resource_topology(docs: Callable[[], list]) -> None:
    kinds = _by_kind(docs())
    pod = _pod(docs())
    account = kinds["ServiceAccount"]["metadata"]
    assert pod["serviceAccountName"] == account["name"] and pod["automountServiceAccountToken"]
    binding = kinds["ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    assert binding["roleRef"]["name"] == kinds["ClusterRole"]["metadata"]["name"]
    rules = {
        (g, r): set(rule["verbs"])
        for rule in kinds["ClusterRole"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert rules[("", "nodes")] == {"get"}  # the owner's uid
    assert {"create", "patch"} <= rules[("topology.node.k8s.io", "noderesourcetopologies")]
    (env,) = pod["containers"][0]["env"]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


@needs_helm
def test_uninstall_hook_stops_the_plugins_then_removes_their_objects() -> None:
    """The pre-delete hook runs the image's `uninstall` for this release's DaemonSet, with its
    own account: allowed that DaemonSet and the NodeResourceTopology objects, nothing more."""
    docs = render_chart()
    hook = _by_kind(docs, "pre-delete")
    assert set(hook) == {
        "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Job"
    }  # fmt: skip
    weights = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in hook.items()}
    assert all(weights[k] < weights["Job"] for k in weights if k != "Job")  # account first
    pod = hook["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == hook["ServiceAccount"]["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["image"] == _pod(docs)["containers"][0]["image"]
    assert container["args"][:2] == ["uninstall", "--daemonset=kube-system/nri-topology"]
    assert build_parser().parse_args(container["args"]).timeout > 60
    (ds_rule, pod_rule) = hook["Role"]["rules"]
    assert ds_rule["resourceNames"] == [_by_kind(docs)["DaemonSet"]["metadata"]["name"]]
    assert set(ds_rule["verbs"]) == {"get", "delete"} and pod_rule["verbs"] == ["list"]
    (nrt_rule,) = hook["ClusterRole"]["rules"]
    assert set(nrt_rule["verbs"]) == {"list", "delete"}
    template = hook["Job"]["spec"]["template"]["metadata"]
    assert template["annotations"]["tolerate-missing-plugins.nri.io"] == "true"
