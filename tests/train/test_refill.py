"""Dynamic sampling that refills (`algo.filter_groups` + `algo.max_gen_batches`,
`arborl.train.refill`), at toy size on the built-in Maze with tiny-0.1m: a step is filled
to `rollout.num_tasks` groups with a signal when there is signal to find, and the draws
stop at the bound when there is none."""

import json

import numpy as np
import pytest
import torch

from arborl.config import ConfigError
from arborl.data import Batch
from arborl.train.config import load_train_config
from arborl.train.refill import first_groups
from arborl.train.rl import RLTrainer

TOY = [
    "model.name_or_path=tiny-0.1m", "sft.steps=30", "sft.num_demos=8", "sft.lr=3e-3",
    "sft.warmup_steps=2", "rollout.num_tasks=4", "rollout.group_size=4",
    "rollout.max_turns=6", "eval.num_episodes=4", "trainer.total_steps=1",
    "trainer.progress=false", "trainer.plots=false", "trainer.report=false",
    "trainer.loggers=[]", "trainer.save_trajectories=0", "trainer.num_threads=1",
    "algo.filter_groups=true",
]  # fmt: skip


def _step(tmp_path, name, *overrides) -> tuple[RLTrainer, dict]:
    cfg = load_train_config([*TOY, *overrides, f"trainer.output_dir={tmp_path}",
                             f"trainer.name={name}"])  # fmt: skip
    trainer = RLTrainer(cfg)
    trainer.fit()
    rows = [json.loads(x) for x in (trainer.run.path / "metrics.jsonl").open()]
    return trainer, next(r for r in rows if "train/success" in r)


# Groups of 2 and a small invalid-action cost: about half of the groups differ in return
SIGNAL = ["rollout.group_size=2", "reward.sources={env: 1.0, invalid_action: 0.1}"]


def test_refill_fills_the_step_with_groups_that_carry_signal(tmp_path):
    _, fixed = _step(tmp_path, "fixed", *SIGNAL, "algo.max_gen_batches=1")
    trainer, r = _step(tmp_path, "fill", *SIGNAL, "algo.max_gen_batches=12")
    # without a refill the step keeps the first draw's mixed groups only
    assert fixed["rollout/groups_kept"] == pytest.approx(4 * (1 - fixed["rollout/groups_filtered"]))
    assert fixed["rollout/gen_batches"] == 1
    # with it (same seed, same first draw): rollout.num_tasks groups, from more draws
    assert r["rollout/groups_filtered"] == fixed["rollout/groups_filtered"]
    assert r["rollout/groups_kept"] == 4
    assert (r["rollout/gen_batches"] > 1) == (fixed["rollout/groups_kept"] < 4)
    assert r["rollout/groups_drawn"] == 4 * r["rollout/gen_batches"]
    assert r["rollout/groups_dropped"] <= r["rollout/groups_drawn"] - 4
    assert r["train/rows"] >= fixed["train/rows"] and "actor/pg_loss" in r
    assert trainer.env_steps >= r["train/rows"]  # every draw's env steps are counted


def test_without_signal_the_draws_stop_at_the_bound(tmp_path):
    """Every return 0 (the env reward weighted 0): no group is ever mixed."""
    _, r = _step(tmp_path, "bound", "algo.max_gen_batches=3", "reward.sources={env: 0.0}")
    assert r["rollout/gen_batches"] == 3
    assert r["rollout/groups_drawn"] == 12 and r["rollout/groups_dropped"] == 12
    assert r["rollout/groups_kept"] == 0 and r["train/rows"] == 0
    assert "actor/pg_loss" not in r  # nothing to train on


def test_first_groups_cuts_in_order_of_appearance():
    batch = Batch({"x": torch.arange(6)})
    batch.meta["group_id"] = np.array([3, 3, 0, 7, 7, 0])
    kept, rewards = first_groups(batch, torch.arange(6.0), 2)
    assert kept.tensors["x"].tolist() == [0, 1, 2, 5]  # groups 3 and 0, not 7
    assert rewards.tolist() == [0.0, 1.0, 2.0, 5.0]


def test_refill_needs_the_filter():
    with pytest.raises(ConfigError, match="algo.max_gen_batches=4 refills"):
        load_train_config(["algo.max_gen_batches=4"])
