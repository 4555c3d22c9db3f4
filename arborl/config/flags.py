"""Command-line flags generated from a typed config: a setting is declared once, as a
dataclass field with its docstring, and a command that takes flags gets them from here
(STYLE rule 17), as CleanRL's `tyro.cli(Args)` does.

    add_flags(parser, ServerConfig(port=8600))   # --host, --port, --max-request-s, ...
    server = read_flags(ServerConfig(port=8600), args)

Each field becomes `--field-name` with its type (`int`, `float`, `str`; `bool` as
`--x/--no-x`; `X | None` as `X`; `list[X]` as `nargs="+"`), the choices of a `Literal`, a
default (the instance's value, or the class default) and the field's docstring as its
help. `read_flags` reads the namespace back into the dataclass through `from_dict`, so a
flag's value passes the same type, range and `validate` checks as a YAML key. Building a
parser imports no more than this package (`arborl --help` stays instant).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar, get_args, get_origin

from arborl.config.core import field_docs, from_dict, to_dict

T = TypeVar("T")


def _flag_type(tp: Any) -> tuple[Any, list | None, str | None]:
    """(argparse type, choices, nargs) of a field annotation."""
    origin = get_origin(tp)
    if origin is Literal:
        choices = list(get_args(tp))
        return type(choices[0]), choices, None
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _flag_type(args[0])
        raise TypeError(f"a flag cannot be generated for the union {tp}; declare it by hand")
    if origin in (list, tuple):
        item, _, nested = _flag_type((get_args(tp) or (str,))[0])
        if nested:
            raise TypeError(f"a flag cannot be generated for {tp}; declare it by hand")
        return item, _, "+"
    if tp in (int, float, str, bool):
        return tp, None, None
    raise TypeError(f"a flag cannot be generated for a field of type {tp}; declare it by hand")


def _defaults(config: Any) -> tuple[type, dict[str, Any]]:
    """The dataclass and its default values: an instance's, or the class defaults."""
    cls = config if isinstance(config, type) else type(config)
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"flags are generated from a dataclass, not {cls!r}")
    values = {}
    for f in dataclasses.fields(cls):
        if not isinstance(config, type):
            values[f.name] = getattr(config, f.name)
        elif f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    return cls, values


def flag_help(cls: type, name: str, default: Any = None) -> str:
    """The help of field `name`: its docstring, then its default (when it has one)."""
    text = " ".join(field_docs(cls).get(name, "").split())
    if default not in (None, "", []):
        shown = " ".join(map(str, default)) if isinstance(default, list) else default
        text += f" (default: {shown})"
    return text.replace("%", "%%")


def _dest(name: str, rename: dict[str, str] | None) -> tuple[str, str]:
    """(flag, namespace attribute) of field `name`; `rename` maps a field to a flag name."""
    flag = (rename or {}).get(name, name.replace("_", "-"))
    return "--" + flag, flag.replace("-", "_")


def add_flags(
    parser: argparse.ArgumentParser,
    config: Any,
    only: tuple[str, ...] | None = None,
    rename: dict[str, str] | None = None,
    layered: bool = False,
) -> None:
    """Add one flag per field of dataclass `config` (a class, or an instance whose values
    are the defaults) to `parser`: `only` the fields named (default: all), a field named
    in `rename` under that flag name (`{"token": "api-key"}`: `--api-key`). `layered`:
    an absent flag leaves None in the namespace (its help still shows the default), so
    the flags can be laid over a file's values."""
    cls, defaults = _defaults(config)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        flag, dest = _dest(f.name, rename)
        tp, choices, nargs = _flag_type(hints[f.name])
        default = defaults.get(f.name)
        kwargs: dict[str, Any] = {"dest": dest, "help": flag_help(cls, f.name, default)}
        kwargs["default"] = None if layered else default
        if tp is bool and nargs is None:  # argparse adds the default to a set default's help
            kwargs["help"] = flag_help(cls, f.name, default if layered else None)
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
            continue
        if choices is None:
            kwargs["metavar"] = dest.upper()
        parser.add_argument(flag, type=tp, choices=choices, nargs=nargs, **kwargs)


def given_flags(
    cls: type, args: argparse.Namespace, rename: dict[str, str] | None = None
) -> dict[str, Any]:
    """The fields of `cls` whose flag the namespace holds a value for (not None)."""
    given = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, _dest(f.name, rename)[1], None)
        if value is not None:
            given[f.name] = value
    return given


def read_flags(config: Any, args: argparse.Namespace, rename: dict[str, str] | None = None):
    """The dataclass the flags of `add_flags(parser, config, ...)` parsed into `args`:
    `config`'s values (or the class defaults) with every given flag over them, checked by
    `from_dict` (a bad value raises `ConfigError` naming the field)."""
    cls, _ = _defaults(config)
    base = {} if isinstance(config, type) else to_dict(config)
    return from_dict(cls, {**base, **given_flags(cls, args, rename)})
