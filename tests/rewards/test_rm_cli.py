"""`arborl rm data|train|eval` end to end at toy size, and `arborl train` with the `rm` source."""

from __future__ import annotations

import json
import math

import pytest

from arborl.cli.main import main
from arborl.data import write_trajectories
from arborl.rewards import REWARD_SOURCES
from arborl.rewards.rm_data import MixedPolicy, read_pairs, read_step_labels
from arborl.rollout import RolloutConfig, run_episodes_with_policy
from arborl.train.runlog import read_metrics


@pytest.mark.parametrize("sub", [[], ["data"], ["train"], ["eval"], ["serve"]])
def test_every_rm_command_has_help(sub, capsys):
    with pytest.raises(SystemExit) as e:
        main(["rm", *sub, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: arborl rm" in out
    if sub == ["train"]:
        assert "--margin-coef" in out and "Bradley-Terry margin" in out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder of Maze trajectories with mixed outcomes (4 tasks x 4 episodes)."""
    d = tmp_path_factory.mktemp("trajs")
    cfg = RolloutConfig(group_size=4, seed=0)
    res = run_episodes_with_policy(
        MixedPolicy(0.3, seed=0), "arborl/Maze-v0", [1, 2, 3, 4], cfg, "train",
        {"short_actions": True},
    )  # fmt: skip
    write_trajectories(d / "a.jsonl", res.trajectories[:8])
    write_trajectories(d / "sub" / "b.jsonl", res.trajectories[8:])
    return d


def test_data_train_eval_then_rl_with_the_rm_reward(folder, tmp_path, capsys):
    pairs, steps = tmp_path / "pairs.jsonl", tmp_path / "steps.jsonl"
    siblings = tmp_path / "siblings.jsonl"
    code = main(["rm", "data", str(folder), "--pairs", str(pairs), "--steps", str(steps),
                 "--sibling-steps", str(siblings),
                 "--policy", "mixed:0.5", "--num-rollouts", "2", "--max-trajectories", "3",
                 "--env-kwargs", '{"short_actions": true}'])  # fmt: skip
    assert code == 0
    assert "read 16 trajectories" in capsys.readouterr().out
    assert len(read_pairs(pairs)) > 0 and len(read_step_labels(steps)) == 3
    sib = read_step_labels(siblings)
    assert len(sib) >= 3 * 3 and all(math.isnan(r.labels[0]) for r in sib if len(r.labels) > 1)
    for kind, data in (("orm", pairs), ("prm", f"{steps},{siblings}")):
        code = main(["rm", "train", "--kind", kind, "--data", str(data), "--eval-data", str(data),
                     "--steps", "3", "--max-length", "64", "--out", str(tmp_path / kind)])  # fmt: skip
        assert code == 0
        summary = json.loads((tmp_path / kind / "summary.json").read_text())
        assert summary["kind"] == kind and summary["steps"] == 3
        assert len(read_metrics(tmp_path / kind / "metrics.jsonl")) == 3
    out = tmp_path / "eval"
    assert main(["rm", "eval", str(tmp_path / "prm" / "model"), "--pairs", str(pairs),
                 "--steps", str(steps), "--out", str(out)]) == 0  # fmt: skip
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 <= metrics["pairwise_accuracy"] <= 1 and 0 <= metrics["step_accuracy"] <= 1
    assert (out / "calibration.png").stat().st_size > 1000
    # The trained PRM as one more reward source of `arborl train`.
    try:
        code = main(["train", "model.name_or_path=tiny-0.1m", "sft.enabled=false",
                     "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=4",
                     "eval.num_episodes=2", "trainer.total_steps=1", "trainer.progress=false",
                     "trainer.plots=false", f"trainer.output_dir={tmp_path}", "trainer.name=rl",
                     "reward.sources.rm=0.5", f"reward.rm_model={tmp_path / 'prm' / 'model'}"])  # fmt: skip
    finally:
        REWARD_SOURCES.pop("rm", None)  # the trainer registered it globally
    assert code == 0
    recs = [r for r in read_metrics(tmp_path / "rl" / "metrics.jsonl") if "reward/rm" in r]
    assert recs and recs[0]["reward/rm"] != 0.0


def test_bad_inputs_fail_clearly(tmp_path, capsys):
    assert main(["rm", "data", str(tmp_path)]) == 2  # neither --pairs nor --steps
    with pytest.raises(SystemExit, match="neither a trajectory file nor a folder"):
        main(["rm", "data", str(tmp_path / "nope"), "--pairs", str(tmp_path / "p.jsonl")])
    assert main(["rm", "train", "--kind", "orm"]) == 2
    assert "data is empty" in capsys.readouterr().err
