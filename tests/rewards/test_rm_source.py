"""The `rm` reward source: ORM/PRM scores as rewards, in `combine_rewards`, from config."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arborl.config import ConfigError
from arborl.data.trajectory import Step, Trajectory
from arborl.rewards import REWARD_SOURCES, build_reward_fns, combine_rewards
from arborl.rewards.reward_model import RewardModel
from arborl.rewards.rm_source import RewardModelSource
from arborl.train.config import load_train_config


class TableScorer:
    """Step scores from a table keyed by the first observation (a user scorer plug-in)."""

    def __init__(self, table: dict[str, list[float]], kind: str) -> None:
        self.table, self.kind, self.calls = table, kind, 0

    def score_steps(self, trajectories, batch_size=32):
        self.calls += 1
        return [self.table[t.steps[0].observation] for t in trajectories]


def traj(name: str, n: int) -> Trajectory:
    return Trajectory(name, "e", steps=[Step(observation=name, action="u") for _ in range(n)])


def rows(trajs: list[Trajectory]) -> dict[str, np.ndarray]:
    """One row per step, episode by episode, as the trainer lays out a step batch."""
    col = np.empty(sum(t.num_steps for t in trajs), dtype=object)
    col[:] = [t for t in trajs for _ in range(t.num_steps)]
    steps = np.array([i for t in trajs for i in range(t.num_steps)])
    last = np.array([float(i == t.num_steps - 1) for t in trajs for i in range(t.num_steps)])
    return {"trajectory": col, "step_index": steps, "is_last": last, "env_reward": 0 * last}


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_orm_reward_on_the_last_row_only():
    a, b = traj("a", 2), traj("b", 1)
    scorer = TableScorer({"a": [5.0, 0.0], "b": [math.log(3)]}, "orm")
    out = RewardModelSource(scorer)(rows([a, b]))
    # a: sigmoid(0) = 0.5 on its last row; b: sigmoid(log 3) = 3/4
    assert out.tolist() == pytest.approx([0.0, 0.5, 0.75])
    assert scorer.calls == 1  # all episodes in one batched call


def test_prm_reward_is_the_change_in_predicted_success():
    a = traj("a", 3)
    # p = sigmoid(0), sigmoid(log 3), NaN (cut off: carries 0.75 forward)
    scorer = TableScorer({"a": [0.0, math.log(3), math.nan]}, "prm")
    out = RewardModelSource(scorer)(rows([a]))
    # p_{-1} = 0: rewards 0.5 - 0, 0.75 - 0.5, 0.75 - 0.75; they sum to the final p
    assert out.tolist() == pytest.approx([0.5, 0.25, 0.0])


def test_combined_with_weights_and_missing_fields_are_named():
    a = traj("a", 2)
    fields = rows([a])
    fields["env_reward"] = np.array([0.0, 1.0])
    REWARD_SOURCES["rm-test"] = RewardModelSource(TableScorer({"a": [0.0, 0.0]}, "orm"))
    try:
        total, comps = combine_rewards(fields, {"env": 1.0, "rm-test": 2.0})
    finally:
        del REWARD_SOURCES["rm-test"]
    assert total.tolist() == pytest.approx([0.0, 1.0 + 2 * 0.5])
    assert comps["rm-test"].tolist() == pytest.approx([0.0, 1.0])
    with pytest.raises(KeyError, match="step_index"):
        RewardModelSource(TableScorer({}, "orm"))({"trajectory": fields["trajectory"]})


def test_config_needs_a_model_and_configures_a_real_one(tmp_path):
    with pytest.raises(ConfigError, match="reward.rm_model"):
        load_train_config(["reward.sources.rm=0.5"])
    d = RewardModel.from_spec("tiny-0.1m", "prm", max_length=64).save_pretrained(tmp_path / "m")
    cfg = load_train_config(["reward.sources.rm=0.5", f"reward.rm_model={d}"])
    assert cfg.reward.sources == {"env": 1.0, "rm": 0.5}
    # Issue 15: the `rm` source is built per run, never registered globally.
    source = build_reward_fns(cfg.reward)["rm"]
    assert "rm" not in REWARD_SOURCES and source.kind == "prm"
    out = source(rows([traj("a", 2), traj("b", 3)]))
    assert out.shape == (5,) and np.isfinite(out).all()
    assert abs(out[:2].sum()) <= 1.0  # a PRM's rewards sum to the final p in [0, 1]
    assert "rm" not in build_reward_fns(load_train_config([]).reward)


def test_build_reward_fns_builds_a_fresh_rm_per_run(tmp_path):
    d = RewardModel.from_spec("tiny-0.1m", "orm", max_length=64).save_pretrained(tmp_path / "m")
    cfg = load_train_config(["reward.sources.rm=0.5", f"reward.rm_model={d}"])
    one, two = build_reward_fns(cfg.reward), build_reward_fns(cfg.reward)
    assert set(one) == {"env", "rm"} and one["rm"] is not two["rm"]
    assert "rm" not in REWARD_SOURCES  # nothing registered globally
    fields = rows([traj("a", 2)])
    total, comps = combine_rewards(fields, cfg.reward.sources, fns=one)
    assert comps["rm"][0] == 0.0 and 0.0 < comps["rm"][1] <= 0.5  # 0.5 * sigmoid on the last row
