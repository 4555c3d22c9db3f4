"""Regenerate docs/cli.md from the `arborl` parser's own --help text.

python tools/gen_cli_docs.py            # rewrites docs/cli.md
python tools/gen_cli_docs.py --check    # exit 1 when docs/cli.md is out of date
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from arborl.cli.main import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HEADER = """# The `arborl` command

Every subcommand has `--help`; this page is generated from it
(`python tools/gen_cli_docs.py`). Training keys are documented by `arborl config docs`.
"""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps subcommands in a private action
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def sections(parser: argparse.ArgumentParser, name: str) -> list[str]:
    out = [f"## {name}\n\n```\n{parser.format_help().rstrip()}\n```\n"]
    for sub, p in _subparsers(parser).items():
        out += sections(p, f"{name} {sub}")
    return out


def render() -> str:
    os.environ["COLUMNS"] = "88"  # the same wrapping on every machine
    root = build_parser()
    parts = [HEADER]
    for name, p in _subparsers(root).items():
        parts += sections(p, f"arborl {name}")
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check that docs/cli.md is current")
    args = ap.parse_args()
    text = render()
    if args.check:
        if DOC.read_text() != text:
            print(f"{DOC} is out of date: run python tools/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
