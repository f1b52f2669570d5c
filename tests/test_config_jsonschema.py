"""The configuration's JSON Schema (generated from the models, embedded in the Helm chart) accepts
every file the plugin accepts and refuses the misspelt keys, wrong types and unknown choices the
plugin refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.config.jsonschema import config_schema
from nri_topology.config.load import ConfigError, config_from

ROOT = Path(__file__).resolve().parents[1]
VALIDATOR = jsonschema.Draft202012Validator(config_schema())


def _model_accepts(doc: Any) -> bool:
    try:
        config_from(doc)
    except ConfigError:
        return False
    return True


def test_schema_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(config_schema())


@pytest.mark.parametrize("path", sorted((ROOT / "config").rglob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configurations_pass_the_schema(path: Path) -> None:
    doc = yaml.safe_load(path.read_text()) or {}
    assert _model_accepts(doc)
    VALIDATOR.validate(doc)


@pytest.mark.parametrize(
    "doc",
    [
        {"policy": {"reserved_resources": {"cpu": 2}}},
        {"policy": {"reserved_resources": {"cpu": 1.5}}},
        {"policy": {"reserved_resources": {"cpu": "cpuset:0-1"}}},
        {"policy": {"available_resources": {"cpu": "exclude-cpuset:0"}}},
        {"policy": {"default_memory_tiers": ["DRAM", "Pmem"]}},
        {"topology": {"memory_tiers": {"2": "PMEM"}}},
        {"nri": {"plugin_index": 7}},
        {"nri": {"plugin_index": "07"}},
        {"logging": {"level": "DEBUG", "format": "Json"}},
        {"metrics": {"port": 9000, "address": "::1"}},
        {"policy": {"on_unfit": "Refuse", "shared_placement": "PACK"}},
        {"kubelet": {"when_active": "Avoid"}},
        {"nrt": {"publish": "auto"}, "updates": {"in_reply": False}},
    ],
)
def test_what_the_model_accepts_the_schema_accepts(doc: dict[str, Any]) -> None:
    assert _model_accepts(doc)
    VALIDATOR.validate(doc)


@pytest.mark.parametrize(
    "doc",
    [
        {"polcy": {}},
        {"policy": {"pin_cpus": True}},
        {"policy": {"pin_cpu": "yes"}},
        {"policy": {"distribute_min_group": 0}},
        {"policy": {"distribute_min_group": 2.5}},
        {"policy": {"default_memory_tiers": []}},
        {"policy": {"default_memory_tiers": ["ssd"]}},
        {"policy": {"reserved_resources": {"cpu": True}}},
        {"policy": {"reserved_resources": {"cpus": "1"}}},
        {"topology": {"memory_tiers": {"x": "pmem"}}},
        {"nri": {"plugin_index": 100}},
        {"nri": {"plugin_index": "7"}},
        {"nri": {"plugin_name": "bad name"}},
        {"logging": {"level": "verbose"}},
        {"metrics": {"port": "abc"}},
        {"metrics": {"port": 0}},
        {"expose": {"env_prefix": "lower_"}},
    ],
)
def test_what_both_refuse(doc: dict[str, Any]) -> None:
    assert not _model_accepts(doc)
    assert not VALIDATOR.is_valid(doc)


_KEYS = {
    "policy": ["pin_cpu", "prefer_shared_cpus", "reserved_resources", "distribute_min_group",
               "default_memory_tiers", "reserved_namespaces", "pin_cpus"],
    "topology": ["sysfs_root", "proc_root", "memory_tiers", "sysfs"],
    "nri": ["socket", "plugin_name", "plugin_index"],
    "logging": ["format", "level"],
    "metrics": ["enabled", "address", "port"],
    "expose": ["enabled", "env_prefix"],
    "polcy": ["x"],
}  # fmt: skip
_VALUES = st.sampled_from(
    [True, False, 0, 1, 7, 99, 100, 1024, 2.5, -1, "", "abc", "07", "750m", "2", "DRAM", "pmem",
     "json", "INFO", "/sys", "::1", "NRI_", None, [], ["dram"], ["Pmem", "cxl"], ["x"], {},
     {"cpu": "1"}, {"cpu": 2}, {"cpu": True}, {"2": "pmem"}, {"two": "pmem"}]
)  # fmt: skip


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from(sorted(_KEYS)), max_size=3, unique=True)):
        keys = draw(st.lists(st.sampled_from(_KEYS[section]), max_size=3, unique=True))
        doc[section] = {k: draw(_VALUES) for k in keys}
    return doc


@settings(max_examples=1500, deadline=None)
@given(_documents())
def test_the_schema_never_refuses_a_file_the_plugin_takes(doc: dict[str, Any]) -> None:
    if _model_accepts(doc):
        assert VALIDATOR.is_valid(doc), list(VALIDATOR.iter_errors(doc))
