"""Where arborl keeps per-user state: registered env packages, isolated interpreters, run files.

Everything lives under one folder, `ARBORL_HOME` when that variable is set, else
`$XDG_DATA_HOME/arborl`, else `~/.local/share/arborl`:

    packages.json          {package name: package folder}  (written by `arborl env add`)
    envs/<name>-<hash12>/  the package's isolated interpreter (`arborl env setup`)
    envs/<name>-<hash12>.log
    run/<env id>.json      pids of the servers `arborl env serve` started (orphan reaping)

The registry stores folders, not copies: editing a package and running `setup` again
rebuilds its interpreter (the folder name is keyed by the manifest hash).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from arborl.envs.packages.manifest import EnvManifest, load_manifest

HOME_ENV_VAR = "ARBORL_HOME"


def arborl_home(create: bool = True) -> Path:
    """The user data folder (created on first use unless `create=False`)."""
    if os.environ.get(HOME_ENV_VAR):
        home = Path(os.environ[HOME_ENV_VAR]).expanduser()
    elif os.environ.get("XDG_DATA_HOME"):
        home = Path(os.environ["XDG_DATA_HOME"]).expanduser() / "arborl"
    else:
        home = Path.home() / ".local" / "share" / "arborl"
    if create:
        home.mkdir(parents=True, exist_ok=True)
    return home


def _registry_file(create: bool = True) -> Path:
    return arborl_home(create) / "packages.json"


def _read_registry() -> dict[str, str]:
    path = _registry_file(create=False)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RuntimeError(f"{path} is not valid JSON ({e}); fix or delete it") from e
    return {str(k): str(v) for k, v in data.items()}


def add_package(path: str | Path) -> EnvManifest:
    """Register the package at `path`; re-adding a name points it at the new folder.

    Raises if one of its env ids is already provided by another registered package.
    """
    m = load_manifest(path)
    reg = _read_registry()
    for other_name, other_root in reg.items():
        if other_name == m.name:
            continue
        try:
            other = load_manifest(other_root)
        except Exception:  # a package folder that vanished cannot clash
            continue
        clash = sorted(set(other.env_ids) & set(m.env_ids))
        if clash:
            raise ValueError(
                f"env ids {clash} of package {m.name!r} are already provided by package "
                f"{other_name!r} ({other_root}); rename them or remove that package from "
                f"{_registry_file()}"
            )
    reg[m.name] = str(m.root)
    tmp = _registry_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(reg, indent=2, sort_keys=True))
    tmp.replace(_registry_file())
    return m


def registered_packages() -> list[EnvManifest]:
    """Manifests of every registered package whose folder still loads."""
    out = []
    for root in _read_registry().values():
        try:
            out.append(load_manifest(root))
        except Exception:  # listed by `arborl env list` as broken via `broken_packages`
            continue
    return out


def broken_packages() -> dict[str, str]:
    """{name: error} for registered packages whose manifest no longer loads."""
    out = {}
    for name, root in _read_registry().items():
        try:
            load_manifest(root)
        except Exception as e:
            out[name] = f"{root}: {e}"
    return out


def package_of(env_id: str) -> EnvManifest | None:
    """The registered package that provides `env_id` (None for a plain registry env)."""
    for m in registered_packages():
        if env_id in m.env_ids:
            return m
    return None


def require_package(env_id_or_name: str) -> EnvManifest:
    """The package providing an env id (or named so); a clear error when there is none."""
    for m in registered_packages():
        if env_id_or_name in m.env_ids or env_id_or_name == m.name:
            return m
    known = sorted(i for m in registered_packages() for i in m.env_ids)
    raise KeyError(
        f"no registered env package provides {env_id_or_name!r}; registered env ids: "
        f"{known or 'none'}. Register one with `arborl env add PATH` (ARBORL_HOME="
        f"{arborl_home()})"
    )


def register_package_envs() -> list[str]:
    """Put every registered package's env ids into the env registry (for listing and for
    `make` where the host can import them). Returns the ids."""
    from arborl.envs.registry import register

    ids = []
    for m in registered_packages():
        for e in m.envs:
            desc = e.description or f"(package {m.name}, isolation {m.isolation})"
            register(e.id, e.entry_point, e.kwargs, e.max_turns, desc)
            ids.append(e.id)
    return ids


def run_state_file(env_id: str) -> Path:
    """The pid/state file of `arborl env serve ENV_ID`."""
    run = arborl_home() / "run"
    run.mkdir(parents=True, exist_ok=True)
    return run / (re.sub(r"[^A-Za-z0-9_.-]", "_", env_id) + ".json")
