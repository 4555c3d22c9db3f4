"""Flags generated from a dataclass (`arborl.config.flags`): types, Literal choices,
defaults, help from the field docstrings, and the round trip back to the dataclass."""

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from arborl.config import ConfigError
from arborl.config.flags import add_flags, read_flags


@dataclass
class Knobs:
    """A section for these tests."""

    max_rows: int = field(default=256, metadata={"min": 1})
    """Largest prompts x n in one request."""
    rate: float = 0.5
    """A rate, in 100% of nothing."""
    name: str | None = None
    """Optional name."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights dtype."""
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    """Seeds of every arm."""
    loud: bool = True
    """Print everything."""


def _parser(config=Knobs, **kw) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    add_flags(parser, config, **kw)
    return parser


def _actions(parser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def test_each_field_is_a_flag_with_its_type_choices_default_and_docstring():
    acts = _actions(_parser())
    assert list(acts) == ["max_rows", "rate", "name", "dtype", "seeds", "loud"]
    assert [acts[n].option_strings for n in ("max_rows", "loud")] == [
        ["--max-rows"],
        ["--loud", "--no-loud"],
    ]
    assert (acts["max_rows"].type, acts["rate"].type, acts["name"].type) == (int, float, str)
    assert acts["dtype"].choices == ["float32", "bfloat16"]
    assert (acts["seeds"].type, acts["seeds"].nargs) == (int, "+")
    assert [acts[n].default for n in acts] == [256, 0.5, None, "float32", [0, 1], True]
    assert acts["max_rows"].help == "Largest prompts x n in one request. (default: 256)"
    assert acts["rate"].help == "A rate, in 100%% of nothing. (default: 0.5)"  # % escaped
    assert acts["name"].help == "Optional name."
    assert acts["seeds"].help == "Seeds of every arm. (default: 0 1)"
    assert "Print everything." in _parser().format_help()


def test_an_instance_sets_the_defaults_and_only_and_rename_pick_the_flags():
    parser = _parser(Knobs(max_rows=8), only=("max_rows", "name"), rename={"name": "label"})
    acts = _actions(parser)
    assert list(acts) == ["max_rows", "label"]
    assert acts["max_rows"].default == 8 and acts["label"].option_strings == ["--label"]
    args = parser.parse_args(["--label", "x"])
    assert read_flags(Knobs(max_rows=8), args, rename={"name": "label"}) == Knobs(
        max_rows=8, name="x"
    )


def test_round_trip_to_the_dataclass():
    parser = _parser()
    assert read_flags(Knobs, parser.parse_args([])) == Knobs()
    line = "--max-rows 3 --rate 2 --name n --dtype bfloat16 --seeds 4 5 6 --no-loud"
    got = read_flags(Knobs, parser.parse_args(line.split()))
    assert got == Knobs(max_rows=3, rate=2.0, name="n", dtype="bfloat16", seeds=[4, 5, 6],
                        loud=False)  # fmt: skip


def test_layered_flags_leave_none_and_keep_the_shown_default():
    parser = _parser(layered=True)
    args = parser.parse_args(["--rate", "0.25"])
    assert (args.max_rows, args.rate, args.loud) == (None, 0.25, None)
    assert _actions(parser)["max_rows"].help.endswith("(default: 256)")
    assert read_flags(Knobs, args) == Knobs(rate=0.25)


def test_a_bad_value_fails_naming_the_field():
    parser = _parser()
    with pytest.raises(SystemExit):  # argparse: not a choice
        parser.parse_args(["--dtype", "float16"])
    with pytest.raises(ConfigError, match="max_rows=0 is below the minimum 1"):
        read_flags(Knobs, parser.parse_args(["--max-rows", "0"]))


def test_a_field_with_no_flag_shape_is_refused_by_name():
    @dataclass
    class Arms:
        arms: dict[str, list[str]] = field(default_factory=dict)

    with pytest.raises(TypeError, match="declare it by hand"):
        _parser(Arms)
