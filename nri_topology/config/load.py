"""Reading the configuration file into a validated `Config`, or errors that name file and key.

Loading has no side effects: it returns a new value or raises `ConfigError`, so a reload can
refuse an invalid new file and keep the configuration it already has.

The text is bounded before it is parsed: at most `MAX_CONFIG_BYTES`, nested at most
`MAX_CONFIG_DEPTH` deep, no anchors or aliases (a few lines of aliases expand to millions of
values when validated).
The bounds are checked on YAML's token stream, which is read without recursion; so no file,
however made, reaches the recursive parts of the loader with more than they can take.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from nri_topology.bounded_read import TooLarge, read_bounded
from nri_topology.config.schema import Config
from nri_topology.config.validate import Invalid, as_document, convert, dotted, keys, shown

DEFAULT_PATH = Path("/etc/nri-topology/config.yaml")
MAX_CONFIG_BYTES = 1 << 20  # the annotated example configurations are a few KiB
MAX_CONFIG_DEPTH = 16  # the schema nests 4 deep

_OPENERS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSERS = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class ConfigError(ValueError):
    """An unreadable or invalid configuration file; one line per problem in `errors`."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = tuple(errors)


class Loaded(NamedTuple):
    """A loaded configuration and what the operator should be told about it."""

    config: Config
    notes: tuple[str, ...] = ()


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses duplicate keys instead of keeping the last one."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


def _lines(source: str, e: Invalid) -> list[str]:
    return [f"{source}: {dotted(loc)}: {why}" for loc, why in e.problems]


def config_from(data: object, source: str = "configuration") -> Config:
    """A parsed document (mappings, lists, scalars) as a `Config`; errors name `source`."""
    try:
        return convert(Config, data)
    except Invalid as e:
        raise ConfigError(_lines(source, e)) from None


def _bounds_problem(text: str) -> str:
    """Why `text` is refused before parsing (size, nesting, aliases), or "" (YAMLError on bad
    syntax)."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_CONFIG_BYTES:
        return f"{size} bytes, more than the limit of {MAX_CONFIG_BYTES}"
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                line = token.start_mark.line + 1
                return f"line {line}: nested more than {MAX_CONFIG_DEPTH} levels deep"
        elif isinstance(token, _CLOSERS):
            depth -= 1
        elif isinstance(token, yaml.AnchorToken | yaml.AliasToken):
            line = token.start_mark.line + 1
            return f"line {line}: anchors and aliases are not accepted"
    return ""


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_config(text: str, source: str) -> Config:
    """Validate configuration text; `source` (a file name) starts every error line."""
    try:
        problem = _bounds_problem(text)
        if problem:
            raise ConfigError([f"{source}: refused: {problem}"])
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError([f"{source}: {where}invalid YAML: {_short(problem)}"]) from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of more digits than Python takes
        if isinstance(e, ConfigError):
            raise
        raise ConfigError([f"{source}: refused: {_short(str(e))}"]) from None
    if data is None:
        return Config()
    if not isinstance(data, dict):
        sections = ", ".join(keys(Config))
        raise ConfigError(
            [f"{source}: expected a mapping with sections {sections}, got {shown(data)}"]
        )
    return config_from(data, source)


def with_overrides(config: Config, updates: Mapping[str, Mapping[str, Any]], source: str) -> Config:
    """`config` with some keys of some sections replaced, validated like the file itself.

    Command-line options go through here, so `--plugin-index 7` is checked (and zero-padded)
    exactly as `nri: {plugin_index: 7}` would be; errors name `source` and the dotted key.
    """
    if not any(updates.values()):
        return config
    data = as_document(config)
    for section, values in updates.items():
        data[section] = {**data[section], **values}
    return config_from(data, source)


def read_config(path: Path | None = None) -> Loaded:
    """Load `path` (default: DEFAULT_PATH); a missing file is fine only at the default path."""
    path = DEFAULT_PATH if path is None else Path(path)
    try:
        text = read_bounded(path, MAX_CONFIG_BYTES).decode("utf-8")
    except TooLarge as e:
        raise ConfigError([f"{path}: refused: larger than the limit of {e.limit} bytes"]) from None
    except FileNotFoundError:
        if path == DEFAULT_PATH:
            return Loaded(Config(), (f"{path}: no configuration file, using the defaults",))
        raise ConfigError([f"{path}: no such file"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror or e}"]) from None
    if not text.strip():
        return Loaded(Config(), (f"{path}: empty, using the defaults",))
    return Loaded(parse_config(text, str(path)))


def load_config(path: Path | None = None) -> Config:
    """The configuration in `path`; see `read_config` for the notes that go with it."""
    return read_config(path).config
