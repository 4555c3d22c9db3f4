"""BabyAI package (envpkgs/babyai): set-up, conformance through pools, Gymnasium's checker,
the text view, exact snapshots and the bot oracle, all inside the package's own venv."""

from __future__ import annotations

import pytest

from arborl.envs import make_pool

from ._real import (
    assert_set_up_and_listed,
    run_probe,
    set_up,
)

pytestmark = pytest.mark.slow
ID = "babyai/GoToLocal-v0"

PROBE = """
import json
import babyai_env as b
env = b.GoToLocalEnv(split="test")
wins, turns, firsts = 0, 0, []
for s in range(30):
    firsts.append(env.reset(seed=s)[0])
    done = False
    while not done:
        _, r, term, trunc, info = env.step(env.oracle_action())
        done, turns = term or trunc, turns + 1
    wins += info["won"]
obs, info = env.reset(seed=7)
env.step("turn left")
snap = env.snapshot()
a = env.step("move forward")
env.restore(snap)
b2 = env.step("move forward")
bad = env.step("fly")
print(json.dumps({"wins": wins, "turns": turns, "obs": obs, "same": a[0] == b2[0] and
                  a[4]["anchor"] == b2[4]["anchor"], "bad_valid": bad[4]["valid_action"],
                  "actions": info["available_actions"],
                  "described": sum(" step" in o and " to the " in o for o in firsts)}))
"""


@pytest.fixture
def babyai(monkeypatch):
    return set_up("babyai", monkeypatch)


def test_setup_is_idempotent_and_listed(babyai, capsys):
    assert_set_up_and_listed(ID, "babyai", capsys)


def test_oracle_text_view_and_exact_snapshot(babyai):
    r = run_probe(babyai, PROBE)
    assert r["wins"] == 30  # the bot solves GoToLocal by construction
    assert 30 <= r["turns"] < 30 * 64
    assert r["obs"].startswith("Mission: go to ") and "You are carrying nothing." in r["obs"]
    assert "WG" not in r["obs"]  # a described view, not the ASCII grid
    assert r["described"] >= 10  # most first views name objects by offset
    assert r["same"] and r["bad_valid"] is False
    assert r["actions"] == ["turn left", "turn right", "move forward", "pick up", "drop", "toggle"]


def test_pool_runs_episodes_out_of_process(babyai):
    pool = make_pool("babyai/PickupLoc-v0", 2, mode="subprocess", split="test")
    try:
        obs, infos = pool.reset(seeds=[1, 2])
        assert all(o.startswith("Mission: pick up") for o in obs)
        assert infos[0]["task_id"] != infos[1]["task_id"]
        results, _ = pool.step(["turn left", "nonsense"])
        assert [r.info["valid_action"] for r in results] == [True, False]
    finally:
        pool.close()
