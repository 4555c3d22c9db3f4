"""The comparison's numbers (arborl.report.stats, arborl.report.compare) against values
worked by hand in the comments, and the comparison of plain run folders in the report."""

import json
import math

import pytest

from arborl.report import load_run, write_report
from arborl.report.compare import (
    CELL_FILE,
    arm_gains,
    compare_runs,
    format_comparison,
    label_runs,
    paired_differences,
    train_windows,
)
from arborl.report.stats import mean_interval, t_two_sided


def test_t_points_match_the_closed_forms_and_the_tables():
    # df=1 is Cauchy: t = tan(pi * (0.975 - 0.5)) = 12.7062; df=2 has t = (2p - 1) /
    # sqrt(2 p (1 - p)) at p = 0.975: 0.95 / sqrt(0.04875) = 4.30265. Tables: 2.7764 (df 4),
    # 2.0423 (df 30); the normal's 1.95996 is the limit.
    assert t_two_sided(0.95, 1) == pytest.approx(math.tan(math.pi * 0.475), abs=1e-9)
    assert t_two_sided(0.95, 2) == pytest.approx(0.95 / math.sqrt(0.04875), abs=1e-9)
    assert t_two_sided(0.95, 4) == pytest.approx(2.7764, abs=1e-4)
    assert t_two_sided(0.95, 30) == pytest.approx(2.0423, abs=1e-4)
    assert t_two_sided(0.95, 5000) == pytest.approx(1.95996, abs=1e-3)


def test_mean_interval_by_hand():
    # 0.1, 0.2, 0.3: mean 0.2, sd 0.1 (n - 1), se 0.1 / sqrt(3) = 0.0577350;
    # half = 4.30265 * 0.0577350 = 0.248414 -> [-0.048414, 0.448414]
    mean, lo, hi = mean_interval([0.1, 0.2, 0.3])
    assert (mean, lo, hi) == pytest.approx((0.2, -0.048414, 0.448414), abs=1e-6)
    one = mean_interval([0.4])
    assert one[0] == 0.4 and math.isnan(one[1]) and math.isnan(one[2])


def _row(arm, seed, before, after, start="sft-s", eval_="e"):
    return {
        "arm": arm,
        "seed": seed,
        "before": {"success": before},
        "after": {"success": after},
        "start": f"{start}{seed}",
        "eval": eval_,
    }


def test_gains_and_paired_differences_by_hand():
    # seed:          0     1     2
    # start:       0.40  0.50  0.30   (both arms of a seed start from the same policy)
    # a after RL:  0.50  0.55  0.45 -> gains 0.10 0.05 0.15: mean 0.10, sd 0.05
    # b after RL:  0.45  0.55  0.35 -> a - b  0.05 0.00 0.10: mean 0.05, sd 0.05
    # half = 4.30265 * 0.05 / sqrt(3) = 0.124207
    rows = [_row("a", s, b0, a1) for s, b0, a1 in ((0, 0.4, 0.5), (1, 0.5, 0.55), (2, 0.3, 0.45))]
    rows += [_row("b", s, b0, b1) for s, b0, b1 in ((0, 0.4, 0.45), (1, 0.5, 0.55), (2, 0.3, 0.35))]
    a, b = arm_gains(rows, ["a", "b"])
    assert a["gains"] == pytest.approx([0.10, 0.05, 0.15])
    assert (a["gain"], a["gain_lo"], a["gain_hi"]) == pytest.approx(
        (0.10, 0.10 - 0.124207, 0.10 + 0.124207), abs=1e-6
    )
    assert a["start_success"] == pytest.approx(0.4) and a["seeds_gained"] == 3
    assert b["gain"] == pytest.approx(0.05)
    (d,) = paired_differences(rows, [("a", "b")])
    assert d["seeds"] == [0, 1, 2] and d["diffs"] == pytest.approx([0.05, 0.0, 0.10])
    assert (d["diff"], d["diff_lo"], d["diff_hi"]) == pytest.approx(
        (0.05, 0.05 - 0.124207, 0.05 + 0.124207), abs=1e-6
    )
    assert d["seeds_ahead"] == 2  # seed 1 is a tie: not ahead
    # a seed whose two runs started elsewhere, or were evaluated elsewhere, is not paired
    rows += [_row("a", 3, 0.2, 0.9), _row("b", 3, 0.2, 0.1, start="other")]
    rows += [_row("a", 4, 0.2, 0.9), _row("b", 4, 0.2, 0.1, eval_="other tasks")]
    (d,) = paired_differences(rows, [("a", "b")])
    assert d["seeds"] == [0, 1, 2]
    assert d["left_out"] == [
        {"seed": 3, "reason": "different start"},
        {"seed": 4, "reason": "different eval"},
    ]


