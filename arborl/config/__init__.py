"""Typed dataclass configs, YAML files and dotted overrides (see `arborl.config.core`)."""

from arborl.config.core import (
    ConfigError,
    allowed_names,
    dump_yaml,
    field_docs,
    from_dict,
    iter_fields,
    load_config,
    to_dict,
)

__all__ = [
    "ConfigError",
    "allowed_names",
    "dump_yaml",
    "field_docs",
    "from_dict",
    "iter_fields",
    "load_config",
    "to_dict",
]
