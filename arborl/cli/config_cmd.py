"""`arborl config`: show the resolved training config or document every field."""

from __future__ import annotations

import argparse
import dataclasses
import sys

import yaml


def _docs(args: argparse.Namespace) -> int:
    from arborl.config import allowed_names, iter_fields
    from arborl.train.config import CONFIG_DIR, TrainConfig
    from arborl.train.env_configs import env_groups

    for path, f, tp, doc in iter_fields(TrainConfig):
        if dataclasses.is_dataclass(tp):
            print(f"\n[{path}]  {doc}")
            if path == "env":  # plug-in packages' groups included
                print(f"  env=NAME groups: {', '.join(env_groups(CONFIG_DIR).names())}")
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        print(f"  {path} = {default!r}\n      {doc}")
        if f.metadata.get("registry"):  # what is registered now, plug-ins included
            print(f"      registered: {', '.join(allowed_names(f.metadata))}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError, to_dict
    from arborl.train.config import load_train_config

    try:
        cfg = load_train_config(args.overrides, files=args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the resolved training config or its field docs")
    s = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    d = s.add_parser("docs", help="list every config field with its default and docstring")
    d.set_defaults(func=_docs)
    sh = s.add_parser("show", help="print the config that `arborl train` would run with")
    sh.add_argument("overrides", nargs="*", help="key=value overrides, e.g. algo=grpo")
    sh.add_argument("--config", action="append", help="a YAML config file (repeatable)")
    sh.set_defaults(func=_show)
