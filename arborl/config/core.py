"""Typed configuration: dataclasses with a docstring under every field, YAML files, and
dotted command-line overrides.

Why not Hydra/OmegaConf: we want the dataclasses themselves to be the schema (with their
field docstrings as documentation), checks that run before any work and name the full key
path, and no magic interpolation. A config is built in three layers, each overriding the
one before: the dataclass defaults, YAML files (a base file and `group=name` selections
such as `env=sokoban` -> `configs/env/sokoban.yaml` merged into the `env` section, or a
selection registered in code: `algo=grpo`), and `a.b.c=value` overrides.

Range and choice checks live in field metadata: `field(default=1, metadata={"min": 1})`,
`{"choices": ("a", "b")}`. `Literal[...]` types are checked too. A field whose values are
the names of a plug-in registry is a `str` with `{"registry": "pkg.module:REGISTRY"}` (an
`arborl.registry.Registry`, imported when the field is checked, so this module stays at
the bottom): any name registered by then is accepted, plug-ins included, and an unknown
one fails with a did-you-mean; `{"also": ("auto",)}` adds names the registry lacks.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import textwrap
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

from arborl.config.yamlsafe import load_yaml, read_text
from arborl.registry import did_you_mean, load_entry_point

T = TypeVar("T")


class ConfigError(ValueError):
    """A config key or value is wrong; the message names the key path and the fix."""


# --- field docstrings ---------------------------------------------------------------------
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of dataclass `cls` (and its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(src).body[0].body
        for node, nxt in zip(body, body[1:] + [None]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def iter_fields(cls: type, prefix: str = ""):
    """Yield (dotted path, field, type, doc) for every leaf and section of `cls`."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        path = f"{prefix}{f.name}"
        yield path, f, tp, docs.get(f.name, "")
        if dataclasses.is_dataclass(tp):
            yield from iter_fields(tp, path + ".")


