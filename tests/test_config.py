"""The configuration file: shipped files, defaults, options mapping and messages naming the key."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec
import pytest
import yaml

from nri_topology.commands import validate_config
from nri_topology.config import load
from nri_topology.config.load import ConfigError, load_config, parse_config, read_config
from nri_topology.config.schema import Config
from nri_topology.config.validate import as_document, keys
from nri_topology.configured import parse_cpu_amount, policy_options, tier_overrides
from nri_topology.policy.options import AnnotationLimits, CpuAmount, Options, Trust
from nri_topology.topology.model import MemoryTier

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted([REPO / "config" / "config.yaml", *(REPO / "config" / "examples").glob("*.yaml")])


def test_there_are_examples():
    assert len(SHIPPED) >= 4


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_files_load(path):
    config = load_config(path)
    assert isinstance(policy_options(config), Options)


def test_shipped_default_spells_out_the_built_in_defaults():
    assert load_config(REPO / "config" / "config.yaml") == Config()
    assert policy_options(Config()) == Options()


@pytest.mark.parametrize("text", ["", "\n# only comments\n", "---\n"])
def test_empty_text_is_the_defaults(text):
    assert parse_config(text, "x.yaml") == Config()


def test_empty_file_gives_defaults_with_a_note(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("  \n")
    config, notes = read_config(path)
    assert config == Config()
    assert notes == (f"{path}: empty, using the defaults",)


def test_missing_file(tmp_path, monkeypatch):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"nope.yaml: no such file"):
        load_config(missing)
    monkeypatch.setattr(load, "DEFAULT_PATH", missing)
    config, notes = read_config()
    assert config == Config()
    assert "no configuration file, using the defaults" in notes[0]
    assert read_config(missing).config == Config()  # the default path, even when named


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)  # a directory
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)


def test_full_mapping_to_options():
    text = """
policy:
  pin_cpu: false
  pin_memory: false
  prefer_isolated_cpus: false
  prefer_shared_cpus: true
  reserved_resources: {cpu: "cpuset:0-1"}
  available_resources: {cpu: "exclude-cpuset:63"}
  reserved_namespaces: [kube-system, "infra-*"]
  colocate_pods: true
  colocate_namespaces: true
  prefer_closest_numa: false
  distribute_across_numa: true
  distribute_min_group: 4
  full_pcpus_only: true
  default_memory_tiers: [DRAM, cxl]
  annotation_limits: {max_value_bytes: 4096, max_affinity_rules: 2, max_affinity_values: 3}
  trusted_namespaces: {preserve: [], isolated_cpus: [rt-*]}
