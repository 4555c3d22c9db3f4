"""BabyAI package (envpkgs/babyai): set-up, conformance through pools, Gymnasium's checker,
the text view, exact snapshots and the bot oracle, all inside the package's own venv; all
96 levels registered, the bot on every one, `check_env` on a sample."""

from __future__ import annotations

import json
import subprocess

import pytest

from arborl.cli.main import main
from arborl.envs import make_pool

from ._real import (
    assert_checks_through_pool,
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


LEVELS_PROBE = """
import json, sys
import babyai_env as b
from babyai_levels import level_limit, limit_seeds
chunk, chunks, imperfect = int(sys.argv[1]), int(sys.argv[2]), set(json.loads(sys.argv[3]))
wins, views = {}, []
for level in b.LEVELS[chunk::chunks]:
    name = b.level_name(level)
    # The bot needs at most ~130 turns where it wins (docs/envs.md); where it is known to
    # lose, a short episode only checks that its failures do not crash the env.
    turns = 32 if name in imperfect else min(256, level_limit(level, limit_seeds(20)))
    env = b.BabyAIEnv(split="test", max_turns=turns, level=level)
    views.append(env.reset(seed=0)[0])
    done = False
    while not done:
        _, _, term, trunc, info = env.step(env.oracle_action())
        done = term or trunc
    wins[name] = int(info["won"])
print(json.dumps({"wins": wins, "views": views}))
"""
BOT_IMPERFECT = {
    "OpenDoorsOrderN2Debug-v0", "OpenDoorsOrderN4Debug-v0", "PickupDistDebug-v0",
    "PutNextS5N2Carrying-v0", "PutNextS6N3Carrying-v0", "PutNextS7N4Carrying-v0",
    "KeyInBox-v0",
}  # fmt: skip
"""Levels where the bot lost test episodes in the sweep (docs/envs.md): the Debug variants
end an episode at the first wrong move; on KeyInBox and the Carrying variants the bot
keeps failing its own assertion."""
CHUNKS = 4


def test_every_level_is_registered(babyai, capsys):
    assert main(["env", "list"]) == 0
    listed = [x.split()[0] for x in capsys.readouterr().out.splitlines() if x.startswith("babyai/")]
    assert len(listed) == 96 and {"babyai/GoToLocal-v0", "babyai/BossLevel-v0"} <= set(listed)
    assert set(BOT_IMPERFECT) <= {x.removeprefix("babyai/") for x in listed}


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_bot_solves_every_solvable_level(babyai, chunk):
    # Every level, split in CHUNKS tests (a quarter of the levels each, test seed 0).
    args = [str(chunk), str(CHUNKS), json.dumps(sorted(BOT_IMPERFECT))]
    out = subprocess.run([str(babyai.python), "-c", LEVELS_PROBE, *args], capture_output=True,
                         text=True, timeout=580, cwd=babyai.manifest.root)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(r["wins"]) == 96 // CHUNKS
    lost = {k for k, w in r["wins"].items() if not w}
    assert lost <= BOT_IMPERFECT, lost - BOT_IMPERFECT
    assert len(lost) < len(r["wins"]) // 2


VIEW_PROBE = """
import json
import babyai_env as b
views = []
for level in ("BabyAI-KeyInBox-v0", "BabyAI-UnlockPickup-v0", "BabyAI-BossLevel-v0",
              "BabyAI-GoToObjMaze-v0", "BabyAI-KeyCorridorS3R3-v0"):
    env = b.BabyAIEnv(split="test", level=level)
    for s in range(4):
        views.append(env.reset(seed=s)[0])
        for a in ("turn left", "move forward", "move forward", "turn right"):
            views.append(env.step(a)[0])
print(json.dumps({"views": views}))
"""


def test_the_text_view_names_what_the_levels_show(babyai):
    views = "\n".join(run_probe(babyai, VIEW_PROBE)["views"])
    for words in ("locked", "closed", " box ", " key ", "Walls: ", "wall right in front"):
        assert words in views, words


@pytest.mark.parametrize(
    "env_id", ["babyai/BossLevel-v0", "babyai/KeyInBox-v0", "babyai/PutNextS5N2Carrying-v0"]
)
def test_check_env_on_a_sample_of_levels(babyai, env_id, capsys):
    assert_checks_through_pool(env_id, "subprocess", capsys)


COMPACT_PROBE = """
import json
import babyai_env as b
pairs = []
for level in ("BabyAI-GoToLocal-v0", "BabyAI-UnlockPickup-v0", "BabyAI-KeyInBox-v0"):
    text, compact = (b.BabyAIEnv(split="test", level=level, view=v) for v in ("text", "compact"))
    for s in range(3):
        pairs.append((text.reset(seed=s)[0], compact.reset(seed=s)[0]))
        for a in ("turn left", "move forward", "pick up", "move forward", "toggle", "fly"):
            t, c = text.step(a), compact.step(a)
            pairs.append((t[0], c[0]))
            assert (t[1:4], t[4]["anchor"]) == (c[1:4], c[4]["anchor"])  # same state
try:
    b.BabyAIEnv(view="ascii")
    error = ""
except ValueError as e:
    error = str(e)
print(json.dumps({"pairs": pairs, "error": error}))
"""


def test_the_compact_view_says_the_same_in_fewer_words(babyai):
    r = run_probe(babyai, COMPACT_PROBE)
    assert "view='ascii' is not a BabyAI view" in r["error"]
    for text, compact in r["pairs"]:
        mission = text.split("\n")[0].removeprefix("Mission: ")
        if text.startswith("Unknown action"):
            continue
        assert compact.split("\n")[0] == mission and len(compact) < 0.75 * len(text)
        assert ("wall right in front" in text) == ("ahead: wall" in compact)
        assert ("carrying nothing" in text) == ("holding: nothing" in compact)
        for word in ("closed", "locked", "open", "box", "key", "ball", "door"):
            assert text.count(f" {word}") == compact.count(word), (word, text, compact)


ANCHOR_PROBE = """
import json, random
import babyai_env as b
steps, wrong = 0, []
for level in ("BabyAI-GoToLocal-v0", "BabyAI-UnlockPickup-v0", "BabyAI-PutNextLocal-v0",
              "BabyAI-KeyInBox-v0"):
    env, rng = b.BabyAIEnv(level=level), random.Random(1)
    for s in range(5):
        _, info = env.reset(seed=s)
        wrong += [] if info["anchor"] == env.world.hash() else [(level, s, "reset")]
        for t in range(50):
            if t == 20:  # a restore after a grid change brings the old grid back
                snap = env.snapshot()
                env.step("pick up")
                env.restore(snap)
            a = env.oracle_action() if rng.random() < 0.5 else rng.choice([*b.ACTIONS, "fly"])
            _, _, term, _, info = env.step(a)
            steps += 1
            wrong += [] if info["anchor"] == env.world.hash() else [(level, s, t, a)]
            if term:
                break
print(json.dumps({"steps": steps, "wrong": wrong}))
"""


def test_the_anchor_is_minigrid_s_state_hash(babyai):
    """The grid's encoding is kept between grid-changing actions; the anchor stays
    `world.hash()` through pickups, drops, toggles, invalid actions and restores."""
    r = run_probe(babyai, ANCHOR_PROBE)
    assert r["wrong"] == [] and r["steps"] > 400


FASTOBS_PROBE = """
import json, random
import numpy as np
from minigrid.minigrid_env import MiniGridEnv
import babyai_env as b
rng, steps, wrong = random.Random(2), 0, []
levels = [lv for lv in b.LEVELS if "Debug" not in lv and "Carrying" not in lv]
carrying = [lv for lv in b.LEVELS if "Carrying" in lv]  # they edit the grid after reset
for level in rng.sample(levels, 21) + carrying:
    env = b.BabyAIEnv(level=level)
    for s in range(3):
        env.reset(seed=s)
        for t in range(40):
            if t == 15:  # a restored world observes through a FastObs of its own
                snap = env.snapshot()
                env.step("toggle")
                env.restore(snap)
            a = env.oracle_action() if rng.random() < 0.6 else rng.choice(list(b.ACTIONS))
            _, _, term, _, _ = env.step(a)
            steps += 1
            fast = env.world.gen_obs()["image"]
            if not np.array_equal(fast, MiniGridEnv.gen_obs(env.world)["image"]):
                wrong.append((level, s, t, a))
            if term:
                break
print(json.dumps({"steps": steps, "wrong": wrong[:5]}))
"""


def test_fast_observations_equal_minigrid_s(babyai):
    """`babyai_fastobs.FastObs` (the grid kept as arrays between pick up, drop and toggle)
    gives minigrid's own `gen_obs` image on 24 levels under the bot and random actions."""
    r = run_probe(babyai, FASTOBS_PROBE)
    assert r["wrong"] == [] and r["steps"] > 1000
