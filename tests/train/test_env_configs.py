"""The `env` section: the demo's kwargs only for the demo's env, kwargs checked against
the env before any work, and config groups shipped by packages (`arborl.env_configs`)."""

from __future__ import annotations

import time

import pytest

from arborl.config import ConfigError
from arborl.train.config import load_train_config


def test_the_demo_env_keeps_its_kwargs_and_only_it():
    # `make demo-maze` = `arborl train`: Maze with one-letter moves, as before
    cfg = load_train_config([])
    assert (cfg.env.id, cfg.env.kwargs) == ("arborl/Maze-v0", {"short_actions": True})
    # a knob of the demo's maze adds to the demo's kwargs
    assert load_train_config(["env.kwargs.size=8"]).env.kwargs == {"short_actions": True, "size": 8}
    # choosing an env (env.id, or env=NAME) starts from no kwargs: nothing of Maze's merges in
    cfg = load_train_config(["env.id=arborl/Sokoban-v0", "env.kwargs.num_boxes=2"])
    assert (cfg.env.id, cfg.env.kwargs) == ("arborl/Sokoban-v0", {"num_boxes": 2})
    assert load_train_config(["env.id=arborl/Countdown-v0"]).env.kwargs == {}
    assert load_train_config(["env=sokoban", "env.kwargs.num_boxes=2"]).env.kwargs == {
        "num_boxes": 2
    }


def test_a_config_file_that_sets_env_id_chooses_the_env(tmp_path):
    chosen = tmp_path / "run.yaml"
    chosen.write_text("env: {id: arborl/FrozenLake-v0, kwargs: {slippery: true}}\n")
    assert load_train_config(files=[chosen]).env.kwargs == {"slippery": True}
    tweak = tmp_path / "tweak.yaml"  # no id: the demo's env, with this knob on top
    tweak.write_text("env: {kwargs: {size: 7}}\n")
    assert load_train_config(files=[tweak]).env.kwargs == {"short_actions": True, "size": 7}


def test_a_kwarg_the_env_does_not_take_fails_naming_key_value_and_fix():
    with pytest.raises(ConfigError) as err:
        load_train_config(["env.id=arborl/Sokoban-v0", "env.kwargs.short_actions=true"])
    msg = str(err.value)
    assert msg.startswith("env.kwargs.short_actions=True: env 'arborl/Sokoban-v0' does not take")
    assert "'num_boxes'" in msg and "env.kwargs={} clears them all" in msg and "env=NAME" in msg


def test_arborl_train_stops_on_a_bad_kwarg_before_building_the_model(monkeypatch, capsys):
    from arborl.cli.main import main
    from arborl.train import build

    def no_model(*a, **k):
        raise AssertionError("the model was built before the config check")

    monkeypatch.setattr(build, "build_policy", no_model)
    start = time.perf_counter()
    argv = ["train", "env.id=arborl/Countdown-v0", "env.kwargs.short_actions=true"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "env.kwargs.short_actions=True: env 'arborl/Countdown-v0' does not take" in err
    assert "Traceback" not in err and time.perf_counter() - start < 30


def test_an_unknown_env_group_lists_the_known_ones():
    with pytest.raises(ConfigError, match="Did you mean 'sokoban'.*arborl.env_configs"):
        load_train_config(["env=sokobn"])


def test_a_package_ships_its_env_config_group(tmp_path):
    """The Hanoi example package (tests/envs/fixtures/hanoi_pkg) with a dist-info on the
    path, as pip would leave it: `env=hanoi` reads the YAML inside the package; a
    `module:attr` entry point gives a dict; the Maze kwargs never reach Hanoi; Hanoi's own
    knob is checked against HanoiEnv. A fresh interpreter: entry points are read once."""
    from tests.envs._hanoi import install_hanoi, run_fresh

    paths = install_hanoi(tmp_path / "site")
    ep = tmp_path / "site" / "newbie_hanoi-0.1.dist-info" / "entry_points.txt"
    ep.write_text(ep.read_text() + "hanoi4 = hanoi_cfg:CONFIG\n")
    (tmp_path / "site" / "hanoi_cfg.py").write_text(
        "CONFIG = {'id': 'newbie/Hanoi-v0', 'kwargs': {'num_disks': 4}}\n"
    )
    code = """
from arborl.config import ConfigError
from arborl.train.config import load_train_config
cfg = load_train_config(["env=hanoi"])
assert (cfg.env.id, cfg.env.kwargs) == ("newbie/Hanoi-v0", {"num_disks": 3}), cfg.env
assert (cfg.agent.memory_k, cfg.rollout.max_new_tokens) == (0, 4)  # its _root_ settings
assert load_train_config(["env=hanoi4"]).env.kwargs == {"num_disks": 4}
cfg = load_train_config(["env.id=newbie/Hanoi-v0", "env.kwargs.num_disks=5"])
assert cfg.env.kwargs == {"num_disks": 5}
try:
    load_train_config(["env=hanoi", "env.kwargs.short_actions=true"])
except ConfigError as e:
    print(e)
"""
    done = run_fresh(code, paths, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("env.kwargs.short_actions=True: env 'newbie/Hanoi-v0' does")
    assert "['num_disks', 'split', 'max_turns']" in done.stdout
