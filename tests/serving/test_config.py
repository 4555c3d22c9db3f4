"""The three server commands take their shared flags from `ServerConfig` (and `arborl
serve --record` its session limits from `GatewayLimits`): one declaration, same names and
defaults as before, the field's docstring as the help."""

import argparse
import dataclasses

import pytest

from arborl.cli.main import build_parser
from arborl.config import field_docs
from arborl.config.flags import flag_help, read_flags
from arborl.serving.config import GatewayLimits, ServerConfig


def _command(*words: str) -> argparse.ArgumentParser:
    parser = build_parser(words[0])
    for word in words:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


def _actions(parser) -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings}


# command, its port, the ServerConfig fields it takes, their flags where renamed
SERVERS = [
    (("serve",), 8000, ("host", "port", "token", "token_file", "max_request_s"),
     {"token": "--api-key", "token_file": "--api-key-file"}),
    (("rm", "serve"), 8600, ("host", "port", "token", "token_file", "max_request_s"), {}),
    (("env", "serve"), 0, ("host", "port", "token"), {}),
]  # fmt: skip


@pytest.mark.parametrize(("words", "port", "fields", "renamed"), SERVERS)
def test_each_server_command_takes_its_flags_from_server_config(words, port, fields, renamed):
    acts = _actions(_command(*words))
    defaults = ServerConfig(port=port)
    for name in fields:
        act = acts[renamed.get(name, "--" + name.replace("_", "-"))]
        assert act.dest == act.option_strings[0][2:].replace("-", "_")
        assert act.default == getattr(defaults, name)
        assert act.help == flag_help(ServerConfig, name, getattr(defaults, name))
        assert act.help.startswith(" ".join(field_docs(ServerConfig)[name].split())[:40])
    assert acts["--port"].type is int and acts["--host"].default == "127.0.0.1"
    if "max_request_s" in fields:
        assert (acts["--max-request-s"].type, acts["--max-request-s"].default) == (float, 300.0)


@pytest.mark.parametrize(("words", "port", "fields", "renamed"), SERVERS)
def test_a_server_command_line_reads_back_into_server_config(words, port, fields, renamed):
    line = ["--host", "0.0.0.0", "--port", "9"]
    args = _command(*words).parse_args([*line, "x"])
    config = ServerConfig(port=port)
    assert read_flags(config, args, rename={k: v[2:] for k, v in renamed.items()}) == (
        dataclasses.replace(config, host="0.0.0.0", port=9)
    )


def test_serve_record_limits_are_the_gateway_limits_fields():
    acts = _actions(_command("serve"))
    for f in dataclasses.fields(GatewayLimits):
        act = acts["--" + f.name.replace("_", "-")]
        assert (act.dest, act.default, act.type) == (f.name, f.default, type(f.default))
        assert act.help == flag_help(GatewayLimits, f.name, f.default)
