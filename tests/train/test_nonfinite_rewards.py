"""A NaN or inf reward never reaches the advantages (issue 34 #2). Where rewards enter the
trainer (`drop_env_errors` for the env's step rewards, `batch_rewards` for every reward
source's output) a non-finite one makes its episode an env error: dropped from the groups
and the loss, counted in `rollout/env_errors` and against `env.max_env_errors`, named in
the log and in the saved trajectory; the metrics stay numbers and the report still opens.
Before, one NaN made its whole group's advantages NaN, the rows left the loss silently,
`reward/*` and `adv/mean` were null while `adv/groups_with_signal` said 1.0, and the bare
NaN in the trajectories blanked report.html."""

import json
import math
import re

import numpy as np
import pytest
import torch

from arborl.envs import EnvPool
from arborl.rewards import get_reward_source
from arborl.rollout import RolloutConfig, run_rollout
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer, TrainingAborted
from arborl.train.rows import batch_rewards, drop_env_errors
from arborl.train.runlog import read_metrics

pytestmark = pytest.mark.fault("NaN rewards")

NAN, INF = float("nan"), float("inf")


class BadRewardPool:
    """An `EnvPool` whose envs in `bad` return `value` (NaN, inf, ...) as their reward on
    every step, everything else as the env said."""

    def __init__(self, inner, bad: set[int], value: float = NAN):
        self.inner, self.bad, self.value = inner, bad, value

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        return self.inner[i]

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, actions):
        results, done = self.inner.step(actions)
        for i in self.bad & set(actions):
            results[i] = results[i]._replace(reward=self.value)
        return results, done


@pytest.fixture(scope="module")
def policy():
    from arborl.models import load_policy

    model, tok = load_policy("tiny-0.1m", seed=0)
    return model.eval(), tok


def _rollout(policy, bad: set[int], value: float):
    from arborl.generation.hf import HFBackend

    model, tok = policy
    cfg = RolloutConfig(num_tasks=2, group_size=2, max_turns=2, max_new_tokens=4, seed=0)
    pool = BadRewardPool(EnvPool("arborl/Maze-v0", 4, short_actions=True), bad, value)
    return run_rollout(HFBackend(model, tok, seed=0), tok, pool, [11, 12], cfg)


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_a_nonfinite_env_reward_makes_its_episode_an_env_error(policy, value):
    res = _rollout(policy, {1, 2}, value)
    bad = [t for t in res.trajectories if not all(math.isfinite(s.reward) for s in t.steps)]
    assert len(bad) == 2
    batch, kept, rewards, errors = drop_env_errors(res.batch, res.trajectories)
    assert rewards is None and len(kept) == 2 and len(errors) == 2
    for t in bad:  # named (env, task, turn, value) and marked in the saved trajectory
        line = f"arborl/Maze-v0 task {t.task_id} turn 0: env reward {value}"
        assert line in errors
        assert t.meta["truncation_reason"] == "env_error"
        assert t.meta["env_error"] == f"non-finite task {t.task_id} turn 0: env reward {value}"
        assert t.meta["traj_id"] not in set(batch.meta["traj_id"])
    assert torch.isfinite(batch.tensors["step_reward"]).all()
    assert len(batch) == len(res.batch) - sum(t.num_steps for t in bad)


def test_a_reward_source_that_returns_nan_or_inf_drops_its_episode(policy):
    res = _rollout(policy, set(), NAN)
    traj = res.batch.meta["traj_id"].astype(str)
    first, second = traj[0], sorted(set(traj) - {traj[0]})[0]

    def shaky(fields):  # a reward model gone wrong on two episodes' rows
        out = np.ones(len(fields["env_reward"]))
        out[traj == first] = NAN
        out[np.flatnonzero(traj == second)[-1]] = 1e39  # finite, but inf in float32
        return out

    sources = {"env": 1.0, "shaky": 0.5}
    fns = {"env": get_reward_source("env"), "shaky": shaky}
    rewards, metrics = batch_rewards(res.batch, 4, sources, res.trajectories, fns)
    assert not torch.isfinite(rewards).all()
    # the metrics leave the two spoiled episodes out: shaky gives 0.5 a row, so
    # reward/shaky = 0.5 x (rows of the two other episodes) / 2 episodes
    rows_ok = int(np.isin(traj, [first, second], invert=True).sum())
    assert metrics["reward/shaky"] == pytest.approx(0.5 * rows_ok / 2)
    assert all(math.isfinite(v) for v in metrics.values())
    batch, kept, kept_rewards, errors = drop_env_errors(res.batch, res.trajectories, rewards)
    assert len(kept) == 2 and len(errors) == 2 and len(kept_rewards) == len(batch)
    assert torch.isfinite(kept_rewards).all()
    assert {first, second}.isdisjoint(set(batch.meta["traj_id"]))
    assert any(re.search(r"turn 0: reward \(reward.sources combined\) nan$", e) for e in errors)
    assert any(e.endswith("reward (reward.sources combined) inf") for e in errors)


