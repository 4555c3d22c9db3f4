"""Typed dataclass configs, YAML files and dotted overrides (see `arborl.config.core`)."""

from arborl.config.core import (
    ConfigError,
    dump_yaml,
    field_docs,
    from_dict,
    iter_fields,
    load_config,
    to_dict,
)

__all__ = [
    "ConfigError",
    "dump_yaml",
    "field_docs",
    "from_dict",
    "iter_fields",
    "load_config",
    "to_dict",
]
