"""Env faults never poison learning: episodes an env error ended are left out of the
advantage groups and the loss, counted per step as `rollout/env_errors`, and bounded by
`env.max_env_errors`; evaluation builds its pool in `env.pool_mode`."""

import pytest
import torch

from arborl.envs import EnvPool
from arborl.envs.pool import StepResult
from arborl.rollout import RolloutConfig, run_rollout
from arborl.train.advantages import compute_advantages
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer, TrainingAborted
from arborl.train.rows import drop_env_errors
from arborl.train.runlog import read_metrics


@pytest.fixture(scope="module")
def policy():
    from arborl.models import load_policy

    model, tok = load_policy("tiny-0.1m", seed=0)
    return model.eval(), tok


class FaultyPool:
    """An `EnvPool` whose envs in `fail` report a crashed worker on every step."""

    def __init__(self, inner, fail: set[int]):
        self.inner, self.fail = inner, fail

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        return self.inner[i]

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, actions):
        results, done = self.inner.step(actions)
        for i in self.fail & set(actions):
            results[i] = StepResult("", 0.0, False, False, {"env_error": "worker crashed"})
        return results, done


def test_env_error_episode_leaves_its_group_and_the_sibling_gets_no_signal(policy):
    model, tok = policy
    from arborl.generation.hf import HFBackend

    cfg = RolloutConfig(num_tasks=2, group_size=2, max_turns=3, max_new_tokens=4, seed=0)
    pool = FaultyPool(EnvPool("arborl/Maze-v0", 4, short_actions=True), fail={0})
    res = run_rollout(HFBackend(model, tok, seed=0), tok, pool, [11, 12], cfg)
    assert [t.meta["truncation_reason"] for t in res.trajectories][0] == "env_error"
    assert res.stats["env_errors"] == 1.0
    bad = res.trajectories[0].meta["traj_id"]
    batch, kept, _, errors = drop_env_errors(res.batch, res.trajectories)
    assert len(errors) == 1 and len(kept) == 3
    task = res.trajectories[0].task_id
    assert errors == [f"arborl/Maze-v0 task {task}: env error worker crashed"]
    assert bad not in set(batch.meta["traj_id"]) and bad in set(res.batch.meta["traj_id"])
    assert len(batch) == len(res.batch) - res.trajectories[0].num_steps
    # Group 0 is left with one member: (s - mean) = 0, i.e. no push either way.
    rewards = torch.ones(len(batch))
    algo = load_train_config(["algo=grpo"]).algo
    adv, _, _ = compute_advantages(batch, rewards, algo)
    sibling = torch.as_tensor(batch.meta["group_id"].astype(int) == 0)
    assert sibling.any() and torch.all(adv[sibling] == 0.0)


def test_drop_env_errors_is_a_no_op_without_faults(policy):
    model, tok = policy
    from arborl.generation.hf import HFBackend

    cfg = RolloutConfig(num_tasks=1, group_size=2, max_turns=2, max_new_tokens=4, seed=0)
    res = run_rollout(HFBackend(model, tok, seed=0), tok, "arborl/Maze-v0", [3], cfg)
    batch, kept, rewards, errors = drop_env_errors(res.batch, res.trajectories)
    assert errors == [] and batch is res.batch and kept is res.trajectories and rewards is None


TOY = [
    "model.name_or_path=tiny-0.1m", "sft.enabled=false", "rollout.num_tasks=2",
    "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=4",
    "eval.num_episodes=2", "eval.every=0", "trainer.progress=false", "trainer.plots=false",
    "trainer.save_trajectories=4", "trainer.total_steps=2", "trainer.save_every=1",
]  # fmt: skip


def _trainer(tmp_path, *extra):
    cfg = load_train_config([*TOY, f"trainer.output_dir={tmp_path}", "trainer.name=r", *extra])
    trainer = RLTrainer(cfg)
    trainer.engine.pool = FaultyPool(trainer.engine.pool, fail={1})
    return trainer


@pytest.mark.fault("raising env")
def test_env_errors_are_counted_per_step_and_the_final_step_saved_once(tmp_path, monkeypatch):
    import arborl.train.rl as rl

    saved = []
    real = rl.write_checkpoint
    monkeypatch.setattr(rl, "write_checkpoint", lambda *a, **k: saved.append(a[1]) or real(*a, **k))
    trainer = _trainer(tmp_path)
    trainer.fit()
    recs = [r for r in read_metrics(tmp_path / "r" / "metrics.jsonl") if "train/success" in r]
    assert [(r["step"], r["rollout/env_errors"]) for r in recs] == [(1, 1.0), (2, 1.0)]
    assert trainer.env_errors == 2
    assert saved == [1, 2]  # save_every divides total_steps: step 2 is written once
    log = (tmp_path / "r" / "run.log").read_text()
    assert "1 episode(s) ended by an env error, left out of the update" in log


@pytest.mark.fault("raising env")
def test_env_error_budget_stops_the_run_with_the_key_to_raise(tmp_path):
    trainer = _trainer(tmp_path, "env.max_env_errors=1")
    with pytest.raises(TrainingAborted, match=r"more than env.max_env_errors=1.*env.timeout_s"):
        trainer.fit()
    assert trainer.step == 1  # step 0 (1 error) passed, step 1 (2 in all) stopped


def test_evaluation_builds_its_pool_in_env_pool_mode(tmp_path, pool_mode_spy):
    cfg = load_train_config([*TOY, f"trainer.output_dir={tmp_path}", "trainer.name=e",
                             "env.pool_mode=subprocess", "env.timeout_s=7"])  # fmt: skip
    trainer = RLTrainer(cfg)
    try:
        out = trainer.evaluate(2)
    finally:
        trainer.engine.close()
        trainer.run.close()
    assert out["episodes"] == 2.0 and out["env_errors"] == 0.0
    (train_mode, train_kw), (eval_mode, eval_kw) = pool_mode_spy
    assert train_mode == eval_mode == "subprocess"
    assert eval_kw["timeout_s"] == train_kw["timeout_s"] == 7.0
    assert eval_kw["max_env_errors"] == 100 and eval_kw["split"] == "test"
