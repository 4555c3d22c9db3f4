"""docs/envs.md's complete example (Tower of Hanoi in its own package) is what the docs
show, conforms, and has an oracle that wins and recovers; a `TextEnv`'s default
instruction states its action format."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from arborl.envs import check_env, make, registry

from ._hanoi import HANOI_ID, HANOI_SRC
from .user_env_example import GuessDigitEnv

DOCS = Path(__file__).parents[2] / "docs" / "envs.md"


@pytest.fixture
def hanoi(monkeypatch):
    """The package importable and its env registered (as its entry point would)."""
    monkeypatch.syspath_prepend(str(HANOI_SRC))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    import newbie_hanoi

    newbie_hanoi.register_envs()
    yield newbie_hanoi
    sys.modules.pop("newbie_hanoi", None)


@pytest.mark.parametrize(
    "name, lang",
    [("newbie_hanoi/__init__.py", "python"), ("newbie_hanoi/hanoi.yaml", "yaml"),
     ("pyproject.toml", "toml")],
)  # fmt: skip
def test_the_docs_show_the_package_files_as_they_are(name, lang):
    text = DOCS.read_text()
    block = re.search(
        rf"`{re.escape(name)}`[^\n]*\n(?:[^\n]+\n)*?\n```{lang}\n(.*?)```", text, re.S
    )
    assert block, f"docs/envs.md has no {lang} block after `{name}`"
    assert block.group(1) == (HANOI_SRC / name).read_text()


def test_hanoi_conforms_and_its_oracle_wins_every_split(hanoi):
    assert check_env(HANOI_ID) == []
    for split in ("train", "val", "test"):
        for seed in range(30):
            env = make(HANOI_ID, split=split)
            env.reset(seed=seed)
            for _ in range(2**3 - 1):  # the optimal solution is at most 2^n - 1 moves
                *_, terminated, _, info = env.step(env.oracle_action())
                if terminated:
                    break
            assert info["won"], (split, seed)


def test_the_oracle_recovers_after_wrong_moves(hanoi):
    """From wherever random legal moves led, the oracle still wins (what demos with
    mistakes rely on)."""
    rng = random.Random(0)
    for seed in range(20):
        env = make(HANOI_ID, max_turns=100)
        obs, info = env.reset(seed=seed)
        for _ in range(5):
            if info["won"]:
                break
            obs, _, _, _, info = env.step(rng.choice(info["available_actions"]))
        for _ in range(2**3 - 1):
            if info["won"]:
                break
            obs, _, _, _, info = env.step(env.oracle_action())
        assert info["won"], seed


def test_hanoi_actions_heuristic_and_instruction(hanoi):
    env = make(HANOI_ID)
    obs, info = env.reset(seed=3)
    # the default instruction: the description, then how to answer
    assert env.instruction == f"{env.description}\nReply with {env.action_format}."
    assert env.oracle_action() in info["available_actions"]
    _, _, _, _, bad = env.step("C C")
    assert not bad["valid_action"]
    h = hanoi.heuristic
    assert h(SimpleNamespace(observation=obs, won=True)) == 1.0
    assert (
        h(SimpleNamespace(observation="A: 3\nB:\nC: 2 1\ngoal: every disk on C", won=False)) == 0.0
    )
    assert h(
        SimpleNamespace(observation="A: 1\nB: \nC: 3 2\ngoal: every disk on C", won=False)
    ) == pytest.approx(2 / 3)
    assert registry.spec(HANOI_ID).load_heuristic() is h


def test_a_text_env_instruction_states_its_action_format():
    env = GuessDigitEnv()
    env.reset(seed=0)
    assert env.instruction.endswith("Reply with a digit 0-9.")
    assert env.instruction.startswith(GuessDigitEnv.description)
