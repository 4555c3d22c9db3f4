"""`arborl compare` generates its --seeds/--start/--sft/--out/--level flags from
`CompareConfig` (one declaration, the field's docstring as the help) and lays them over
a grid file's values."""

import argparse

from arborl.cli.compare_cmd import FLAG_KEYS, grid_data
from arborl.cli.main import build_parser
from arborl.config.flags import flag_help
from arborl.grid.compare import CompareConfig


def _compare() -> argparse.ArgumentParser:
    parser = build_parser("compare")
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices["compare"]


def test_the_grid_key_flags_come_from_compare_config():
    acts = {a.dest: a for a in _compare()._actions}
    defaults = CompareConfig()
    assert FLAG_KEYS == ("seeds", "start", "sft", "out", "level")
    for key in FLAG_KEYS:
        act = acts[key]
        assert act.option_strings == ["--" + key] and act.default is None  # unset: the file's
        assert act.help == flag_help(CompareConfig, key, getattr(defaults, key))
    assert (acts["seeds"].type, acts["seeds"].nargs, acts["level"].type) == (int, "+", float)
    assert acts["seeds"].help.endswith("(default: 0 1 2)")


def test_flags_replace_a_grid_files_keys_and_sft_extends_it(tmp_path):
    file = tmp_path / "grid.yaml"
    file.write_text("arms: {a: []}\nseeds: [4]\nlevel: 0.9\nsft: [sft.steps=2]\nout: o\n")
    line = ["compare", "--config", str(file), "--seeds", "1", "2", "--sft", "sft.num_demos=3"]
    data = grid_data(build_parser("compare").parse_args(line))
    assert (data["seeds"], data["level"], data["out"]) == ([1, 2], 0.9, "o")
    assert data["sft"] == ["sft.steps=2", "sft.num_demos=3"]
