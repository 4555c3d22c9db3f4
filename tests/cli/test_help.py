"""Every `arborl` command and subcommand has --help, and every flag a help string."""

import argparse
import importlib.util
from pathlib import Path

import pytest

from arborl.cli.main import COMMANDS, build_parser


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(parser, name):
    yield name, parser
    for sub, p in _subparsers(parser).items():
        yield from _walk(p, f"{name} {sub}")


ALL = list(_walk(build_parser(), "arborl"))


def test_every_listed_command_is_built():
    assert set(_subparsers(build_parser())) == {name for name, _ in COMMANDS}


@pytest.mark.parametrize("name, parser", ALL, ids=[n for n, _ in ALL])
def test_help_and_flag_docs(name, parser, capsys):
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--help"])
    assert e.value.code == 0
    assert "usage:" in capsys.readouterr().out
    undocumented = [
        a.option_strings or [a.dest]
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction) and not a.help
    ]
    assert not undocumented, f"{name}: flags without a help string: {undocumented}"


def test_cli_reference_is_current():
    path = Path(__file__).resolve().parents[2] / "tools" / "gen_cli_docs.py"
    spec = importlib.util.spec_from_file_location("gen_cli_docs", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.DOC.read_text() == gen.render(), "run python tools/gen_cli_docs.py"
