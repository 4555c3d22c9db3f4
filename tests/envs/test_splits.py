"""Splits by content hash: fixed buckets, and no task ever in two splits."""

from __future__ import annotations

import random

import pytest

from arborl.envs import make, split_of, task_id_of
from arborl.envs.splits import bucket_of, canonical_json, sample_in_split

BUILTIN = ["arborl/Maze-v0", "arborl/Sokoban-v0", "arborl/FrozenLake-v0",
           "arborl/Countdown-v0", "arborl/Game24-v0"]  # fmt: skip


def test_canonical_json_ignores_key_order():
    a, b = {"x": 1, "y": [1, 2]}, {"y": [1, 2], "x": 1}
    assert canonical_json(a) == canonical_json(b) == '{"x":1,"y":[1,2]}'
    assert task_id_of(a) == task_id_of(b) and len(task_id_of(a)) == 12
    assert task_id_of(a) != task_id_of({"x": 2, "y": [1, 2]})


def test_bucket_rule():
    # 80/10/10 over 2000 synthetic tasks: each split's share is within 3 points of its size.
    tasks = [{"i": i} for i in range(2000)]
    share = {s: sum(split_of(t) == s for t in tasks) / 2000 for s in ("train", "val", "test")}
    assert abs(share["train"] - 0.8) < 0.03 and abs(share["val"] - 0.1) < 0.03
    for t in tasks[:200]:
        b = bucket_of(t)
        assert split_of(t) == ("train" if b < 80 else "val" if b < 90 else "test")


def test_sample_in_split_rejects_and_fails_loudly():
    task = sample_in_split(random.Random(0), "test", lambda r: {"i": r.randint(0, 10**9)})
    assert split_of(task) == "test"
    with pytest.raises(RuntimeError, match="too few distinct tasks"):
        sample_in_split(
            random.Random(0),
            "test",
            lambda r: {"i": 0} if split_of({"i": 0}) != "test" else {"i": 1},
            max_tries=50,
        )
    with pytest.raises(ValueError, match="split='dev'"):
        sample_in_split(random.Random(0), "dev", lambda r: {"i": 0})


@pytest.mark.parametrize("env_id", BUILTIN)
def test_splits_disjoint(env_id):
    env = make(env_id)
    ids = {}
    num = 300 if env_id != "arborl/Sokoban-v0" else 150  # Sokoban runs a solver per draw
    for split in ("train", "val", "test"):
        ids[split] = set()
        for seed in range(num):
            _, info = env.reset(seed=seed, options={"split": split})
            assert split_of(env.task) == split
            assert info["task_id"] == task_id_of(env.task)
            ids[split].add(info["task_id"])
    assert not ids["train"] & ids["val"] and not ids["train"] & ids["test"]
    assert not ids["val"] & ids["test"]
    assert len(ids["test"]) > num // 3  # many distinct tasks, not one repeated
