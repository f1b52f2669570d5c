"""Packaging: manifests valid against the Kubernetes schemas, the chart rendered and checked, and
the install files consistent with each other and with the NRI launch rules.

helm is not available in CI, so the chart is rendered by `render` below: it implements only the
Go-template subset the chart uses (value lookups, `quote`, `toYaml`, `nindent`, `if`/`else`/`end`,
`{{-`/`-}}` trimming) and fails on anything else, so the chart cannot drift beyond what is tested.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nri_topology.cli import build_parser
from nri_topology.config.load import parse_config
from nri_topology.config.schema import Config

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
CHART = PACKAGING / "helm" / "nri-topology"
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

_TAG = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.DOTALL)


# --- a minimal Go-template renderer ------------------------------------------------------------


def _lookup(context: dict[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.strip(".").split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"template refers to missing value {path}")
        value = value[part]
    return value


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _call(context: dict[str, Any], command: str, piped: tuple[Any, ...]) -> Any:
    words = command.split()
    name, args = words[0], [_operand(context, w) for w in words[1:]]
    functions: dict[str, Callable[..., Any]] = {
        "quote": lambda v: '"' + _scalar(v).replace('"', '\\"') + '"',
        "toYaml": _to_yaml,
        "nindent": lambda n, v: "\n" + "\n".join(" " * n + line for line in v.split("\n")),
    }
    if name.startswith(".") or name.startswith('"'):
        if args or piped:
            raise ValueError(f"unsupported template command {command!r}")
        return _operand(context, name)
    if name not in functions:
        raise ValueError(f"template function {name!r} is not supported by the test renderer")
    return functions[name](*args, *piped)


def _operand(context: dict[str, Any], word: str) -> Any:
    if word.startswith("."):
        return _lookup(context, word)
    if word.startswith('"'):
        return word.strip('"')
    if word.isdigit():
        return int(word)
    raise ValueError(f"unsupported template operand {word!r}")


def _evaluate(context: dict[str, Any], pipeline: str) -> Any:
    value: tuple[Any, ...] = ()
    for command in pipeline.split("|"):
        value = (_call(context, command.strip(), value),)
    return value[0]


def render(template: str, context: dict[str, Any]) -> str:
    """Render `template` with Go-template semantics for the subset described above."""
    pieces: list[str | tuple[str, str]] = []
    pos = 0
    for match in _TAG.finditer(template):
        text = template[pos : match.start()]
        if match.group(1):
            text = text.rstrip()
        pieces.append(text)
        pieces.append(("tag", match.group(2)))
        pos = match.end()
        if match.group(3):
            rest = template[pos:]
            pos += len(rest) - len(rest.lstrip())
    pieces.append(template[pos:])

    out: list[str] = []
    emitting = [True]  # one entry per open `if`: whether its current branch is rendered
    for piece in pieces:
        if isinstance(piece, str):
            if all(emitting):
                out.append(piece)
            continue
        action = piece[1]
        if action.startswith("if "):
            emitting.append(bool(_evaluate(context, action[3:])) if all(emitting) else False)
        elif action == "else":
            parent = all(emitting[:-1])
            emitting[-1] = parent and not emitting[-1]
        elif action == "end":
            if len(emitting) == 1:
                raise ValueError("unbalanced {{ end }}")
            emitting.pop()
        elif all(emitting):
            out.append(_scalar(_evaluate(context, action)))
    if len(emitting) != 1:
        raise ValueError("unterminated {{ if }}")
    return "".join(out)


def render_chart(overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in (overrides or {}).items():
        *parents, leaf = dotted.split(".")
        node = values
        for p in parents:
            node = node[p]
        node[leaf] = value
    context = {
        "Values": values,
        "Release": {"Name": "nri-topology", "Namespace": "kube-system"},
        "Chart": {"Name": chart["name"], "AppVersion": chart["appVersion"]},
    }
    docs: list[dict[str, Any]] = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(render(template.read_text(), context)) if d]
    return docs


@pytest.mark.parametrize(
    ("template", "want"),
    [
        ("a: {{ .Values.x }}", "a: 1"),
        ("a: {{ .Values.s | quote }}", 'a: "hi"'),
        ("a:\n  {{- toYaml .Values.l | nindent 2 }}", "a:\n  - 1\n  - 2"),
        ("{{- if .Values.f }}yes{{- else }}no{{- end }}", "no"),
        ("{{- if .Values.x }}{{ if .Values.f }}A{{ else }}B{{ end }}{{ end }}", "B"),
        ("x  {{- .Values.x -}}  y", "x1y"),
    ],
)
def test_renderer_follows_go_template_rules(template: str, want: str) -> None:
    context = {"Values": {"x": 1, "s": "hi", "l": [1, 2], "f": False}}
    assert render(template, context) == want


@pytest.mark.parametrize(
    "template",
    ["{{ .Values.missing }}", "{{ include .Values.x }}", "{{ if .Values.x }}", "{{ end }}"],
)
def test_renderer_refuses_what_it_does_not_know(template: str) -> None:
    with pytest.raises((KeyError, ValueError)):
        render(template, {"Values": {"x": 1}})


# --- Kubernetes manifests ----------------------------------------------------------------------


def _static_docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((PACKAGING / "kubernetes" / "daemonset.yaml").read_text()))


def _by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


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
    assert service["spec"]["ports"][0]["port"] == 8891


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
    default_socket = Config().hints.pod_resources.socket
    assert host["pod-resources"] == mounts["pod-resources"]["mountPath"]
    assert default_socket == f"{mounts['pod-resources']['mountPath']}/kubelet.sock"
    args = container["args"]
    assert "--socket=/var/run/nri/nri.sock" in args
    assert f"--sysfs={mounts['sysfs']['mountPath']}" in args
    assert f"--state={mounts['state']['mountPath']}/state.json" in args
    assert f"--config={mounts['config']['mountPath']}/config.yaml" in args
    assert {"operator": "Exists"} in pod["tolerations"]
    assert container["resources"]["limits"]["memory"]
    assert container["ports"][0]["name"] == "metrics"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_chart_and_static_manifest_agree() -> None:
    static, chart = _pod(_static_docs()), _pod(render_chart())
    assert chart["volumes"] == static["volumes"]  # release "nri-topology" names alike
    static_args = static["containers"][0]["args"]
    chart_args = chart["containers"][0]["args"]
    assert set(static_args) <= set(chart_args)


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
    for source, text in configs.items():
        assert parse_config(text, source) == Config()
    chart = render_chart({"config": {"policy": {"reserved_resources": {"cpu": "2"}}}})
    text = _by_kind(chart)["ConfigMap"]["data"]["config.yaml"]
    assert parse_config(text, "chart").to_options().reserved_resources.milli == 2000


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
