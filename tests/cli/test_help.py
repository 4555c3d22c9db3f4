"""Every `arborl` command and subcommand has --help, every flag a help string, and --help
answers without importing torch, transformers or numpy (checked on `sys.modules` in a
fresh interpreter per command, not on timing: `bench/cli_help.py` times them)."""

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from arborl.cli import names
from arborl.cli.main import COMMANDS, build_parser, command_of


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _children(parser):
    action = _subparsers(parser)
    return dict(action.choices) if action else {}


def _walk(parser, name):
    yield name, parser
    for sub, p in _children(parser).items():
        yield from _walk(p, f"{name} {sub}")


ALL = list(_walk(build_parser(), "arborl"))


def test_every_listed_command_is_built():
    assert set(_children(build_parser())) == {name for name, _, _ in COMMANDS}


def test_listed_help_is_what_each_command_registers():
    action = _subparsers(build_parser())
    registered = {a.dest: a.help for a in action._choices_actions}
    assert registered == {name: help_ for name, _, help_ in COMMANDS}


def test_a_command_line_builds_only_its_command():
    parser = build_parser(command_of(["--version", "env", "list"]))
    children = _children(parser)
    assert _children(children["env"])  # the real env parser, with its subcommands
    assert not _children(children["rm"]) and not children["train"]._actions  # stubs


def test_choice_names_match_the_library():
    from arborl.envs import SPLITS
    from arborl.envs.packages.manifest import MODES

    assert names.SPLITS == SPLITS and names.POOL_MODES == MODES


@pytest.mark.parametrize("name, parser", ALL, ids=[n for n, _ in ALL])
def test_help_and_flag_docs(name, parser, capsys):
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    # argparse %-formats help strings but not descriptions: '%%' there shows literally
    assert "usage:" in out and "%%" not in out, f"{name} --help shows a literal '%%'"
    undocumented = [
        a.option_strings or [a.dest]
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction) and not a.help
    ]
    assert not undocumented, f"{name}: flags without a help string: {undocumented}"


HEAVY = ("torch", "transformers", "numpy", "gymnasium", "pyarrow", "fastapi", "datasets")
PROBE = """
import contextlib, io, json, sys
from arborl.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "usage": "usage:" in out.getvalue(),
                  "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_help_of_every_command_imports_nothing_heavy():
    """One interpreter for the whole walk would share imports between commands, so each
    `arborl ... --help` runs in its own (in one batch: 20-odd interpreter starts)."""
    root = Path(__file__).resolve().parents[2]
    failures = []
    for name, _ in ALL:
        argv = [*name.split()[1:], "--help"]
        out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                             text=True, cwd=root, timeout=60)  # fmt: skip
        assert out.returncode == 0, f"{name} --help: {out.stderr[-2000:]}"
        result = json.loads(out.stdout.strip().splitlines()[-1])
        heavy = sorted(set(result["modules"]) & set(HEAVY))
        if result["code"] != 0 or not result["usage"] or heavy:
            failures.append(f"{name} --help: exit {result['code']}, imported {heavy}")
    assert not failures, "\n".join(failures)


def test_cli_reference_is_current():
    path = Path(__file__).resolve().parents[2] / "tools" / "gen_cli_docs.py"
    spec = importlib.util.spec_from_file_location("gen_cli_docs", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.DOC.read_text() == gen.render(), "run python tools/gen_cli_docs.py"