topology: {memory_tiers: {2: PMEM, 3: hbm}, proc_root: null}
nri: {plugin_index: 7}
logging: {level: DEBUG}
"""
    config = parse_config(text, "x.yaml")
    assert policy_options(config) == Options(
        pin_cpu=False,
        pin_memory=False,
        prefer_isolated_cpus=False,
        prefer_shared_cpus=True,
        reserved_resources=CpuAmount(cpus=frozenset({0, 1})),
        available_resources=CpuAmount(exclude=frozenset({63})),
        reserved_namespaces=("kube-system", "infra-*"),
        colocate_pods=True,
        colocate_namespaces=True,
        prefer_closest_numa=False,
        distribute_across_numa=True,
        distribute_min_group=4,
        full_pcpus_only=True,
        default_memory_tiers=frozenset({MemoryTier.DRAM, MemoryTier.CXL}),
        annotation_limits=AnnotationLimits(
            max_value_bytes=4096, max_affinity_rules=2, max_affinity_values=3
        ),
        # reserved_cpus follows reserved_namespaces; an empty list trusts nobody
        trust=Trust(reserved_cpus=("kube-system", "infra-*"), preserve=(), isolated_cpus=("rt-*",)),
    )
    assert policy_options(parse_config("{}", "empty.yaml")).trust == Trust()
    assert tier_overrides(config) == {2: MemoryTier.PMEM, 3: MemoryTier.HBM}
    quoted = parse_config('topology: {memory_tiers: {"2": pmem}}', "helm.yaml")
    assert tier_overrides(quoted) == {2: MemoryTier.PMEM}
    assert config.topology.proc_root is None
    assert config.nri.plugin_index == "07"
    assert config.logging.level == "debug"


@pytest.mark.parametrize(
    ("value", "quantity", "expected"),
    [
        ("750m", True, CpuAmount(milli=750)),
        ("2", True, CpuAmount(milli=2000)),
        (2, True, CpuAmount(milli=2000)),
        (1.5, True, CpuAmount(milli=1500)),
        ("cpuset:0,2-3", True, CpuAmount(cpus=frozenset({0, 2, 3}))),
        ("exclude-cpuset:0", False, CpuAmount(exclude=frozenset({0}))),
    ],
)
def test_cpu_amounts(value, quantity, expected):
    assert parse_cpu_amount(value, quantity=quantity) == expected


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        (
            "policy:\n  pin_cpu: maybe\n",
            ['c.yaml: policy.pin_cpu: expected true or false, got "maybe"'],
        ),
        (
            "policy:\n  pin_cpuz: true\n",
            [
                "c.yaml: policy.pin_cpuz: unknown key; allowed: pin_cpu, pin_memory, "
                "prefer_isolated_cpus, prefer_shared_cpus, reserved_resources, "
                "available_resources, reserved_namespaces, colocate_pods, colocate_namespaces, "
                "prefer_closest_numa, distribute_across_numa, distribute_min_group, "
                "full_pcpus_only, topology_hints, strict_topology_hints, numa_policy, "
                "default_memory_tiers, on_unfit, strict_reserved_cpus, shared_placement, "
                "max_moves, annotation_limits, trusted_namespaces"
            ],
        ),
        (
            "polcy: {}\n",
            [
                "c.yaml: polcy: unknown key; allowed: policy, topology, nri, state, logging, "
                "metrics, expose, hints, nrt, verify, restarts, kubelet, updates"
            ],
        ),
        (
            "policy: {available_resources: {cpu: 2, memory: 1Gi}}\n",
            [
                "c.yaml: policy.available_resources.cpu: expected cpuset:<list> or "
                "exclude-cpuset:<list>, got 2",
                "c.yaml: policy.available_resources.memory: unknown key; allowed: cpu",
            ],
        ),
        (
            "policy: {reserved_resources: {cpu: 0}}\n",
            ["c.yaml: policy.reserved_resources.cpu: expected more than 0 CPUs, got 0"],
        ),
        (
            "policy: {reserved_resources: {cpu: lots}}\n",
            [
                "c.yaml: policy.reserved_resources.cpu: expected a CPU quantity (750m, 2) or "
                'cpuset:<list> or exclude-cpuset:<list>, got "lots"'
            ],
        ),
        (
            'policy: {reserved_resources: {cpu: "cpuset:3-1"}}\n',
            [
                "c.yaml: policy.reserved_resources.cpu: bad range '3-1' in list '3-1'; "
                "expected a CPU quantity (750m, 2) or cpuset:<list> or exclude-cpuset:<list>"
            ],
        ),
        (
            'policy: {reserved_resources: {cpu: "cpuset:"}}\n',
            [
                'c.yaml: policy.reserved_resources.cpu: empty CPU list in "cpuset:"; '
                "expected a CPU quantity (750m, 2) or cpuset:<list> or exclude-cpuset:<list>"
            ],
        ),
        (
            "policy: {default_memory_tiers: [dram, ssd]}\n",
            [
                "c.yaml: policy.default_memory_tiers[1]: expected one of 'dram', 'pmem', "
                "'hbm' or 'cxl', got \"ssd\""
            ],
        ),
        (
            "policy: {default_memory_tiers: []}\n",
            ["c.yaml: policy.default_memory_tiers: expected at least one item"],
        ),
        (
            "policy: {distribute_min_group: 0, reserved_namespaces: kube-system}\n",
            [
                'c.yaml: policy.reserved_namespaces: expected a list, got "kube-system"',
                "c.yaml: policy.distribute_min_group: expected at least 1, got 0",
            ],
        ),
        (
            "policy: {distribute_min_group: '2'}\n",
            ['c.yaml: policy.distribute_min_group: expected an integer, got "2"'],
        ),
        (
            "policy: 3\n",
            ["c.yaml: policy: expected a mapping of keys, got 3"],
        ),
        (
            "topology: {memory_tiers: {x: dram}}\n",
            [
                "c.yaml: topology.memory_tiers.x (the key): "
                'expected a NUMA node id (an integer), got "x"'
            ],
        ),
        (
            "nri: {plugin_index: 100, plugin_name: 'my plugin'}\n",
            [
                "c.yaml: nri.plugin_name: expected text matching ^[a-zA-Z0-9_.+-]+$, "
                'got "my plugin"',
                "c.yaml: nri.plugin_index: expected two digits 00-99, got 100",
            ],
        ),
        (
            "logging: {format: text}\n",
            ["c.yaml: logging.format: expected one of 'auto', 'json' or 'console', got \"text\""],
        ),
        (
            "metrics: {address: localhost, port: 70000}\n",
            [
                "c.yaml: metrics.address: expected an IP address such as 127.0.0.1 or ::1, "
                'got "localhost"',
                "c.yaml: metrics.port: expected at most 65535, got 70000",
            ],
        ),
        (
            "expose: {env_prefix: nri-}\n",
            ['c.yaml: expose.env_prefix: expected text matching ^[A-Z_][A-Z0-9_]*$, got "nri-"'],
        ),
        (
            "state: {path: ''}\n",
            ["c.yaml: state.path: expected a non-empty string"],
        ),
        (
            "- policy\n",
            [
                "c.yaml: expected a mapping with sections policy, topology, nri, state, logging, "
                "metrics, expose, hints, nrt, verify, restarts, kubelet, updates, got a list"
            ],
        ),
        (
            "hints: {pod_resources: {timeout_seconds: 0, budget_seconds: 11}}\n",
            [
                "c.yaml: hints.pod_resources.timeout_seconds: expected more than 0, got 0",
                "c.yaml: hints.pod_resources.budget_seconds: expected at most 10, got 11",
            ],
        ),
        (
            "updates: {gap_seconds: fast, in_reply: sometimes}\n",
            [
                "c.yaml: updates.in_reply: expected one of true, false or 'auto', "
                'got "sometimes"',
                'c.yaml: updates.gap_seconds: expected a number, got "fast"',
            ],
        ),
        (
            'state: {lock_wait_seconds: "300"}\nrestarts: {hold_seconds: true}\n',
            [
                'c.yaml: state.lock_wait_seconds: expected a number, got "300"',
                "c.yaml: restarts.hold_seconds: expected a number, got true",
            ],
        ),
        (
            "nrt: {publish: 1}\ntopology: {proc_root: 3, memory_tiers: {-1: dram, 0: ssd}}\n",
            [
                "c.yaml: topology.proc_root: expected a string, got 3",
                "c.yaml: topology.memory_tiers.-1 (the key): expected at least 0, got -1",
                "c.yaml: nrt.publish: expected one of true, false or 'auto', got 1",
            ],
        ),
        (
            "topology: {memory_tiers: {0: ssd}}\npolicy: {trusted_namespaces: {preserve: ['']}}\n",
            [
                "c.yaml: policy.trusted_namespaces.preserve[0]: expected a non-empty string",
                "c.yaml: topology.memory_tiers.0: expected one of 'dram', 'pmem', 'hbm' or "
                "'cxl', got \"ssd\"",
            ],
        ),
        (
            "policy:\n  pin_cpu: [\n",
            [
                "c.yaml: line 3, column 1: invalid YAML: "
                "expected the node content, but found '<stream end>'"
            ],
        ),
        (
            "metrics: {}\nmetrics: {}\n",
            ["c.yaml: line 2, column 1: invalid YAML: duplicate key 'metrics'"],
        ),
    ],
)
def test_invalid_files_name_the_key(text, lines):
    with pytest.raises(ConfigError) as e:
        parse_config(text, "c.yaml")
    assert list(e.value.errors) == lines
    assert str(e.value) == "\n".join(lines)


def test_validate_config_command(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("policy:\n  reserved_resources: {cpu: 1500m}\n  colocate_pods: true\n")
    assert validate_config.main(argparse.Namespace(file=good)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{good}: valid\n")
    assert "reserved_resources: 1500m CPU" in out
    assert "available_resources: all CPUs" in out
    assert "colocate_pods: true" in out

    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  pin_cpu: maybe\n  pin_cpuz: 1\n")
    assert validate_config.main(argparse.Namespace(file=bad)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err.splitlines()[0]
        == f'{bad}: policy.pin_cpu: expected true or false, got "maybe"'
    )
    assert captured.err.splitlines()[1].startswith(
        f"{bad}: policy.pin_cpuz: unknown key; allowed: "
    )


def test_validate_config_through_the_cli(tmp_path, capsys):
    from nri_topology.cli import main

    path = tmp_path / "c.yaml"
    path.write_text('policy: {available_resources: {cpu: "exclude-cpuset:0-1"}}\n')
    assert main(["validate-config", str(path)]) == 0
    assert "available_resources: all CPUs except 0-1" in capsys.readouterr().out


def test_config_is_immutable():
    config = Config()
    with pytest.raises(AttributeError):
        config.policy.pin_cpu = False  # type: ignore[misc]


def test_every_key_is_documented():
    doc = (REPO / "docs" / "configuration.md").read_text()
    for field in msgspec.structs.fields(Config):
        assert f"## `{field.name}`" in doc, field.name
        for key in keys(field.type):
            assert f"| `{key}" in doc, f"{field.name}.{key}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_effective_config_written_back_reads_the_same(path):
    config = load_config(path)
    text = yaml.safe_dump(as_document(config))
    assert parse_config(text, "round-trip") == config


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("policy: " + "[" * 30_000 + "]" * 30_000, "nested more than 16 levels deep"),
        ("policy:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 40)), "nested more"),
        (_alias_bomb(), "anchors and aliases are not accepted"),
        ("policy:\n  reserved_namespaces: [" + "9" * 5000 + "]\n", "4300 digits"),
        ("# " + "x" * (2 << 20) + "\n", "more than the limit of 1048576"),
    ],
    ids=["flow-nesting", "block-nesting", "alias-bomb", "huge-number", "oversized"],
)
def test_hostile_files_are_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "cfg.yaml")
    (line,) = info.value.errors
    assert line.startswith("cfg.yaml: refused: ") and problem in line
    assert len(line) < 300  # the value is never echoed whole


def test_oversized_file_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("# " + "x" * (load.MAX_CONFIG_BYTES + 10) + "\n")
    with pytest.raises(ConfigError, match="refused: larger than the limit"):
        read_config(path)
