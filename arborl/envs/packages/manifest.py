"""Env packages: a folder with an `arborl-env.toml` (or `.yaml`) manifest.

A manifest declares what an env needs so that it can be rebuilt on any machine: its env ids
and entry points, the Python version, pip requirements and/or a conda `environment.yml`,
an optional setup script, resource hints and the isolation mode it prefers. It is read on
the host only (never inside the isolated interpreter), is checked strictly (an unknown key
names itself, the allowed keys and the closest match) and hashes to a key that makes
`arborl env setup` idempotent.

    name = "counter"
    python = "3.11"
    isolation = "subprocess"
    setup_script = "setup.sh"
    [dependencies]
    pip = ["./vendor/tinydep"]
    [resources]
    num_cpus = 0.5
    [[envs]]
    id = "fixture/Counter-v0"
    entry_point = "counter_env:CounterEnv"
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAMES = ("arborl-env.toml", "arborl-env.yaml", "arborl-env.yml")
MODES = ("inproc", "subprocess", "ray", "http")
"""The four isolation modes of `arborl.envs.make_pool`."""
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOP_KEYS = ("name", "python", "isolation", "setup_script", "dependencies", "resources", "envs")
_DEP_KEYS = ("pip", "requirements", "conda")
_RES_KEYS = ("num_cpus", "memory_mb")
_ENV_KEYS = ("id", "entry_point", "kwargs", "max_turns", "description")


class ManifestError(ValueError):
    """A manifest is missing, unreadable or has a bad key or value."""


@dataclass
class PackageEnv:
    """One env id the package provides."""

    id: str
    """Versioned id, e.g. `me/Counter-v0`."""
    entry_point: str
    """`"module:Class"`, importable in the package's interpreter (the package folder is on
    its `sys.path`)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Default constructor kwargs."""
    max_turns: int | None = None
    """Turn limit (None: the env's default)."""
    description: str = ""
    """One line for `arborl env list`."""


@dataclass
class EnvManifest:
    """A parsed, checked env package manifest."""

    name: str
    """Package name (letters, digits, `_.-`); names the isolated interpreter's folder."""
    root: Path
    """The package folder (absolute)."""
    path: Path
    """The manifest file."""
    envs: list[PackageEnv]
    """The env ids it provides (at least one)."""
    python: str = ""
    """Python version `X.Y` of the isolated interpreter ("" = the host's version)."""
    isolation: str = "subprocess"
    """Preferred isolation mode (one of `MODES`) when a run does not choose one."""
    setup_script: str = ""
    """Script run inside the interpreter after the dependencies (relative to `root`);
    `.py` runs with the env's Python, anything else with `bash`."""
    pip: list[str] = field(default_factory=list)
    """pip requirement strings; ones starting with `.` are paths relative to `root`."""
    requirements: str = ""
    """A requirements file relative to `root` ("" = none)."""
    conda: str = ""
    """A conda `environment.yml` relative to `root` ("" = none: a venv is used)."""
    num_cpus: float = 1.0
    """CPUs one worker needs (Ray mode reserves this fraction per actor)."""
    memory_mb: int | None = None
    """Memory one worker needs, in MiB (a hint; None = unknown)."""

    def env(self, env_id: str) -> PackageEnv:
        """The `PackageEnv` with this id (KeyError lists the package's ids)."""
        for e in self.envs:
            if e.id == env_id:
                return e
        raise KeyError(f"package {self.name!r} has no env {env_id!r}; it has {self.env_ids}")

    @property
    def env_ids(self) -> list[str]:
        return [e.id for e in self.envs]

    def files(self) -> list[Path]:
        """The manifest and every file it refers to (they all feed `hash`)."""
        out = [self.path]
        for rel in (self.requirements, self.conda, self.setup_script):
            if rel:
                out.append(self.root / rel)
        return out

    def hash(self, extra: str = "") -> str:
        """sha256 over the manifest, the files it names and local pip dependency folders."""
        h = hashlib.sha256(extra.encode())
        for f in self.files():
            h.update(str(f.relative_to(self.root)).encode() + b"\0" + f.read_bytes())
        for req in self.pip:
            if req.startswith("."):
                _hash_tree(h, (self.root / req).resolve())
        return h.hexdigest()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["root"], d["path"] = str(self.root), str(self.path)
        return d


def _hash_tree(h: Any, folder: Path) -> None:
    if folder.is_file():
        h.update(folder.read_bytes())
        return
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).parts
        junk = {"__pycache__", "build", "dist"} & set(rel) or any(
            x.endswith(".egg-info") for x in rel
        )
        if p.is_file() and not junk:
            h.update("/".join(rel).encode() + b"\0" + p.read_bytes())


def find_manifest(path: str | Path) -> Path:
    """The manifest file of a package folder (or the file itself)."""
    p = Path(path).expanduser().resolve()
    if p.is_file():
        return p
    if not p.is_dir():
        raise ManifestError(f"env package path {str(path)!r} does not exist")
    for name in MANIFEST_NAMES:
        if (p / name).is_file():
            return p / name
    raise ManifestError(
        f"{str(path)!r} has no manifest; create one of {list(MANIFEST_NAMES)} there "
        "(see docs/env_packages.md)"
    )


def _one_line(e: Exception) -> str:
    """A parser's error on one line: YAML's spans several (the snippet with a caret)."""
    mark = getattr(e, "problem_mark", None)
    if getattr(e, "problem", None) and mark is not None:
        return f"{e.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(e).split())


