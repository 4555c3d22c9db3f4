"""TextWorld-Express package (envpkgs/twx): set-up, conformance through pools, Gymnasium's
checker, gold-path oracles on every family's test fold, replay snapshots, stable anchors."""

from __future__ import annotations

import pytest

from arborl.envs import make_pool

from ._real import (
    assert_set_up_and_listed,
    run_probe,
    set_up,
)

pytestmark = pytest.mark.slow
ID = "twx/CoinCollector-v0"
FAMILIES = ("CoinCollector", "CookingWorld", "TWC", "MapReader", "Arithmetic", "Sorting",
            "SimonSays", "PeckingOrder")  # fmt: skip

PROBE = """
import json
import twx_env as t
wins = {}
for name in FAMILIES:
    env = getattr(t, name + "Env")(split="test")
    won = 0
    for s in range(3):
        env.reset(seed=s)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.oracle_action())
            done = term or trunc
        won += info["won"]
    wins[name] = won
    folds = [len(env._seeds(f)) for f in ("train", "val", "test")]
    overlap = len(set(env._seeds("train")) & set(env._seeds("test")))
    env.close()
env = t.CoinCollectorEnv()
obs, info = env.reset(seed=1)
first = info["anchor"]
back = {"north": "south", "south": "north", "east": "west", "west": "east"}
go = next(a for a in info["available_actions"] if a.startswith("move "))
moved = env.step(go)[4]["anchor"]  # another room: another anchor
returned = env.step("move " + back[go.split()[1]])[4]["anchor"]  # the first room again
anchors = {"moved_differs": moved != first, "returned_same": returned == first}
env.reset(seed=1)
env.step(info["available_actions"][0])
snap = env.snapshot()
a = env.step("look around")
env.restore(snap)
b = env.step("look around")
bad = env.step("fly away")
env.reset(seed=1)
print(json.dumps({"wins": wins, "folds": folds, "overlap": overlap, "replay": a[0] == b[0]
                  and a[4]["anchor"] == b[4]["anchor"], "anchor_again": env._anchor() == first,
                  "bad_valid": bad[4]["valid_action"], "actions": info["available_actions"],
                  **anchors}))
""".replace("FAMILIES", repr(FAMILIES))


SHARED = """
import json
import twx_env as t
def first(env):
    return env._available_actions()[-1]  # a fixed choice (the gold path may vary by run)
def play(env, seed, n=4):
    out = [env.reset(seed=seed)[0]]
    for _ in range(n):
        out.append(env.step(first(env))[0])
    return out
a, b, c = t.CoinCollectorEnv(), t.CoinCollectorEnv(), t.CookingWorldEnv()
starts = [a.reset(seed=3)[0], b.reset(seed=5)[0], c.reset(seed=7)[0]]
steps = [[e.step(first(e))[0] for e in (a, b, c)] for _ in range(4)]
interleaved = [[starts[k]] + [s[k] for s in steps] for k in range(3)]
one_jvm = len({id(e._jvm._gateway) for e in (a, b, c)}) == 1
a.close()
alone = [play(b, 3), play(b, 5), play(c, 7)]  # b outlives a's close: the JVM is shared
print(json.dumps({"one_jvm": one_jvm, "same": interleaved == alone}))
"""


def test_env_objects_of_a_process_share_one_jvm_and_stay_independent(twx):
    r = run_probe(twx, SHARED)
    assert r == {"one_jvm": True, "same": True}


@pytest.fixture
def twx(monkeypatch):
    return set_up("twx", monkeypatch)


def test_setup_is_idempotent_and_listed(twx, capsys):
    assert_set_up_and_listed(ID, "twx", capsys)


def test_gold_oracle_folds_replay_and_anchor(twx):
    r = run_probe(twx, PROBE)
    assert r["wins"] == {name: 3 for name in FAMILIES}  # gold paths solve every family
    assert r["folds"] == [1000, 1000, 1000] and r["overlap"] == 0  # the official seed folds
    assert r["replay"] and r["anchor_again"] and r["bad_valid"] is False
    # the anchor is the state: another room differs, the same room again is equal (it was
    # one constant for every state while it hashed TWX's empty object tree)
    assert r["moved_differs"] and r["returned_same"]
    assert r["actions"] == sorted(r["actions"]) and "look around" in r["actions"]


def test_pool_survives_a_jvm_env_per_worker(twx):
    pool = make_pool("twx/CookingWorld-v0", 2, mode="subprocess", split="val")
    try:
        obs, infos = pool.reset(seeds=[1, 2])
        assert all(o.startswith("You are in the kitchen") for o in obs)
        assert [i["task_id"].split("/")[1] for i in infos] == ["dev", "dev"]
        results, _ = pool.step(["look around", "dance"])
        assert [r.info["valid_action"] for r in results] == [True, False]
    finally:
        pool.close()