@pytest.mark.fault("out-of-range reward")
def test_a_reward_source_past_the_bound_drops_its_episode_naming_it(policy):
    res = _rollout(policy, set(), NAN)
    traj = res.batch.meta["traj_id"].astype(str)

    def huge(fields):  # a reward model whose scale went wrong on one episode: finite
        return np.where(traj == traj[0], 3e6, 1.0)

    fns = {"env": get_reward_source("env"), "huge": huge}
    rewards, metrics = batch_rewards(res.batch, 4, {"env": 1.0, "huge": 1.0}, None, fns)
    batch, kept, kept_rewards, errors = drop_env_errors(res.batch, res.trajectories, rewards)
    assert len(errors) == 1 and traj[0] not in set(batch.meta["traj_id"])
    assert errors[0].endswith("(beyond +-1e+06)") and kept_rewards.abs().max() < 10
    t = next(t for t in res.trajectories if t.meta["traj_id"] == traj[0])
    assert t.meta["env_error"].startswith("out-of-range task ")


@pytest.mark.fault("out-of-range reward")
@pytest.mark.parametrize("value", [10**400, 1e7, "1.0"])
def test_an_env_reward_past_float_or_range_is_an_env_error_in_rollouts_and_eval(policy, value):
    from arborl.train.evaluate import share_metrics

    res = _rollout(policy, {1, 2}, value)  # before: 10**400 raised OverflowError here
    ended = [t for t in res.trajectories if t.meta["truncation_reason"] == "env_error"]
    assert len(ended) == 2
    why = next(s.info["env_error"] for s in ended[0].steps if s.info.get("env_error"))
    assert why.startswith("turn 0: env reward is ") and "MAX_ABS_REWARD" in why
    batch, kept, _, errors = drop_env_errors(res.batch, res.trajectories)
    assert len(errors) == 2 and len(kept) == 2
    assert batch.tensors["step_reward"].abs().max() <= 1.0
    # the held-out evaluation counts them the same way (the same rollout code), and its
    # mean return stays a number
    m = share_metrics(res.episodes, res.trajectories, [11, 11, 12, 12], 0)
    assert m["env_errors"] == 2.0 and math.isfinite(m["mean_return"])


TOY = [
    "model.name_or_path=tiny-0.1m", "sft.enabled=false", "rollout.num_tasks=2",
    "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=4",
    "eval.num_episodes=2", "eval.every=0", "trainer.progress=false", "trainer.plots=false",
    "trainer.save_trajectories=4", "trainer.total_steps=2", "trainer.save_every=0",
]  # fmt: skip


def _trainer(tmp_path, bad: set[int], *extra):
    cfg = load_train_config([*TOY, f"trainer.output_dir={tmp_path}", "trainer.name=r", *extra])
    trainer = RLTrainer(cfg)
    trainer.engine.pool = BadRewardPool(trainer.engine.pool, bad)
    return trainer