def _read(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".toml":
            return tomllib.loads(path.read_text())
        from arborl.config.yamlsafe import load_yaml, read_text

        data = load_yaml(read_text(path), str(path))  # aliases bounded, no duplicate keys
    except Exception as e:
        raise ManifestError(f"{path}: cannot parse: {_one_line(e)}") from e
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def _check_keys(where: str, data: dict, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ManifestError(f"{where}: unknown key {key!r}.{hint} Allowed: {list(allowed)}")


def _typed(where: str, key: str, value: Any, typ: type | tuple, default: Any) -> Any:
    if value is None:
        return default
    if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
        want = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ManifestError(f"{where}: {key}={value!r} must be a {want}")
    return value


def _parse_envs(where: str, items: Any) -> list[PackageEnv]:
    from arborl.envs.registry import _ID_RE

    if not isinstance(items, list) or not items:
        raise ManifestError(f"{where}: 'envs' must be a non-empty list of {{id, entry_point}}")
    envs = []
    for i, item in enumerate(items):
        w = f"{where}: envs[{i}]"
        if not isinstance(item, dict):
            raise ManifestError(f"{w} must be a mapping with 'id' and 'entry_point'")
        _check_keys(w, item, _ENV_KEYS)
        env_id = _typed(w, "id", item.get("id"), str, "")
        if not _ID_RE.match(env_id):
            raise ManifestError(f"{w}: id={env_id!r} must be versioned, e.g. 'me/Name-v0'")
        ep = _typed(w, "entry_point", item.get("entry_point"), str, "")
        if ":" not in ep:
            raise ManifestError(f"{w}: entry_point={ep!r} must be 'module:Class'")
        max_turns = _typed(w, "max_turns", item.get("max_turns"), int, None)
        kwargs = _typed(w, "kwargs", item.get("kwargs"), dict, {})
        desc = _typed(w, "description", item.get("description"), str, "")
        envs.append(PackageEnv(env_id, ep, kwargs, max_turns, desc))
    return envs


def load_manifest(path: str | Path) -> EnvManifest:
    """Read and check the manifest of the package at `path` (a folder or the file)."""
    mpath = find_manifest(path)
    root, data, w = mpath.parent, _read(mpath), str(mpath)
    _check_keys(w, data, _TOP_KEYS)
    deps = _typed(w, "dependencies", data.get("dependencies"), dict, {})
    _check_keys(f"{w}: [dependencies]", deps, _DEP_KEYS)
    res = _typed(w, "resources", data.get("resources"), dict, {})
    _check_keys(f"{w}: [resources]", res, _RES_KEYS)
    name = _typed(w, "name", data.get("name"), str, root.name)
    if not _NAME_RE.match(name):
        raise ManifestError(f"{w}: name={name!r} may hold only letters, digits and _.-")
    python = str(_typed(w, "python", data.get("python"), (str, float), ""))
    if python and not re.fullmatch(r"3\.\d+", python):
        raise ManifestError(f"{w}: python={python!r} must be 'X.Y', e.g. '3.11' (quote it)")
    isolation = _typed(w, "isolation", data.get("isolation"), str, "subprocess")
    if isolation not in MODES:
        raise ManifestError(f"{w}: isolation={isolation!r} is not one of {list(MODES)}")
    pip = _typed(w, "dependencies.pip", deps.get("pip"), list, [])
    if not all(isinstance(r, str) for r in pip):
        raise ManifestError(f"{w}: dependencies.pip must be a list of requirement strings")
    m = EnvManifest(
        name=name, root=root, path=mpath, envs=_parse_envs(w, data.get("envs")), python=python,
        isolation=isolation,
        setup_script=_typed(w, "setup_script", data.get("setup_script"), str, ""),
        pip=list(pip),
        requirements=_typed(w, "dependencies.requirements", deps.get("requirements"), str, ""),
        conda=_typed(w, "dependencies.conda", deps.get("conda"), str, ""),
        num_cpus=float(_typed(w, "resources.num_cpus", res.get("num_cpus"), (int, float), 1.0)),
        memory_mb=_typed(w, "resources.memory_mb", res.get("memory_mb"), int, None),
    )  # fmt: skip
    if m.num_cpus <= 0:
        raise ManifestError(f"{w}: resources.num_cpus={m.num_cpus!r} must be > 0")
    for key, rel in (("requirements", m.requirements), ("conda", m.conda),
                     ("setup_script", m.setup_script)):  # fmt: skip
        if rel:
            _check_inside(w, key, rel, root)
        if rel and not (root / rel).is_file():
            raise ManifestError(f"{w}: {key}={rel!r} names no file under {root}")
    for req in m.pip:
        if req.startswith((".", "/", "~")):  # a local folder: it must be part of the package
            _check_inside(w, "dependencies.pip", req, root)
    return m


def _check_inside(w: str, key: str, rel: str, root: Path) -> None:
    """Every path a manifest names stays inside the package folder (the package is trusted
    code, but a manifest must not reach files it does not ship)."""
    if "\0" in rel:  # the OS would only say "embedded null byte", naming no file
        raise ManifestError(f"{w}: {key}={rel!r} holds a NUL byte; no file can have that name")
    path = Path(rel).expanduser()
    if path.is_absolute() or not (root / path).resolve().is_relative_to(root.resolve()):
        raise ManifestError(f"{w}: {key}={rel!r} points outside the package folder {root}; "
                            "use a path relative to the manifest, inside the package")  # fmt: skip


def manifest_summary(m: EnvManifest) -> str:
    """One line: isolation, python, dependency kinds."""
    deps = [k for k, v in (("pip", m.pip), ("requirements", m.requirements),
                           ("conda", m.conda)) if v]  # fmt: skip
    return json.dumps(
        {
            "isolation": m.isolation,
            "python": m.python or "host",
            "deps": deps,
            "num_cpus": m.num_cpus,
        }  # fmt: skip
    )
