"""The `env` config group: `env=NAME` from the repo's `configs/env/` or from a package.

A third-party package ships a config group for its env through the `arborl.env_configs`
entry-point group, so `arborl train env=NAME` finds it as it finds `configs/env/NAME.yaml`
(a repo file of the same name wins):

    [project.entry-points."arborl.env_configs"]
    hanoi = "newbie_hanoi:hanoi.yaml"    # a YAML file inside the package (package data)
    hanoi2 = "newbie_hanoi:CONFIG"       # a dict, or the path of a YAML file

A group is the `env` section's values (`id`, `kwargs`, ...) plus an optional `_root_:`
mapping of other sections' keys that suit the env. The names are read from the entry
points' metadata; a package is imported only when its group is selected.

`DEFAULT_ENV_GROUP` is the env of a run that chooses none (`arborl train`: the demo's
Maze with one-letter moves). A run chooses one with `env=NAME`, an `env.id` override or
a file that sets `env.id`, and then gets none of the demo's `env.kwargs`.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path
from typing import Any

import yaml

from arborl.config import ConfigError
from arborl.config.yamlsafe import load_yaml, read_text
from arborl.registry import Registry, load_entry_point

ENTRY_POINT_GROUP = "arborl.env_configs"
DEFAULT_ENV_GROUP = "maze"
"""The group applied when a run chooses no env (`configs/env/maze.yaml`)."""


def env_groups(config_dir: Path) -> Registry:
    """Every `env=NAME` choice: `config_dir/env/*.yaml`, then the entry-point group."""
    groups = Registry(
        "env",
        entry_point_group=ENTRY_POINT_GROUP,
        error=ConfigError,
        message="{what}={name} is not a config group; choose one of: {known}.{hint} A "
        "package ships one with an 'arborl.env_configs' entry point (docs/envs.md); or "
        "set env.id=ID (and env.kwargs) directly",
    )
    for path in sorted((config_dir / "env").glob("*.yaml")):
        groups.register(path.stem, path)
    return groups


def _read_group(where: Any, what: str) -> dict[str, Any]:
    data = load_yaml(read_text(Path(where)), str(where)) if not isinstance(where, dict) else where
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: expected a mapping of env keys, got {type(data).__name__}")
    return dict(data)


def load_env_group(name: str, config_dir: Path) -> dict[str, Any]:
    """The values `env=NAME` selects (an unknown name raises, listing the known ones)."""
    entry = env_groups(config_dir).entry(name)
    what = f"env={name} ({entry})"
    if isinstance(entry, Path):
        return _read_group(entry, what)
    module, _, attr = entry.partition(":")
    if attr.endswith((".yaml", ".yml")):  # a data file of the package
        try:
            resource = importlib.resources.files(module).joinpath(attr)
        except ModuleNotFoundError as e:
            raise ConfigError(f"{what}: cannot import {module!r} ({e}); install it") from e
        with importlib.resources.as_file(resource) as path:
            if not path.is_file():
                raise ConfigError(f"{what}: package {module!r} has no file {attr!r}")
            return _read_group(path, what)
    try:
        obj = load_entry_point(entry, f"env={name}")
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(str(e)) from e
    if isinstance(obj, str | os.PathLike):
        return _read_group(obj, what)
    if isinstance(obj, dict):
        return _read_group(obj, what)
    raise ConfigError(f"{what}: loaded a {type(obj).__name__}; expected a dict or a YAML path")


def chooses_env(overrides: list[str], files: list[str | Path]) -> bool:
    """Does the run choose its env (`env=NAME`, `env.id=...`, a file setting `env.id`)?
    If not, `DEFAULT_ENV_GROUP` applies."""
    keys = {item.split("=", 1)[0].strip() for item in overrides if "=" in item}
    if keys & {"env", "env.id"}:
        return True
    for f in files:
        try:
            data = load_yaml(read_text(Path(f)), str(f))
        except (OSError, ValueError, yaml.YAMLError):
            continue  # `load_config` reads it again and reports the error properly
        env = data.get("env") if isinstance(data, dict) else None
        if isinstance(env, dict) and "id" in env:
            return True
    return False
