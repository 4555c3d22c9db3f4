"""Tiny envs for the RL sanity suite, where the right answer is known in closed form.

Each has one-letter actions and a few-character observation, so a 0.1M-parameter model
learns them in a few dozen RL steps. Their "oracle" is a *uniformly random* legal action
(seeded by the reset seed): the SFT warm start on its demos teaches the action format and
a uniform policy, nothing about which action is right, so whatever success appears later
was learned by RL.

- `arborl-test/Bandit-v0`: one turn, four arms `a b c d`; arm `c` pays 1, the rest 0.
  Chance: 0.25; the optimum wins every time.
- `arborl-test/Corridor-v0`: cells 0..3, start at 0, moves `l`/`r` (`l` at 0 stays); the
  only reward, 1, comes on reaching cell 3, at most 5 moves. Delayed: three right moves in
  a row before any reward. Random policy: P(win) = 0.25 (by enumeration of 2^5 paths).
- `arborl-test/Coin-v0`: 3 turns, a coin to `t`ake or to `w`ait; taking it pays 1 and ends
  the episode; a coin never taken is paid (1) at the last turn anyway. Every episode's
  return is 1, so episode-level baselines (GRPO) see no difference at all; only a
  step-level signal with discounting (GiGPO's anchor groups, PPO's GAE with gamma < 1)
  says that taking now beats waiting. `won` = taken at the first turn (chance 0.5).
"""

from __future__ import annotations

import random
from typing import Any

from arborl.envs import register
from arborl.envs.base import TextEnv


class _TinyEnv(TextEnv):
    """Shared plumbing: one fixed task, a random-action oracle seeded by the reset seed."""

    actions: tuple[str, ...] = ()
    _state_attrs = ("pos", "_rng", "_won_flag")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        super().__init__(split=split, max_turns=max_turns)
        self.pos, self._won_flag, self._rng = 0, False, random.Random(0)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._rng = random.Random(f"oracle:{seed}")
        return super().reset(seed=seed, options=options)

    def _sample_task(self, rng, split: str) -> dict:
        return {"name": self.env_id}

    def _task_id(self, task: dict) -> str:
        return "0"

    def _start(self, task: dict) -> str:
        self.pos, self._won_flag = 0, False
        return self._render()

    def _render(self) -> str:
        return f"s{self.pos}"

    def _anchor(self) -> Any:
        return self.pos

    def _won(self) -> bool:
        return self._won_flag

    def _available_actions(self) -> list[str]:
        return list(self.actions)

    def oracle_action(self) -> str:
        return self._rng.choice(self.actions)


class BanditEnv(_TinyEnv):
    env_id = "arborl-test/Bandit-v0"
    description = "Pick an arm: a, b, c or d."
    default_max_turns = 1
    actions = ("a", "b", "c", "d")

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        arm = action.strip().lower()
        if arm not in self.actions:
            return "invalid", 0.0, True, False
        self._won_flag = arm == "c"
        return "done", float(self._won_flag), True, True


class CorridorEnv(_TinyEnv):
    env_id = "arborl-test/Corridor-v0"
    description = "Walk to cell 3: reply l or r."
    default_max_turns = 5
    actions = ("l", "r")

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        move = action.strip().lower()
        if move not in self.actions:
            return "invalid\n" + self._render(), 0.0, False, False
        self.pos = min(3, self.pos + 1) if move == "r" else max(0, self.pos - 1)
        self._won_flag = self.pos == 3
        return self._render(), float(self._won_flag), self._won_flag, True


class CoinEnv(_TinyEnv):
    env_id = "arborl-test/Coin-v0"
    description = "A coin: t to take it, w to wait."
    default_max_turns = 3
    actions = ("t", "w")

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        move = action.strip().lower()
        last = self.turn + 1 >= self.max_turns  # the coin is paid at the last turn anyway
        if move == "t":
            self._won_flag = self.turn == 0
            return "taken", 1.0, True, True
        self.pos += 1
        return self._render(), float(last), last, move == "w"


for _cls in (BanditEnv, CorridorEnv, CoinEnv):
    register(_cls.env_id, entry_point=_cls)
