"""Heuristic evaluators are found through the env registry: each env names its own."""

from __future__ import annotations

import pytest

from arborl.envs import register, registry
from arborl.search import HEURISTICS, heuristic_evaluator
from arborl.search.base import NodeView


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def view(obs: str) -> NodeView:
    return NodeView(node_id=0, path=(), instruction="", observation=obs)


def test_builtin_heuristics_come_from_the_registry():
    assert sorted(HEURISTICS) == ["arborl/Countdown-v0", "arborl/Game24-v0",
                                  "arborl/Maze-v0", "arborl/Sokoban-v0"]  # fmt: skip
    assert "arborl/Wordle-v0" not in HEURISTICS and "no/Such-v0" not in HEURISTICS
    assert heuristic_evaluator("arborl/Maze-v0").score([view("A.G")], seed=0) == [1 / 3]


def test_a_registered_env_s_heuristic_is_found_and_one_without_is_named(clean_registry):
    register("user/Scored-v0", entry_point="tests.envs.user_env_example:GuessDigitEnv",
             heuristic=lambda v: 0.25 if "x" in v.observation else 0.75)  # fmt: skip
    assert "user/Scored-v0" in HEURISTICS
    ev = heuristic_evaluator("user/Scored-v0")
    assert ev.name == "heuristic:user/Scored-v0"
    assert ev.score([view("x"), view("y")], seed=0) == [0.25, 0.75]
    register("user/Plain-v0", entry_point="tests.envs.user_env_example:GuessDigitEnv")
    with pytest.raises(ValueError, match=r"env 'user/Plain-v0': its registration names no "
                                         r"heuristic; envs with one: \['arborl/Count"):  # fmt: skip
        heuristic_evaluator("user/Plain-v0")
    with pytest.raises(ValueError, match=r"'no/Such-v0': no env is registered under that id"):
        heuristic_evaluator("no/Such-v0")
