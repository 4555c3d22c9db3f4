"""`paired_gain`: the before/after change on the same tasks with a paired interval."""

import math

import pytest

from arborl.train.evaluate import format_gain, paired_gain, summarize_eval


def test_paired_gain_counts_and_interval():
    before = {s: float(s < 40) for s in range(100)}  # 40 won
    after = {s: float(s < 40 or 40 <= s < 60) for s in range(100)}  # 20 more won, none lost
    after[0] = 0.0  # one lost that was won
    g = paired_gain(before, after)
    assert g["tasks"] == 100 and g["improved"] == 20 and g["worsened"] == 1
    assert g["gain"] == pytest.approx(0.19)
    # the per-task differences are 20 x +1, 1 x -1, 79 x 0
    sd = math.sqrt((20 * (1 - 0.19) ** 2 + (-1 - 0.19) ** 2 + 79 * 0.19**2) / 99)
    assert g["gain_lo"] == pytest.approx(0.19 - 1.96 * sd / 10)
    assert g["gain_hi"] == pytest.approx(0.19 + 1.96 * sd / 10)
    assert g["gain_lo"] > 0.1  # narrower than two separate Wilson intervals would allow
    assert "+0.190" in format_gain("gain", g) and "20 tasks won that were lost" in format_gain(
        "gain", g
    )


def test_paired_gain_uses_only_shared_tasks_and_needs_two():
    assert paired_gain({1: 1.0}, {1: 0.0}) is None
    g = paired_gain({1: 0.0, 2: 0.0, 3: 1.0}, {2: 1.0, 3: 1.0, 4: 0.0})
    assert g["tasks"] == 2 and g["gain"] == 0.5 and g["improved"] == 1


def test_no_change_has_a_zero_width_interval():
    same = {s: float(s % 3 == 0) for s in range(30)}
    g = paired_gain(same, dict(same))
    assert g["gain"] == g["gain_lo"] == g["gain_hi"] == 0.0


def test_summarize_eval_merges_the_outcomes_of_every_share():
    shares = [
        {"episodes": 2.0, "wins": 1.0, "outcomes": {5: 1.0, 6: 0.0}},
        {"episodes": 1.0, "wins": 1.0, "outcomes": {7: 1.0}},
    ]
    out = summarize_eval(shares)
    assert out["outcomes"] == {5: 1.0, 6: 0.0, 7: 1.0} and out["success"] == pytest.approx(2 / 3)
