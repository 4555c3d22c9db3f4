"""`algo=raft` (supervised updates on each batch's won episodes) and group filtering
(`algo.filter_groups`: all-equal groups dropped before the advantages) train end to end
through the one loop, on Maze from a short SFT start."""

import json

import pytest

from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer

TOY = [
    "model.name_or_path=tiny-0.1m", "sft.steps=30", "sft.num_demos=8", "sft.lr=3e-3",
    "sft.warmup_steps=2", "rollout.num_tasks=4", "rollout.group_size=4",
    "rollout.max_turns=6", "eval.num_episodes=8", "trainer.total_steps=3",
    "trainer.progress=false", "trainer.plots=false", "trainer.report=false",
    "trainer.loggers=[]", "trainer.save_trajectories=0", "trainer.num_threads=1",
]  # fmt: skip


def _steps(trainer) -> list[dict]:
    rows = [json.loads(x) for x in (trainer.run.path / "metrics.jsonl").open()]
    return [r for r in rows if "train/success" in r]


@pytest.mark.parametrize("algo", ["raft", "ppo"])  # ppo: its critic fits the kept rows
def test_filtered_groups_and_raft_train_end_to_end(tmp_path, algo):
    cfg = load_train_config([*TOY, f"algo={algo}", "algo.filter_groups=true",
                             f"trainer.output_dir={tmp_path}", f"trainer.name={algo}"])  # fmt: skip
    trainer = RLTrainer(cfg)
    summary = trainer.fit()
    steps = _steps(trainer)
    assert summary["steps"] == 3 and len(steps) == 3
    for r in steps:  # Maze pays 1 for a win only: groups of equal returns = not mixed
        assert r["rollout/groups_filtered"] == pytest.approx(1.0 - r["rollout/groups_mixed"])
    trained = [r for r in steps if "actor/pg_loss" in r]
    assert len(trained) == sum(r["rollout/groups_filtered"] < 1.0 for r in steps)
    assert trained, "no step had an informative group: the toy start is too weak or strong"
    if algo == "raft":
        assert all(0.0 < r["raft/episodes_kept"] <= 1.0 for r in trained)
        # every kept row has advantage 1 (and ratio 1 on-policy): the surrogate is
        # -(episode weight), negative; no kept row can have a negative advantage
        assert all(
            r["actor/pg_loss"] < 0 and r["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
            for r in trained
        )
        assert all(r["adv/mean"] == pytest.approx(r["train/rows_with_signal"]) for r in trained)