def test_plain_runs_are_labelled_by_their_differences_and_compared_in_the_report(
    tmp_path, run_factory, capsys
):
    from arborl.cli.main import main

    a = run_factory(tmp_path, "a", lr=1e-3)
    b = run_factory(tmp_path, "b", lr=3e-4)
    runs = [load_run(a), load_run(b)]
    assert label_runs(runs) == [("algo.lr=0.001", 0), ("algo.lr=0.0003", 0)]
    result = compare_runs(runs)
    assert [x["arm"] for x in result["arms"]] == ["algo.lr=0.001", "algo.lr=0.0003"]
    (pair,) = result["paired"]
    assert (pair["a"], pair["b"], pair["seeds"]) == ("algo.lr=0.0003", "algo.lr=0.001", [0])
    # a run `arborl compare` made names its arm and seed itself
    (b / CELL_FILE).write_text(json.dumps({"arm": "slow", "seed": 4}))
    assert label_runs([load_run(a), load_run(b)])[1] == ("slow", 4)
    page = write_report([a, b], tmp_path / "x.html", baselines=False).read_text()
    assert "Comparison of arms" in page and "gain over the start" in page
    assert (
        main(["report", str(a), str(b), "--out", str(tmp_path / "y.html"), "--no-baselines"]) == 0
    )
    assert "paired differences after RL" in capsys.readouterr().out
    assert "| a - b |" in format_comparison(result)


def test_paired_differences_reproduce_the_committed_5_seed_maze_table():
    """docs/BENCHMARKS.md's Maze rows (bench/learning.py before the grid moved into the
    library) come out of `paired_differences`, now with their t intervals."""
    from pathlib import Path

    path = Path(__file__).parents[2] / "bench/results/learning_maze_5seeds_2026-12-02.json"
    runs = json.loads(path.read_text())["runs"]
    rows = [{"arm": r["algo"], "seed": r["seed"], "success": r["success"]} for r in runs]
    pairs = paired_differences(rows, [("gigpo", "grpo"), ("grpo", "ppo"), ("gigpo", "ppo")])
    gg = pairs[0]
    assert gg["seeds"] == [0, 1, 2, 3, 4] and gg["seeds_ahead"] == 1
    assert gg["diffs"] == pytest.approx([-0.020, -0.020, 0.020, -0.015, -0.005])
    # mean -0.008, sd 0.016808 (n - 1); half = 2.7764 * 0.016808 / sqrt(5) = 0.020870
    assert (gg["diff"], gg["diff_lo"], gg["diff_hi"]) == pytest.approx(
        (-0.008, -0.028870, 0.012870), abs=2e-5
    )
    assert pairs[1]["seeds_ahead"] == 4 and pairs[1]["diff"] == pytest.approx(0.018)


def test_train_windows_are_the_first_middle_and_last_ten_steps():
    # steps 0..29 with success = step: first 0..9 (4.5), middle 10..19 (14.5), last 20..29
    assert train_windows([float(i) for i in range(30)]) == {
        "first": 4.5,
        "middle": 14.5,
        "last": 24.5,
    }


def test_a_one_arm_grid_says_there_is_nothing_to_pair():
    rows = [_row("a", s, b0, a1) for s, b0, a1 in ((0, 0.4, 0.5), (1, 0.5, 0.55))]
    result = {"level": 0.95, "arms": arm_gains(rows, ["a"]), "paired": [], "runs": [], "curves": {}}
    text = format_comparison(result)
    assert "| (one arm: nothing to pair) | - | - | - |" in text
    assert "| arm | seeds | before RL | after RL | gain [95% CI] |" in text
    assert "| a | 2 | 0.450 | 0.525 | +0.075 " in text
