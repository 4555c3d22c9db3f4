"""Registry: lazy entry points, versioned ids, helpful errors, Gymnasium mirror, plug-ins."""

from __future__ import annotations

import importlib.metadata
import sys

import gymnasium
import pytest

import arborl.envs as envs
from arborl.envs import check_env, make, register, registered_ids, registry, spec
from arborl.envs.builtin.maze import MazeEnv

from .user_env_example import GuessDigitEnv

USER_ID = "user/GuessDigit-v0"
USER_ENTRY = f"{GuessDigitEnv.__module__}:GuessDigitEnv"


@pytest.fixture
def clean_registry(monkeypatch):
    """Let a test register ids without leaking them into the other tests."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield registry._REGISTRY


def test_exports():
    for name in ("Env", "TextEnv", "INFO_KEYS", "register", "make", "spec",
                 "registered_ids", "check_env", "EnvPool"):  # fmt: skip
        assert hasattr(envs, name), name


def test_builtins_registered_with_specs():
    ids = registered_ids()
    for env_id in ("arborl/Maze-v0", "arborl/Sokoban-v0", "arborl/FrozenLake-v0",
                   "arborl/Countdown-v0", "arborl/Game24-v0", "arborl/Wordle-v0",
                   "arborl/WebShop-v0", "arborl/ToolQA-v0", "arborl/SQL-v0"):  # fmt: skip
        assert env_id in ids
    s = spec("arborl/Game24-v0")
    assert s.entry_point == "arborl.envs.builtin.countdown:CountdownEnv"
    assert s.kwargs["target"] == 24 and s.max_turns == 8


def test_make_applies_spec_and_overrides():
    env = make("arborl/Maze-v0", size=5, max_turns=7)
    assert isinstance(env, MazeEnv) and env.size == 5 and env.max_turns == 7
    assert make("arborl/Maze-v0").max_turns == 16  # from the spec
    game24 = make("arborl/Game24-v0")
    assert game24.target == 24 and game24.env_id == "arborl/Game24-v0"


def test_unknown_id_suggests_close_ids():
    with pytest.raises(KeyError) as e:
        make("arborl/Sokobn-v0")
    assert "arborl/Sokoban-v0" in str(e.value) and "Did you mean" in str(e.value)


def test_bad_kwarg_is_named():
    with pytest.raises(TypeError) as e:
        make("arborl/Maze-v0", sise=5)
    assert "'sise'" in str(e.value) and "size" in str(e.value)


def test_unversioned_id_and_bad_entry_point(clean_registry):
    with pytest.raises(ValueError, match="versioned"):
        register("user/NoVersion", entry_point=USER_ENTRY)
    register("user/Broken-v0", entry_point="arborl.envs.no_such_module:X")
    with pytest.raises(ImportError, match="no_such_module"):
        make("user/Broken-v0")
    register("user/BadAttr-v0", entry_point="arborl.envs.builtin.maze:NoSuchEnv")
    with pytest.raises(AttributeError, match="NoSuchEnv"):
        make("user/BadAttr-v0")


def test_heuristics_are_named_by_the_registration_and_imported_lazily(clean_registry):
    from arborl.envs.builtin import countdown, maze, sokoban

    assert spec("arborl/Maze-v0").load_heuristic() is maze.heuristic
    assert spec("arborl/Sokoban-v0").load_heuristic() is sokoban.heuristic
    for env_id in ("arborl/Countdown-v0", "arborl/Game24-v0"):
        assert spec(env_id).load_heuristic() is countdown.heuristic
    assert spec("arborl/Wordle-v0").heuristic is None
    assert spec("arborl/Wordle-v0").load_heuristic() is None
    sys.modules.pop("tests_lazy_env_module", None)
    s = register("user/Lazy-v0", entry_point="tests_lazy_env_module:Env",
                 heuristic="tests_lazy_env_module:score")  # fmt: skip
    assert "tests_lazy_env_module" not in sys.modules
    with pytest.raises(ImportError, match=r"env 'user/Lazy-v0' heuristic='tests_lazy_env_module"):
        s.load_heuristic()
    with pytest.raises(ValueError, match=r"heuristic='no colon' must be 'module:function'"):
        register("user/Bad-v0", entry_point=USER_ENTRY, heuristic="no colon")


def test_lazy_import(clean_registry):
    sys.modules.pop("tests_lazy_env_module", None)
    register("user/Lazy-v0", entry_point="tests_lazy_env_module:Env")
    assert "tests_lazy_env_module" not in sys.modules  # registering imports nothing
    assert "user/Lazy-v0" in registered_ids()


def test_user_env_registered_by_string_passes_check_and_gymnasium(clean_registry):
    register(USER_ID, entry_point=USER_ENTRY, description="digits")
    env = make(USER_ID)
    assert isinstance(env, GuessDigitEnv) and env.env_id == USER_ID
    assert check_env(USER_ID) == []
    genv = gymnasium.make(USER_ID)
    obs, info = genv.reset(seed=0)
    assert obs == "Guess a digit." and info["valid_action"] is True
    obs, reward, terminated, truncated, info = genv.step("5")
    assert obs in ("higher", "lower", "Correct!") and isinstance(reward, float)
    genv.close()


def test_gymnasium_make_builtin():
    genv = gymnasium.make("arborl/Sokoban-v0")
    obs, info = genv.reset(seed=0)
    assert obs == make("arborl/Sokoban-v0").reset(seed=0)[0]
    obs, reward, terminated, truncated, info = genv.step("up")
    assert info["valid_action"] is True and not truncated
    assert genv.step("nonsense")[4]["valid_action"] is False
    genv.close()


class _FakeEP:
    """Stands in for importlib.metadata.EntryPoint (name, value, load)."""

    def __init__(self, name, value, obj):
        self.name, self.value, self._obj = name, value, obj

    def load(self):
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


def test_entry_point_discovery(clean_registry, monkeypatch):
    calls = []

    def plugin_register():
        calls.append(1)
        register("plug/FromCallable-v0", entry_point=USER_ENTRY)

    eps = [
        _FakeEP("plug/FromClass-v0", USER_ENTRY, GuessDigitEnv),
        _FakeEP("plug-hook", "plugmod:plugin_register", plugin_register),
        _FakeEP("plug/Broken-v0", "plugmod:Missing", ImportError("no plugmod")),
    ]
    seen_groups = []

    def fake_entry_points(group=None):
        seen_groups.append(group)
        return eps

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    with pytest.warns(RuntimeWarning, match="plug/Broken-v0"):
        ids = registered_ids()
    assert seen_groups == ["arborl.envs"]
    assert {"plug/FromClass-v0", "plug/FromCallable-v0"} <= set(ids)
    assert "plug/Broken-v0" not in ids
    assert isinstance(make("plug/FromClass-v0"), GuessDigitEnv)
    registered_ids()
    assert calls == [1] and seen_groups == ["arborl.envs"]  # read once, lazily


def test_callable_entry_point(clean_registry):
    register("user/Factory-v0", entry_point=lambda split="train": GuessDigitEnv(split=split))
    assert make("user/Factory-v0", split="test").split == "test"
    with pytest.raises(TypeError, match="'colour'"):
        make("user/Factory-v0", colour="red")


def test_plugin_env_is_in_gymnasium_right_after_import_arborl_envs(tmp_path):
    """A package with an `arborl.envs` entry point (a dist-info on sys.path, as pip leaves
    it): `gymnasium.make` finds its id after `import arborl.envs` alone, and the plug-in's
    module is imported only when the env is made. A fresh interpreter: this process has
    read its entry points already."""
    from ._hanoi import HANOI_ID, install_hanoi, run_fresh

    code = f"""
