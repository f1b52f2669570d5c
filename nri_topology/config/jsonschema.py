"""The configuration file's JSON Schema, generated from the pydantic models so it cannot drift.

The Helm chart embeds it as the schema of its `config` value (packaging/helm/values_schema.py),
so `helm install` refuses a configuration the plugin would refuse, before any pod starts. It
describes the input the file accepts: where a validator converts (numbers to CPU amounts, letter
case), the models say so with `WithJsonSchema`.
"""

from __future__ import annotations

from typing import Any

from nri_topology.config.schema import Config


def _without_titles(node: Any) -> Any:
    """Drop pydantic's generated titles ("Pin Cpu"): noise next to the key they repeat."""
    if isinstance(node, dict):
        return {
            k: _without_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def config_schema() -> dict[str, Any]:
    """The configuration file's schema (JSON Schema 2020-12, definitions under `$defs`)."""
    return _without_titles(Config.model_json_schema(mode="validation"))