def test_nan_rewards_are_counted_never_trained_on_and_the_run_stays_readable(tmp_path, monkeypatch):
    import arborl.train.rl as rl

    seen = []  # what reaches the advantages: every row's reward and episode
    real = rl.attach_advantages

    def spy(batch, rewards, algo, values):
        seen.append((set(batch.meta["traj_id"].astype(str)), rewards.clone()))
        return real(batch, rewards, algo, values)

    monkeypatch.setattr(rl, "attach_advantages", spy)
    trainer = _trainer(tmp_path, {1})
    trainer.fit()
    run = tmp_path / "r"
    recs = [r for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]
    assert [(r["step"], r["rollout/env_errors"]) for r in recs] == [(1, 1.0), (2, 1.0)]
    assert trainer.env_errors == 2
    for r in recs:  # numbers, never null: no NaN reached a metric of the update
        nulls = [k for k, v in r.items() if v is None]
        # train/mean_return is the rollout's own mean over every episode it ran, the NaN
        # one too (arborl/rollout/metrics.py), not a number the update used
        assert nulls in ([], ["train/mean_return"]), nulls
        # the NaN episode's sibling is alone in its group: zero advantage, no signal;
        # the other group has signal only if its two returns differ
        assert r["adv/groups_with_signal"] <= 0.5
    for traj_ids, rewards in seen:
        assert torch.isfinite(rewards).all() and len(traj_ids) == 3
    dumped = [json.loads(x) for x in (run / "trajectories" / "step-00000.jsonl").open()]
    marked = [t for t in dumped if t["meta"].get("truncation_reason") == "env_error"]
    assert len(marked) == 1 and "env reward nan" in marked[0]["meta"]["env_error"]
    assert marked[0]["meta"]["traj_id"] not in seen[0][0]
    log = (run / "run.log").read_text()
    assert re.search(
        r"1 episode\(s\) ended by an env error.*arborl/Maze-v0 task .* env reward nan", log
    )
    assert all(torch.isfinite(p).all() for p in trainer.engine.model.parameters())
    # the bare NaN in the saved trajectory no longer blanks the report: its data parses
    html = (run / "report.html").read_text()
    block = re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1)
    data = json.loads(block, parse_constant=lambda c: pytest.fail(f"{c} in the page's JSON"))
    assert any(turn["reward"] == "NaN" for e in data["episodes"] for turn in e["turns"])


def test_nan_rewards_past_the_budget_stop_the_run_naming_env_and_step(tmp_path):
    trainer = _trainer(tmp_path, {1, 2}, "env.max_env_errors=1")
    with pytest.raises(TrainingAborted) as err:
        trainer.fit()
    msg = str(err.value)
    assert "2 episodes ended by env errors" in msg and "non-finite rewards" in msg
    assert "more than env.max_env_errors=1; the run stops at RL step 1 of env arborl/Maze-v0" in msg
    assert re.search(r"\(this step: arborl/Maze-v0 task \S+ turn 0: env reward nan; ", msg)
    assert trainer.step == 0


def test_a_reward_source_nan_in_a_run_is_an_env_error_too(tmp_path):
    trainer = _trainer(tmp_path, set())
    env = trainer.reward_fns["env"]

    def nan_on_first_episode(fields):  # what a broken reward source would hand back
        out = np.asarray(env(fields), dtype=float).copy()
        out[0] = NAN
        return out

    trainer.reward_fns = {**trainer.reward_fns, "env": nan_on_first_episode}
    trainer.fit()
    recs = [r for r in read_metrics(tmp_path / "r" / "metrics.jsonl") if "train/success" in r]
    assert [r["rollout/env_errors"] for r in recs] == [1.0, 1.0]
    assert all(v is not None for r in recs for v in r.values())
    assert trainer.env_errors == 2


def test_a_batch_gives_every_documented_reward_field_per_row(policy):
    """`batch_fields` (what `batch_rewards` hands the sources) and `FIELDS` (what the docs
    and `arborl.rewards` promise a source) name the same fields, one value per row."""
    from arborl.rewards.sources import FIELDS, batch_fields

    res = _rollout(policy, set(), NAN)
    fields = batch_fields(res.batch)
    assert set(fields) == set(FIELDS)
    assert all(len(v) == len(res.batch) for v in fields.values())
    last = res.batch.meta["done"].astype(bool)
    assert fields["is_last"].sum() == 4 == last.sum()  # 2 tasks x 2 episodes, one last row each
    assert not fields["won"][~last].any()  # success counts on an episode's last row only
