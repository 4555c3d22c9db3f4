"""The `arborl` command: one entry point, one module per subcommand.

Each subcommand lives in `arborl/cli/<name>_cmd.py` and exposes
`register(subparsers)`, which adds its parser and sets `func` (called with the parsed
args, returning an exit code). Modules are imported only when listed here, so a broken
optional dependency of one command never breaks the others' `--help`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from arborl import __version__

# (subcommand module, one-line help) in the order `arborl --help` shows them.
COMMANDS: list[tuple[str, str]] = [
    ("train", "arborl.cli.train_cmd"),
    ("sft", "arborl.cli.sft_cmd"),
    ("rollout", "arborl.cli.rollout_cmd"),
    ("eval", "arborl.cli.eval_cmd"),
    ("serve", "arborl.cli.serve_cmd"),
    ("search", "arborl.cli.search_cmd"),
    ("rm", "arborl.cli.rm_cmd"),
    ("curate", "arborl.cli.curate_cmd"),
    ("env", "arborl.cli.env_cmd"),
    ("report", "arborl.cli.report_cmd"),
    ("config", "arborl.cli.config_cmd"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arborl",
        description="Train language-model agents with RL and branching search.",
    )
    parser.add_argument("--version", action="version", version=f"arborl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module in COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("arborl.cli"):
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
