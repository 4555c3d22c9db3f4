"""Conformance: every registered env passes `check_env`, survives fuzzing, and the checker
itself catches broken envs (so a pass means something)."""

from __future__ import annotations

import importlib.util
import random

import pytest

from arborl.envs import EnvCheckError, check_env, make, registered_ids, spec
from arborl.envs.check import GARBAGE_ACTIONS

from .user_env_example import GuessDigitEnv


def _make_or_skip(env_id: str):
    entry = spec(env_id).entry_point
    if isinstance(entry, str) and importlib.util.find_spec(entry.partition(":")[0]) is None:
        pytest.skip(f"{env_id}: module of {entry!r} is not written yet")
    return make(env_id)


@pytest.mark.parametrize("env_id", registered_ids())
def test_registered_env_conforms(env_id):
    assert check_env(_make_or_skip(env_id), num_seeds=3, seed=0) == []


@pytest.mark.parametrize("env_id", registered_ids())
def test_random_action_fuzz(env_id):
    """1,000 random actions (legal ones, near-misses and junk) raise nothing."""
    env = _make_or_skip(env_id)
    rng = random.Random(7)
    obs, info = env.reset(seed=0)
    num_resets = 0
    for _ in range(1000):
        acts = info.get("available_actions") or ["up", "1 + 1", "guess[crane]"]
        kind = rng.random()
        if kind < 0.6:
            action = rng.choice(acts)
        elif kind < 0.8:
            action = rng.choice(acts).upper() + rng.choice([" ", "!", "\n", ""])
        else:
            action = rng.choice(GARBAGE_ACTIONS)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and isinstance(info["valid_action"], bool)
        if terminated or truncated:
            num_resets += 1
            obs, info = env.reset(seed=rng.randint(0, 10**6))
    assert num_resets > 0  # episodes really ended and restarted


@pytest.mark.parametrize("env_id", registered_ids())
def test_oracle_wins_every_test_task(env_id):
    """The oracle solves 100 of 100 test tasks of every registered env (all are
    deterministic and solvable by construction at their registered settings; slippery
    FrozenLake, which is not, has its own rate test in test_frozenlake.py)."""
    env = _make_or_skip(env_id)
    env.split = "test"
    wins = 0
    for seed in range(100):
        env.reset(seed=seed)
        info = {}
        while not env.done:
            *_, info = env.step(env.oracle_action())
        wins += bool(info.get("won"))
    assert wins == 100


class _Broken(GuessDigitEnv):
    """A GuessDigitEnv with selectable bugs."""

    bug = ""

    def _act(self, action):
        if self.bug == "raises" and not action.strip().isdigit():
            raise ValueError("cannot parse")
        if self.bug == "accepts_junk":
            return "ok", 0.0, False, True
        return super()._act(action)

    def _start(self, task):
        obs = super()._start(task)
        return obs + str(random.random()) if self.bug == "nondeterministic" else obs

    def _anchor(self):
        return [self.last] if self.bug == "unhashable" else super()._anchor()

    def snapshot(self):
        snap = super().snapshot()
        if self.bug == "shared_snapshot":
            snap["task"] = self.task  # aliases live state
        return snap


@pytest.mark.parametrize(
    "bug, expected",
    [
        ("raises", "raised ValueError"),
        ("accepts_junk", "valid_action=True"),
        ("nondeterministic", "different observations"),
        ("unhashable", "not hashable"),
    ],
)
def test_checker_catches_bugs(bug, expected):
    env = _Broken()
    env.bug = bug
    with pytest.raises(EnvCheckError) as e:
        check_env(env, num_seeds=1)
    assert expected in str(e.value)
    assert e.value.failures  # the list of every failure is kept


def test_checker_catches_shared_snapshot():
    class Mutating(_Broken):
        def _act(self, action):
            self.task["digit"] = (self.task["digit"] + 1) % 10  # mutates through the alias
            return super()._act(action)

    env = Mutating()
    env.bug = "shared_snapshot"
    failures = check_env(env, num_seeds=2, raise_errors=False)
    assert any("snapshot" in f for f in failures), failures


def test_checker_catches_wrong_truncation():
    class LateTruncation(GuessDigitEnv):
        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            return obs, r, term, trunc and self.turn > self.max_turns, info

    failures = check_env(LateTruncation(), num_seeds=1, raise_errors=False)
    assert any("truncated=False at turn 5 of max_turns=5" in f for f in failures), failures


def test_close_is_idempotent_and_checked():
    class BadClose(GuessDigitEnv):
        def close(self):
            if self._closed:
                raise RuntimeError("closed twice")
            super().close()

    failures = check_env(BadClose(), num_seeds=1, raise_errors=False)
    assert failures == ["close() twice raised RuntimeError('closed twice')"]


def test_checker_catches_state_missing_from_snapshot():
    from arborl.envs.builtin.maze import MazeEnv

    class Forgetful(MazeEnv):
        _state_attrs = ()  # `pos` is not snapshotted: restore keeps the moved agent

    failures = check_env(Forgetful(), num_seeds=2, raise_errors=False)
    assert any("restore(snapshot)" in f for f in failures), failures
