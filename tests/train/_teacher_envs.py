"""A tiny env where imitation of offline oracle demos stalls and DAgger does not.

`arborl-test/Ledge-v0`: walk cells 0..3 along a ledge (observations `s0`..`s3`) with one
letter a turn: `r` steps right, `w` waits, `u` climbs up. Before each turn a hidden gust
blows with probability 0.3 (drawn from the reset seed): `r` in a gust throws the walker
off the ledge, into the trap `t<cell>`, where only `u` climbs back (to `s<cell>`); every
other move there keeps it in. Reaching cell 3 wins; 12 turns at most.

The oracle sees the gust: it steps `r` in calm air, waits `w` in a gust, and climbs `u`
in the trap. Its demos therefore never enter the trap, and a student that cannot see the
gust imitates it as (0.7 r, 0.3 w) on the ledge, falls in the trap about 0.21 a turn, and
has never seen what to do there: P(win) ~ (0.49 / 0.70)^3 ~ 0.34 however well it
imitates. Labelled on its own states (DAgger), it learns `u` in the trap and wins most
episodes (~0.75 by the same arithmetic, the climb costing a turn).
"""

from __future__ import annotations

import random
from typing import Any

from arborl.envs import register
from arborl.envs.base import TextEnv

GUST = 0.3


class LedgeEnv(TextEnv):
    env_id = "arborl-test/Ledge-v0"
    description = "Walk right to cell 3: r steps, w waits, u climbs back from the trap."
    default_max_turns = 12
    actions = ("r", "w", "u")
    _state_attrs = ("pos", "trapped", "gust", "_rng")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        super().__init__(split=split, max_turns=max_turns)
        self.pos, self.trapped, self.gust, self._rng = 0, False, False, random.Random(0)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._rng = random.Random(f"gust:{seed}")
        return super().reset(seed=seed, options=options)

    def _sample_task(self, rng, split: str) -> dict:
        return {"name": self.env_id}

    def _task_id(self, task: dict) -> str:
        return "0"

    def _start(self, task: dict) -> str:
        self.pos, self.trapped = 0, False
        self._blow()
        return self._render()

    def _blow(self) -> None:
        self.gust = self._rng.random() < GUST

    def _render(self) -> str:
        return f"{'t' if self.trapped else 's'}{self.pos}"

    def _anchor(self) -> Any:
        return (self.pos, self.trapped)

    def _won(self) -> bool:
        return self.pos == 3

    def _available_actions(self) -> list[str]:
        return list(self.actions)

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        move = action.strip().lower()
        if move not in self.actions:
            self._blow()
            return "invalid\n" + self._render(), 0.0, False, False
        if self.trapped:
            self.trapped = move != "u"
        elif move == "r":
            if self.gust:
                self.trapped = True
            else:
                self.pos += 1
        self._blow()
        won = self._won()
        return self._render(), float(won), won, True

    def oracle_action(self) -> str:
        if self.trapped:
            return "u"
        return "w" if self.gust else "r"


register(LedgeEnv.env_id, entry_point=LedgeEnv)
