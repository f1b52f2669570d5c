"""The configuration file: schema (`schema.py`), its checking key by key (`validate.py`) and
side-effect-free loading (`load.py`)."""

from nri_topology.config.load import (
    DEFAULT_PATH,
    ConfigError,
    Loaded,
    config_from,
    load_config,
    parse_config,
    read_config,
    with_overrides,
)
from nri_topology.config.schema import Config

__all__ = [
    "DEFAULT_PATH",
    "Config",
    "ConfigError",
    "Loaded",
    "config_from",
    "load_config",
    "parse_config",
    "read_config",
    "with_overrides",
]