# --- type checking and coercion -------------------------------------------------------------
def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_describe(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(path: str, value: Any, tp: Any) -> Any:
    """Check `value` against annotation `tp`, converting where YAML/CLI gave a near type."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(path, value, a)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{path}={value!r}: expected {_describe(tp)}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{path}={value!r} is not allowed; choose one of {list(allowed)}.{hint}"
            )
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}={value!r}: expected a bool (true/false)")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{path}={value!r}: expected an int")
        return value
    if tp is float:
        if isinstance(value, str):
            # PyYAML reads `1e-5` (no dot) as a string, so `optim.lr=1e-5` arrives as text.
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}={value!r}: expected a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            if isinstance(value, int | float) and not isinstance(value, bool):
                return str(value)
            raise ConfigError(f"{path}={value!r}: expected a string")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}={value!r}: expected a list")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_coerce(f"{path}[{i}]", v, item_tp) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}={value!r}: expected a mapping")
        _, val_tp = get_args(tp) or (Any, Any)
        return {k: _coerce(f"{path}.{k}", v, val_tp) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{path}={value!r}: expected a section (mapping)")
        return from_dict(tp, value, prefix=path + ".")
    return value


def _check_range(path: str, value: Any, meta: Any) -> None:
    if value is None:
        return
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and value < lo:
        raise ConfigError(f"{path}={value!r} is below the minimum {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{path}={value!r} is above the maximum {hi}")
    registry = registry_of(meta)
    if registry is not None and not (registry.accepts(value) or value in meta.get("also", ())):
        known = [*meta.get("also", ()), *registry.names()]
        hint = did_you_mean(value, known)
        extra = " (or a 'module:attr' entry point)" if registry.allow_entry_points else ""
        raise ConfigError(
            f"{path}={value!r} is not registered; choose one of {known}{extra}.{hint} A "
            "plug-in must be imported (or installed with its entry point) before the config "
            "is checked"
        )
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{path}={value!r} is not allowed; choose one of {list(choices)}.{hint}")


def registry_of(meta: Any) -> Any:
    """The `Registry` a field's metadata names (`{"registry": "pkg.mod:NAME"}`), or None."""
    spec = meta.get("registry") if meta else None
    return load_entry_point(spec, "config field registry") if spec else None


def allowed_names(meta: Any) -> list[str] | None:
    """The values a registry-backed or `choices` field accepts now (None: any value)."""
    registry = registry_of(meta)
    if registry is not None:
        return [*meta.get("also", ()), *registry.names()]
    choices = meta.get("choices") if meta else None
    return [str(c) for c in choices] if choices is not None else None


def _unknown_key(cls: type, key: str, prefix: str) -> ConfigError:
    moved = getattr(cls, "RENAMED", {}).get(key)
    if moved:
        return ConfigError(f"config key '{prefix}{key}' was renamed; set {moved} instead")
    names = [f.name for f in dataclasses.fields(cls)]
    full = [p for p, *_ in iter_fields(cls, prefix)]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f" Did you mean {prefix}{close[0]}?" if close else ""
    if not close:
        tail = difflib.get_close_matches(f"{prefix}{key}", full, n=1, cutoff=0.6)
        hint = f" Did you mean {tail[0]}?" if tail else ""
    return ConfigError(
        f"unknown config key '{prefix}{key}'.{hint} Keys of '{prefix.rstrip('.') or 'config'}' "
        f"are: {', '.join(names)}"
    )


def _fill_section_defaults(f: dataclasses.Field, tp: Any, value: Any) -> Any:
    """A section given as a partial mapping keeps the parent's defaults for the rest.

    `rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(group_size=8))`:
    `rollout.num_tasks=4` must not silently reset `group_size` to RolloutConfig's own
    default, so the keys the mapping lacks come from the parent's default instance."""
    if not (dataclasses.is_dataclass(tp) and isinstance(value, dict)):
        return value
    if f.default_factory is dataclasses.MISSING:
        return value
    base = f.default_factory()
    if not dataclasses.is_dataclass(base):
        return value
    missing = {
        g.name: to_dict(getattr(base, g.name))
        for g in dataclasses.fields(base)
        if g.name not in value and g.init
    }
    return {**missing, **value}


def _check_keys(cls: type, data: Any, prefix: str) -> None:
    """Every key of `data` (and of its nested sections) is a field of `cls`: a typo fails
    before any value check, some of which import a registry's module (and torch)."""
    if not isinstance(data, dict):
        return
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in names:
            raise _unknown_key(cls, key, prefix)
        if dataclasses.is_dataclass(hints[key]):
            _check_keys(hints[key], value, f"{prefix}{key}.")


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass `cls` from a (nested) mapping, checking every key and value."""
    if not prefix:
        _check_keys(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in (data or {}).items():
        if key not in fields:
            raise _unknown_key(cls, key, prefix)
        path = f"{prefix}{key}"
        value = _fill_section_defaults(fields[key], hints[key], value)
        v = _coerce(path, value, hints[key])
        _check_range(path, v, fields[key].metadata)
        kwargs[key] = v
    for name, f in fields.items():  # defaults must pass the same range checks
        if name not in kwargs and f.default is not dataclasses.MISSING:
            _check_range(f"{prefix}{name}", f.default, f.metadata)
    try:
        # A section may check cross-field rules in `__post_init__` or `validate(prefix)`;
        # their ValueErrors become ConfigErrors so that the CLI reports them the same way.
        obj = cls(**kwargs)
        validate = getattr(obj, "validate", None)
        if validate is not None:
            validate(prefix.rstrip(".") or "config")
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from e
    return obj


def to_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def dump_yaml(obj: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(to_dict(obj), sort_keys=False))
    return path


# --- layering ------------------------------------------------------------------------------
def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        nxt = node.get(k)
        if not isinstance(nxt, dict):
            nxt = {}
            node[k] = nxt
        node = nxt
    node[keys[-1]] = value


def _read_yaml(path: Path) -> dict:
    try:
        data = load_yaml(read_text(path), str(path)) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    except ValueError as e:  # alias bomb, duplicate key, not UTF-8
        raise ConfigError(str(e)) from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
    return data


def group_choices(config_dir: Path, group: str) -> list[str]:
    d = config_dir / group
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_config(
    cls: type[T],
    overrides: list[str] | None = None,
    config_dir: str | Path | None = None,
    files: list[str | Path] | None = None,
    groups: dict[str, Callable[[str], dict | None]] | None = None,
    defaults: dict[str, str] | None = None,
) -> T:
    """Defaults <- `defaults` selections <- YAML `files` <- `group=name` selections <-
    `a.b=c` overrides.

    A selection reads `config_dir/group/name.yaml`; `groups` maps a section to a
    function `name -> section values` (None: unknown; it may raise its own ConfigError)
    for sections whose choices are registered in code or by plug-ins (`algo=NAME`,
    `env=NAME`). `defaults` are selections applied under everything else (`{"env":
    "maze"}`: the demo's env; the caller leaves one out when the user chose that section).
    A group's `_root_:` mapping sets keys of other sections (an env file choosing the agent
    settings that suit it, for example)."""
    config_dir = Path(config_dir) if config_dir else None
    sections = {
        f.name
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(typing.get_type_hints(cls)[f.name])
    }

    def select(data: dict, key: str, text: str) -> dict:
        if key in (groups or {}):
            group = groups[key](text)
            if group is None:
                raise _unknown_key_value(cls, key, text)
        else:
            group = _group_file(config_dir, key, text)
        group = dict(group)
        root = group.pop("_root_", None) or {}
        return _deep_merge(_deep_merge(data, root), {key: group})

    data: dict[str, Any] = {}
    for key, text in (defaults or {}).items():
        data = select(data, key, text)
    for f in files or []:
        data = _deep_merge(data, _read_yaml(Path(f)))
    dotted: list[tuple[str, Any]] = []
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(
                f"override {item!r} is not of the form key=value (e.g. trainer.total_steps=10)"
            )
        key, text = item.split("=", 1)
        key = key.strip()
        if "." not in key and (key in (groups or {}) or (key in sections and config_dir)):
            data = select(data, key, text)
        else:
            dotted.append((key, _parse_value(text)))
    for key, value in dotted:
        _seed_dict_default(cls, data, key)
        _set_dotted(data, key, value)
    return from_dict(cls, data)


def _group_file(config_dir: Path, key: str, name: str) -> dict:
    """`key=name` read from `config_dir/key/name.yaml`."""
    path = config_dir / key / f"{name}.yaml"
    if not path.exists():
        choices = group_choices(config_dir, key)
        close = difflib.get_close_matches(name, choices, n=1)
        hint = f" Did you mean {key}={close[0]}?" if close else ""
        raise ConfigError(f"{key}={name!r}: no file {path}; choose one of {choices}.{hint}")
    return _read_yaml(path)


def _unknown_key_value(cls: type, section: str, name: str) -> ConfigError:
    """`section=name` named nothing: the section's `name` field check says what exists."""
    tp = typing.get_type_hints(cls)[section]
    meta = {f.name: f.metadata for f in dataclasses.fields(tp)}.get("name", {})
    known = allowed_names(meta) or []
    hint = did_you_mean(name, known)
    return ConfigError(f"{section}={name!r} is not registered; choose one of {known}.{hint}")


def _seed_dict_default(cls: type, data: dict, dotted: str) -> None:
    """`reward.sources.format=0.5` adds one entry to the dict field `reward.sources`:
    copy the field's default in first, so the override merges instead of replacing."""
    node, tp = data, cls
    for k in dotted.split(".")[:-1]:
        if not dataclasses.is_dataclass(tp):
            return
        f = {f.name: f for f in dataclasses.fields(tp)}.get(k)
        if f is None:
            return
        ftp = typing.get_type_hints(tp)[k]
        if get_origin(ftp) is dict:
            if k not in node and f.default_factory is not dataclasses.MISSING:
                node[k] = dict(f.default_factory())
            return
        node = node.setdefault(k, {}) if isinstance(node.get(k, {}), dict) else {}
        tp = ftp
