"""ScienceWorld package (envpkgs/scienceworld): set-up, conformance through subprocess, Ray and
HTTP pools, Gymnasium's checker, the official variation splits, gold-path oracle, ambiguity and
invalid commands, replay snapshots and text-state anchors, in the package's venv."""

from __future__ import annotations

import pytest

from arborl.envs import check_env, make_pool

from ._real import (
    assert_set_up_and_listed,
    gym_check,
    run_probe,
    set_up,
    train_two_rl_steps,
)

pytestmark = pytest.mark.slow
ID = "sciworld/Find-v0"

PROBE = """
import json
import sciworld_env as s
env = s.ScienceWorldEnv(split="test", task_names=["find-non-living-thing", "find-plant"])
wins = 0
for seed in range(3):
    env.reset(seed=seed)
    done = False
    while not done:
        _, r, term, trunc, info = env.step(env.oracle_action())
        done = term or trunc
    wins += info["won"]
env._sw.load("boil", 0, "", generateGoldPath=False)
folds = [len(env._sw.get_variations_train()), len(env._sw.get_variations_dev()),
         len(env._sw.get_variations_test())]
obs, info = env.reset(seed=5)
first = info["anchor"]
env.step(env.gold[0])
snap = env.snapshot()
x = env.step(env.gold[1])
env.restore(snap)
y = env.step(env.gold[1])
bad = env.step("fly to the moon")
amb = env.step("open door")
env.reset(seed=5)
print(json.dumps({"wins": wins, "folds": folds, "tasks": len(env._sw.get_task_names()),
                  "replay": x[0] == y[0] and x[4]["anchor"] == y[4]["anchor"],
                  "again": env._anchor() == first, "bad": bad[4]["valid_action"],
                  "amb": amb[0], "lazy": "available_actions" in info}))
"""


@pytest.fixture
def sciworld(monkeypatch):
    return set_up("scienceworld", monkeypatch)


def test_setup_is_idempotent_and_listed(sciworld, capsys):
    assert_set_up_and_listed(ID, "scienceworld", capsys)


def test_gold_oracle_splits_replay_and_anchor(sciworld):
    r = run_probe(sciworld, PROBE, timeout_s=900)
    assert r["wins"] == 3 and r["tasks"] == 30
    assert r["folds"] == [14, 7, 9]  # boil's official train/dev/test variations
    assert r["replay"] and r["again"] and r["bad"] is False
    assert not r["amb"].startswith("Ambiguous request")  # answered inside the step
    assert r["lazy"] is False  # the valid-action list only with list_actions=True


@pytest.mark.parametrize("mode", ["subprocess", "ray", "http"])
def test_check_env_through_pool(sciworld, mode, request):
    # The JVM starts at the first reset, so a loaded machine needs a long call timeout.
    # HTTP: one local replica, started and stopped by the pool. Ray: an actor in Ray's
    # interpreter forwarding to a stdio worker in the package's venv.
    if mode == "ray":
        request.getfixturevalue("local_ray")
    pool = make_pool(ID, 1, mode=mode, timeout_s=300)
    try:
        assert check_env(pool[0], num_seeds=1) == []
    finally:
        pool.close()


def test_gymnasium_checker(sciworld):
    kwargs = {"task_names": ["find-plant", "find-animal"]}
    out = gym_check(sciworld, ID, "sciworld_env:ScienceWorldEnv", 40, "train", kwargs)
    assert "GYM_CHECK_OK" in out


def test_train_env_scienceworld_runs_two_rl_steps(sciworld, tmp_path):
    cfg = train_two_rl_steps(["env=scienceworld", "env.id=sciworld/Find-v0"], tmp_path)
    assert cfg.env.pool_mode == "subprocess" and cfg.env.timeout_s == 120
