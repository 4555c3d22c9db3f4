"""Wilson interval against hand-computed values, and trajectory records of a rollout."""

import pytest

from arborl.data import read_trajectories, write_trajectories
from arborl.rollout import OraclePolicy, RolloutConfig, run_episodes_with_policy, wilson_interval


def test_wilson_hand_computed():
    # k=5, n=10, z=1.96: denom = 1 + 3.8416/10 = 1.38416, centre = (0.5 + 0.19208)/denom = 0.5,
    # half = 1.96 * sqrt(0.025 + 0.009604) / denom = 0.36460 / 1.38416 = 0.26341.
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.5 - 0.26341, abs=1e-4)
    assert high == pytest.approx(0.5 + 0.26341, abs=1e-4)
    # k=0, n=10: centre = half = 0.19208 / 1.38416 = 0.13877, so (0, 0.27754).
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27754), abs=1e-4)
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="k=3, n=2"):
        wilson_interval(3, 2)


def test_trajectories_round_trip(tmp_path):
    res = run_episodes_with_policy(
        OraclePolicy(), "arborl/Maze-v0", [1, 2], RolloutConfig(group_size=2)
    )
    path = write_trajectories(tmp_path / "t.jsonl", res.trajectories)
    back = read_trajectories(path)
    assert [t.to_dict() for t in back] == [t.to_dict() for t in res.trajectories]
    t = back[0]
    assert t.won and t.steps[-1].terminated and t.meta["group_id"] == 0
    assert isinstance(t.steps[0].info["anchor"], list)  # tuples stored as JSON lists
    assert res.stats["mean_turns"] == pytest.approx(sum(x.num_steps for x in back) / 4)
