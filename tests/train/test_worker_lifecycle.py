"""A run's env worker processes start once (not per RL step, demo collection or
evaluation), are shared by all of them, and are stopped at the end of the run and when
it fails. Starts are counted by wrapping `subprocess.Popen` in the subprocess transport
(per test process: safe under pytest-xdist)."""

from __future__ import annotations

import pytest

from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.runlog import read_metrics
from tests.envs.test_poolset import exited

TOY = [
    "model.name_or_path=tiny-0.1m", "sft.num_demos=4", "sft.steps=2", "sft.batch_size=4",
    "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=2",
    "rollout.max_new_tokens=4", "eval.num_episodes=3", "eval.every=1", "eval.every_episodes=2",
    "env.pool_mode=subprocess", "env.num_workers=2", "trainer.total_steps=3",
    "trainer.progress=false", "trainer.plots=false", "trainer.report=false",
]  # fmt: skip


def test_workers_start_once_per_run_and_stop_at_its_end(tmp_path, starts):
    cfg = load_train_config([*TOY, f"trainer.output_dir={tmp_path}", "trainer.name=r"])
    trainer = RLTrainer(cfg)
    summary = trainer.fit()  # SFT demos, eval before, 3 steps with 2 evals, final eval
    recs = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert summary["steps"] == 3 and sum("eval/success" in r for r in recs) == 3
    assert summary["after"]["env_errors"] == 0.0
    assert len(starts) == 2 and trainer.engine.pools.workers.num_starts == 2
    assert trainer.engine.pools.closed and all(exited(pid) for pid in starts)


def test_a_failing_run_stops_its_workers(tmp_path, starts):
    cfg = load_train_config([*TOY, "sft.enabled=false", f"trainer.output_dir={tmp_path}",
                             "trainer.name=f", "eval.every=0"])  # fmt: skip
    trainer = RLTrainer(cfg)

    def fail(t):
        raise RuntimeError("boom")

    trainer.callbacks.append(fail)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit()
    assert len(starts) == 2 and all(exited(pid) for pid in starts)


def test_arborl_eval_and_rollout_chunks_share_their_workers(starts):
    """`collect_episodes` (`arborl eval`, `arborl rollout`) runs all its chunks in one
    `PoolSet`: 3 chunks of 2 episodes start at most 2 workers, not 2 per chunk."""
    from arborl.envs.poolset import default_num_workers
    from arborl.rollout import RolloutConfig, collect_episodes, make_policy

    cfg = RolloutConfig(max_turns=3)
    res = collect_episodes(make_policy("random", cfg, seed=0), "arborl/Maze-v0", 6, cfg,
                           chunk_episodes=2, pool_mode="subprocess")  # fmt: skip
    assert len(res.trajectories) == 6 and res.stats["env_errors"] == 0.0
    assert len(starts) == min(2, default_num_workers()) and all(exited(p) for p in starts)
