"""ALFWorld package (envpkgs/alfworld): data resolution (fast, host-only), then in the
package's venv: set-up, conformance through subprocess, Ray and HTTP pools, Gymnasium's checker, the
benchmark's splits, replay snapshots, facts anchors, the walkthrough oracle and two RL
steps of `arborl train env=alfworld`."""

from __future__ import annotations

import importlib.util
import tarfile

import pytest

from arborl.cli.main import main
from arborl.envs import check_env, make_pool

from ._real import (
    ENVPKGS,
    assert_set_up_and_listed,
    gym_check,
    run_probe,
    set_up,
    train_two_rl_steps,
)

ID = "alfworld/ALFWorld-v0"


def _data_module():
    spec = importlib.util.spec_from_file_location(
        "alfworld_data", ENVPKGS / "alfworld" / "alfworld_data.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_data_names_both_ways_to_get_it(tmp_path, monkeypatch):
    data = _data_module()
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "none"))
    monkeypatch.delenv("ARBORL_ALFWORLD_ARCHIVES", raising=False)
    with pytest.raises(data.DataMissing) as e:
        data.data_root("valid_unseen")
    msg = str(e.value)
    assert (
        "alfworld-download" in msg and "ALFWORLD_DATA" in msg and "ARBORL_ALFWORLD_ARCHIVES" in msg
    )
    with pytest.raises(ValueError, match="valid_unseen"):
        data.canonical_split("dev")


def test_archives_unpack_once_into_the_cache(tmp_path, monkeypatch):
    data = _data_module()
    game = tmp_path / "src" / "json_2.1.1" / "valid_seen" / "pick_and_place_simple-X-1" / "t1"
    game.mkdir(parents=True)
    (game / "game.tw-pddl").write_text("{}")
    (tmp_path / "arch").mkdir()
    with tarfile.open(tmp_path / "arch" / "alf_eval.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "src" / "json_2.1.1", arcname="json_2.1.1")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "none"))
    monkeypatch.setenv("ARBORL_ALFWORLD_ARCHIVES", str(tmp_path / "arch"))
    monkeypatch.setenv("ARBORL_ALFWORLD_CACHE", str(tmp_path / "cache"))
    assert data.game_files("val") == ["valid_seen/pick_and_place_simple-X-1/t1/game.tw-pddl"]
    (tmp_path / "arch" / "alf_eval.tar.xz").unlink()  # the second call reads the cache only
    assert len(data.game_files("valid_seen")) == 1
    assert data.task_type(data.game_files("val")[0]) == "pick_and_place_simple"
    with pytest.raises(data.DataMissing, match="alf_train.tar.xz"):
        data.data_root("train")


@pytest.fixture
def alfworld(monkeypatch):
    return set_up("alfworld", monkeypatch)


PROBE = """
import json, collections
import alfworld_data as d
import alfworld_env as a
counts = {s: len(d.game_files(s)) for s in ("train", "valid_seen", "valid_unseen")}
types = sorted(collections.Counter(map(d.task_type, d.game_files("valid_unseen"))))
env = a.ALFWorldEnv(split="valid_unseen")
games = d.game_files("valid_unseen")
picked = [next(g for g in games if "/" + t + "-" in "/" + g) for t in d.TASK_TYPES]
wins, anchors = 0, []
for g in picked:
    obs, info = env.reset(options={"task": {"game": g}})
    anchors.append(info["anchor"])
    done = False
    while not done:
        _, r, term, trunc, info = env.step(env.oracle_action())
        done = term or trunc
    wins += info["won"] and r == 1.0
obs, info = env.reset(options={"task": {"game": picked[0]}})
first_again = info["anchor"] == anchors[0]
env.step(env.walkthrough[0])
snap = env.snapshot()
x = env.step(env.walkthrough[1])
env.step("look")
env.restore(snap)
y = env.step(env.walkthrough[1])
bad = env.step("fly to the moon")
shown = a.ALFWorldEnv(split="valid_unseen", show_actions=True)
shown_obs, shown_info = shown.reset(options={"task": {"game": picked[0]}})
listed = all(repr(c) in shown_obs for c in shown_info["available_actions"])
print(json.dumps({"listed": listed and "admissible actions" in shown_obs,"counts": counts, "types": types, "wins": wins, "first_again": first_again,
                  "replay": x[0] == y[0] and x[4]["anchor"] == y[4]["anchor"],
                  "bad": [bad[4]["valid_action"], bad[0]], "obs": obs, "instr": env.instruction,
                  "acts": info["available_actions"]}))
"""


@pytest.mark.slow
def test_setup_is_idempotent_and_listed(alfworld, capsys):
    assert_set_up_and_listed(ID, "alfworld", capsys)


@pytest.mark.slow
def test_splits_oracle_replay_and_anchor(alfworld):
    r = run_probe(alfworld, PROBE, timeout_s=900)
    assert r["counts"] == {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
    assert len(r["types"]) == 6
    assert r["wins"] == 6  # the walkthrough wins one game of each task type
    assert r["first_again"] and r["replay"]  # same state, same anchor; replay is exact
    assert r["bad"] == [False, "Nothing happens."]
    assert r["obs"].startswith("You are in the middle of a room.") and "Welcome" not in r["obs"]
    assert "Your task is to:" in r["instr"]
    assert r["acts"] == sorted(r["acts"]) and "inventory" in r["acts"]
    assert r["listed"]  # show_actions: verl-agent's listing of the admissible commands


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["subprocess", "ray", "http"])
def test_check_env_through_pool(alfworld, mode, request):
    # A reset is 1.5-3 s idle but passed the pools' 30 s default on a loaded 2-core box.
    # HTTP: one local replica, started and stopped by the pool. Ray: an actor in Ray's
    # interpreter forwarding to a stdio worker in the package's venv.
    # Seed 10 draws a one-room game (valid_seen's Laptop/DeskLamp-328: a reset 2 s, a step
    # 0.1 s) where seed 0 draws a kitchen (8 s, 0.4 s); the checker's ~9 resets and ~90
    # steps are the same either way.
    if mode == "ray":
        request.getfixturevalue("local_ray")
    pool = make_pool(ID, 1, mode=mode, split="valid_seen", timeout_s=300)
    try:
        assert check_env(pool[0], num_seeds=1, seed=10) == []
    finally:
        pool.close()


@pytest.mark.slow
def test_gymnasium_checker(alfworld):
    assert "GYM_CHECK_OK" in gym_check(alfworld, ID, "alfworld_env:ALFWorldEnv", 50, "valid_seen")


@pytest.mark.slow
def test_train_env_alfworld_runs_two_rl_steps(alfworld, tmp_path):
    cfg = train_two_rl_steps(["env=alfworld"], tmp_path)
    assert cfg.env.pool_mode == "subprocess" and cfg.env.id == ID


def test_eval_split_flag_takes_the_benchmark_names(capsys):
    # an env that rejects the split name is a set-up error: one line naming it, exit 2
    code = main(["eval", "--env", "arborl/Maze-v0", "--split", "valid_unseen", "--policy",
                 "random", "--num-episodes", "1", "--no-baselines"])  # fmt: skip
    assert code == 2
    assert "split='valid_unseen' is not one of" in capsys.readouterr().err
