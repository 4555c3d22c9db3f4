"""A packaged env (its dependency only in its own venv) can be trained and evaluated:
evaluation, `arborl rollout` and `arborl eval` build their pools in the pool mode, never
in-process (issue 19, review defect 3: each crashed with "no env registered")."""

import pytest

from arborl.cli.main import main
from arborl.data import read_trajectories
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from tests.envs._pkg import *  # noqa: F403
from tests.envs._pkg import COUNTER_ID

pytestmark = pytest.mark.slow  # the package venv is built once per session (~1 min)


def test_rollout_and_eval_of_a_package_env_use_its_isolation(counter_home, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    code = main(["rollout", "--policy", "random", "--env", COUNTER_ID, "--num-episodes", "2",
                 "--max-turns", "3", "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0
    trajs = read_trajectories(out)
    assert len(trajs) == 2 and all(t.num_steps == 3 for t in trajs)
    assert all(t.meta["truncation_reason"] == "max_turns" for t in trajs)
    code = main(["eval", "--policy", "random", "--env", COUNTER_ID, "--num-episodes", "2",
                 "--max-turns", "3", "--no-baselines"])  # fmt: skip
    assert code == 0 and COUNTER_ID in capsys.readouterr().out


def test_training_on_a_package_env_in_subprocess_mode_evaluates_there_too(counter_home, tmp_path):
    cfg = load_train_config([
        f"env.id={COUNTER_ID}", "env.kwargs={}", "env.pool_mode=subprocess", "sft.enabled=false",
        "model.name_or_path=tiny-0.1m", "rollout.num_tasks=2", "rollout.group_size=2",
        "rollout.max_turns=2", "rollout.max_new_tokens=4", "eval.num_episodes=2", "eval.every=0",
        "trainer.total_steps=1", "trainer.progress=false", "trainer.plots=false",
        f"trainer.output_dir={tmp_path}", "trainer.name=pkg",
    ])  # fmt: skip
    summary = RLTrainer(cfg).fit()
    assert summary["steps"] == 1
    assert summary["before"]["episodes"] == summary["after"]["episodes"] == 2.0
    assert summary["after"]["env_errors"] == 0.0
