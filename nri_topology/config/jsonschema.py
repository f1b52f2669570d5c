"""The configuration file's JSON Schema, generated from the schema's Structs so it cannot drift.

The Helm chart embeds it as the schema of its `config` value (packaging/helm/values_schema.py),
so `helm install` refuses a configuration the plugin would refuse, before any pod starts. It
describes the input the file accepts: where a field's `Before` reads more than its type (numbers
as CPU amounts, any letter case), its own schema takes the type's place.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, get_args, get_origin

import msgspec

from nri_topology.config.schema import Config
from nri_topology.config.validate import Before, struct_of


def _inputs(section: type[msgspec.Struct], out: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Each section's fields whose `Before` says what they accept, by section and key."""
    for field in msgspec.structs.fields(section):
        nested = struct_of(field.type)
        if nested is not None:
            _inputs(nested, out)
        elif get_origin(field.type) is Annotated:
            for extra in get_args(field.type)[1:]:
                if isinstance(extra, Before) and extra.schema is not None:
                    out.setdefault(section.__name__, {})[field.name] = extra.schema


def config_schema() -> dict[str, Any]:
    """The configuration file's schema (JSON Schema 2020-12, definitions under `$defs`)."""
    schema = msgspec.json.schema(Config)
    definitions = schema["$defs"]
    inputs: dict[str, dict[str, dict[str, Any]]] = {}
    _inputs(Config, inputs)
    for name, definition in definitions.items():
        definition.pop("title", None)  # the class name, beside the key it repeats
        if "description" in definition:  # the docstring, as indented in the source
            definition["description"] = inspect.cleandoc(definition["description"])
        if not definition.get("required"):
            definition.pop("required", None)
        properties = definition["properties"]
        for key, accepted in inputs.get(name, {}).items():
            default = properties[key].get("default", msgspec.UNSET)
            properties[key] = dict(accepted)
            if default is not msgspec.UNSET:
                properties[key]["default"] = default
    return {**definitions.pop("Config"), "$defs": definitions}
