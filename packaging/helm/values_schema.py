"""Writes the chart's values.schema.json: the chart's own values described here, its `config`
value generated from the plugin's configuration models, so the two cannot drift (a test compares
the committed file with this output). Run from the repository root after changing either:

    .venv/bin/python packaging/helm/values_schema.py

Helm validates every install and upgrade against it: `metrics.port=abc`, `logLevel=verbose` or a
misspelt configuration key are refused by `helm` instead of crash-looping the pod.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from nri_topology.config.jsonschema import config_schema
from nri_topology.daemon.logs import LEVELS, LogFormat

OUT = Path(__file__).resolve().parent / "nri-topology" / "values.schema.json"


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        schema["required"] = list(required)
    return schema


_TEXT = {"type": "string", "minLength": 1}
_ABSOLUTE_PATH = {"type": "string", "pattern": "^/"}


def values_schema() -> dict[str, Any]:
    config = config_schema()
    definitions = config.pop("$defs", {})
    port = dict(definitions["MetricsSection"]["properties"]["port"])
    port.pop("default", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": "Values of the nri-topology chart; `config` is the plugin's configuration "
        "file (docs/configuration.md).",
        **_object(
            {
                "image": _object(
                    {
                        "repository": _TEXT,
                        "tag": _TEXT,
                        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    },
                    ("repository", "tag"),
                ),
                "config": config,
                "nri": _object(
                    {
                        "socketDir": _ABSOLUTE_PATH,
                        "socketName": {"type": "string", "pattern": "^[^/]+$"},
                    },
                    ("socketDir", "socketName"),
                ),
                "cri": _object(
                    {
                        "socketDir": _ABSOLUTE_PATH,
                        "socketName": {"type": "string", "pattern": "^[^/]+$"},
                    },
                    ("socketDir", "socketName"),
                ),
                "stateDir": _ABSOLUTE_PATH,
                "kubeletDir": _ABSOLUTE_PATH,
                # passed as --log-format and --log-level, whose spellings are exact
                "logFormat": {"enum": [f.value for f in LogFormat]},
                "logLevel": {"enum": list(LEVELS)},
                "metrics": _object({"port": port, "service": {"type": "boolean"}}, ("port",)),
                "priorityClassName": {"type": "string"},
                "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
                "resources": {"type": "object"},
                "tolerations": {"type": "array", "items": {"type": "object"}},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
            }
        ),
        "$defs": definitions,
    }


def render() -> str:
    return json.dumps(values_schema(), indent=2) + "\n"


def main() -> int:
    OUT.write_text(render())
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
