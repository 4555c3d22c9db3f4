"""Gymnasium interop (issue 17, requirements 3-4): every registered env passes Gymnasium's
own `env_checker` through `gymnasium.make`, and a Gymnasium-style user env with no turn
counting of its own gets the framework's turn limit from `register(..., max_turns=N)`."""

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

from arborl.envs import check_env, make, register, registered_ids
from arborl.envs.wrappers import TurnLimit


@pytest.mark.parametrize("env_id", registered_ids())
def test_gymnasium_checker_passes_through_gymnasium_make(env_id):
    env = gymnasium.make(env_id)
    obs, _ = env.reset(seed=3)
    # Boards, punctuation and newlines are in the space (Gymnasium's default charset is
    # alphanumeric, which put every one of these observations outside it).
    assert env.observation_space.contains(obs) and not obs.isalnum()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings count as failures here
        gym_check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ["arborl/Maze-v0", "arborl/FrozenLake-v0"])
def test_unseeded_reset_continues_the_stream_of_the_last_seeded_one(env_id):
    env = make(env_id)
    runs = []
    for _ in range(2):
        first = env.reset(seed=11)[0]
        runs.append([first] + [env.reset()[0] for _ in range(4)])
    assert runs[0] == runs[1]
    assert len(set(runs[0][1:])) > 1  # the unseeded resets are not all the same task


class NoTurnCount:
    """Gymnasium-style: no `max_turns` argument or attribute; never truncates by itself.
    Say the target word to win; other words are legal moves, anything else is invalid."""

    instruction = "say yes, no or win"
    WORDS = ("yes", "no", "win")

    def __init__(self, target: str = "win") -> None:
        self.target, self.steps = target, 0

    def _info(self, won: bool, valid: bool) -> dict:
        return {"won": won, "valid_action": valid, "task_id": self.target, "anchor": self.steps}

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        return "start", self._info(False, True)

    def step(self, action):
        valid = action in self.WORDS
        self.steps += valid
        won = action == self.target
        return f"step {self.steps}", float(won), won, False, self._info(won, valid)

    def snapshot(self):
        return {"steps": self.steps}

    def restore(self, state):
        self.steps = state["steps"]

    def close(self):
        pass


def test_register_max_turns_wraps_an_env_that_does_not_take_it():
    register("user/NoTurnCount-v0", NoTurnCount, max_turns=3)
    env = make("user/NoTurnCount-v0", target="yes")  # was a TypeError: max_turns passed in
    assert isinstance(env, TurnLimit) and env.max_turns == 3 and env.target == "yes"
    env.reset(seed=0)
    flags = [env.step("no")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]  # truncated at turn 3
    env.reset(seed=0)
    env.step("no")
    snap = env.snapshot()
    env.step("no")
    env.restore(snap)  # back to turn 1: two more steps reach the limit
    assert env.step("no")[3] is False and env.step("no")[3] is True
    env.reset(seed=0)
    assert env.step("yes")[2:4] == (True, False)  # a win is not also a truncation
    assert env.env_id == "user/NoTurnCount-v0"  # set by make, on the wrapped env


def test_make_takes_a_turn_limit_for_any_env():
    register("user/NoTurnCount-v0", NoTurnCount, max_turns=3)
    env = make("user/NoTurnCount-v0", max_turns=5)  # the caller's limit replaces the spec's
    assert isinstance(env, TurnLimit) and env.max_turns == 5
    register("user/NoTurnCountRaw-v0", NoTurnCount)
    env = make("user/NoTurnCountRaw-v0", max_turns=2)  # was a TypeError: not a kwarg it takes
    env.reset(seed=0)
    assert [env.step("no")[3] for _ in range(2)] == [False, True]
    assert make("arborl/Maze-v0", max_turns=40).max_turns == 40  # passed to a constructor


def test_check_env_accepts_an_env_without_its_own_turn_limit():
    register("user/NoTurnCount-v0", NoTurnCount, max_turns=3)
    check_env("user/NoTurnCount-v0")  # truncation at the registered limit is checked
    register("user/NoTurnCountRaw-v0", NoTurnCount)  # no limit anywhere
    env = make("user/NoTurnCountRaw-v0")
    assert not isinstance(env, TurnLimit) and not hasattr(env, "max_turns")
    check_env("user/NoTurnCountRaw-v0")  # was "env.max_turns must be a positive int"
    with pytest.raises(ValueError, match="max_turns=0 must be an int >= 1"):
        TurnLimit(env, 0)
