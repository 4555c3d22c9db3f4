"""Oracle demos with recoverable mistakes: random other legal actions at rate epsilon,
the oracle's recovery after each, and only the oracle's turns marked for training."""

from __future__ import annotations

import random

import pytest

from arborl.envs import make
from arborl.envs.demos import oracle_demo


def test_epsilon_zero_is_the_oracle_alone():
    env = make("arborl/Maze-v0")
    traj = oracle_demo(env, "arborl/Maze-v0", seed=3, split="test")
    assert traj.won and "turn_loss" not in traj.meta and traj.meta["policy"] == "oracle"


def test_mistakes_are_other_legal_actions_not_trained_and_the_oracle_recovers():
    env = make("arborl/Maze-v0", max_turns=40)  # room to recover from a few mistakes
    rng = random.Random(0)
    demos = [oracle_demo(env, "arborl/Maze-v0", s, "train", 0.3, rng) for s in range(20)]
    mistakes = recovered = 0
    for t in demos:
        losses = t.meta["turn_loss"]
        assert len(losses) == len(t.steps) and t.meta["epsilon"] == 0.3
        # replay: a mistake differs from what the oracle would have done there
        env.reset(seed=t.seed, options={"split": "train"})
        for step, trained in zip(t.steps, losses, strict=True):
            if not trained:
                mistakes += 1
                assert step.action != env.oracle_action()
            env.step(step.action)
        assert losses[-1] is True or not t.won  # a won demo ends on an oracle move
        recovered += t.won and not all(losses)
    assert 0.15 < mistakes / sum(len(t.steps) for t in demos) < 0.45
    assert recovered >= 10  # demos with a mistake that the oracle still won
    again = [oracle_demo(env, "arborl/Maze-v0", s, "train", 0.3, random.Random(0)) for s in [0]]
    assert [s.action for s in again[0].steps] == [s.action for s in demos[0].steps]


def test_an_env_without_an_action_list_cannot_make_mistakes():
    env = make("arborl/ToolQA-v0")
    with pytest.raises(ValueError, match="no info\\['available_actions'\\]"):
        oracle_demo(env, "arborl/ToolQA-v0", 0, "train", 1.0, random.Random(0))
    with pytest.raises(ValueError, match="epsilon=1.5"):
        oracle_demo(env, "arborl/ToolQA-v0", 0, "train", 1.5, random.Random(0))