import sys, gymnasium, arborl.envs
assert "newbie_hanoi" not in sys.modules, "imported before it was made"
env = gymnasium.make({HANOI_ID!r})
obs, info = env.reset(seed=0)
assert obs.endswith("goal: every disk on " + "ABC"[env.unwrapped.env.task["goal"]]), obs
obs, reward, terminated, truncated, info = env.step(env.unwrapped.env.oracle_action())
assert info["valid_action"], info
print("ok", arborl.envs.spec({HANOI_ID!r}).heuristic)
"""
    done = run_fresh(code, install_hanoi(tmp_path / "site"), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "newbie_hanoi:heuristic"]


def test_a_registration_function_not_named_by_an_id_reaches_gymnasium_too(tmp_path):
    from ._hanoi import HANOI_ID, install_hanoi, run_fresh

    paths = install_hanoi(tmp_path / "site")
    ep = tmp_path / "site" / "newbie_hanoi-0.1.dist-info" / "entry_points.txt"
    ep.write_text("[arborl.envs]\nhanoi-envs = newbie_hanoi:register_envs\n")
    code = f"import gymnasium, arborl.envs\ngymnasium.make({HANOI_ID!r}).reset(seed=1)\n"
    done = run_fresh(code, paths, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def test_specs_travel_to_a_process_that_did_not_register_them(monkeypatch):
    """`specs_of` here, `adopt` there (a Ray actor): unknown ids are registered with the
    sender's spec, a known id keeps the receiver's own."""
    import pickle

    from arborl.envs import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("me/Shipped-v0", "arborl.envs.builtin.maze:MazeEnv", max_turns=7)
    sent = pickle.loads(
        pickle.dumps(registry.specs_of(["me/Shipped-v0", "arborl/Maze-v0", "me/None-v0"]))
    )
    assert sorted(sent) == ["arborl/Maze-v0", "me/Shipped-v0"]
    own_maze = registry.spec("arborl/Maze-v0")
    del registry._REGISTRY["me/Shipped-v0"]
    sent["arborl/Maze-v0"] = registry.EnvSpec("arborl/Maze-v0", "nowhere:Nothing")
    registry.adopt(sent)
    assert registry.spec("me/Shipped-v0").max_turns == 7
    assert registry.make("me/Shipped-v0").max_turns == 7
    assert registry.spec("arborl/Maze-v0") is own_maze
