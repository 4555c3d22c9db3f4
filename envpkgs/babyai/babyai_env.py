"""BabyAI levels (minigrid) as arborl text envs, with the BabyAI bot as oracle.

The observation is the mission plus arborl's language view of the egocentric window
(`babyai_text.describe`). Actions are six fixed phrases (`available_actions`); anything
else is `valid_action=False` and changes nothing. `won` is minigrid's success (a positive
reward at termination), rewarded 1. The level's own step limit is lifted: arborl's turn
limit ends episodes. The simulator is plain Python, so snapshots are exact deep copies
(`TextEnv`'s), no replay; `anchor` is minigrid's state hash (grid, agent, carried object).
A split is a disjoint seed range (BabyAI has no official split: levels are procedural).
"""

from __future__ import annotations

import contextlib
import io

import gymnasium as gym
import minigrid  # noqa: F401 - registers the BabyAI-* ids
from babyai_text import describe
from minigrid.utils.baby_ai_bot import BabyAIBot

from arborl.envs.base import TextEnv

ACTIONS = {"turn left": 0, "turn right": 1, "move forward": 2, "pick up": 3, "drop": 4,
           "toggle": 5}  # fmt: skip
"""Text action -> minigrid action index (minigrid's `done`, 6, is unused by BabyAI)."""
SEED_RANGES = {
    "train": (0, 10**9),
    "val": (10**9, 10**9 + 10**6),
    "test": (2 * 10**9, 2 * 10**9 + 10**6),
}
"""Disjoint task-seed ranges per split."""


class BabyAIEnv(TextEnv):
    """One BabyAI level; subclasses set `level` and `description`."""

    level = ""
    action_format = "one of: " + ", ".join(ACTIONS)
    _state_attrs = ("world", "success")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        super().__init__(split, max_turns)
        self.world = None
        self.success = False
        self._bot = None

    def _sample_task(self, rng, split: str) -> dict:
        lo, hi = SEED_RANGES[split]
        return {"level": self.level, "seed": rng.randrange(lo, hi)}

    def _task_id(self, task: dict) -> str:
        return f"{task['level']}/{task['seed']}"

    def _start(self, task: dict) -> str:
        self.world = gym.make(task["level"]).unwrapped
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints its rejections
            obs, _ = self.world.reset(seed=task["seed"])
        self.world.max_steps = 10**9  # arborl's turn limit ends the episode
        self.success, self._bot = False, None
        return self._view(obs)

    def _instruction(self, task: dict) -> str:
        return f"{self.description}\nMission: {self.world.mission}"

    def _view(self, obs) -> str:
        carrying = self.world.carrying
        held = f"a {carrying.color} {carrying.type}" if carrying is not None else None
        return f"Mission: {obs['mission']}\n{describe(obs['image'], held)}"

    def _act(self, action: str):
        key = action.strip().lower()
        if key not in ACTIONS:
            obs = self.world.gen_obs()
            return f"Unknown action {action[:30]!r}. " + self._view(obs), 0.0, False, False
        obs, reward, terminated, _, _ = self.world.step(ACTIONS[key])
        self.success = bool(terminated and reward > 0)
        return self._view(obs), float(self.success), bool(terminated), True

    def _anchor(self):
        return self.world.hash()

    def _won(self) -> bool:
        return self.success

    def _available_actions(self):
        return list(ACTIONS)

    def restore(self, state) -> None:
        super().restore(state)
        self._bot = None  # the bot's plan belongs to the state it saw

    def oracle_action(self) -> str:
        """The BabyAI bot's action (it replans from the true state every step)."""
        if self._bot is None:
            self._bot = BabyAIBot(self.world)
        idx = int(self._bot.replan())
        return next((k for k, v in ACTIONS.items() if v == idx), "toggle")


def _level(name: str, level: str, text: str) -> type:
    return type(name, (BabyAIEnv,), {
        "env_id": f"babyai/{name.removesuffix('Env')}-v0", "level": level,
        "default_max_turns": 64, "description": f"BabyAI {text} You see a 7x7 window ahead.",
    })  # fmt: skip


GoToLocalEnv = _level("GoToLocalEnv", "BabyAI-GoToLocal-v0", "GoToLocal: go to the named object.")
PickupLocEnv = _level("PickupLocEnv", "BabyAI-PickupLoc-v0", "PickupLoc: pick up the named object.")
OpenDoorEnv = _level("OpenDoorEnv", "BabyAI-OpenDoor-v0", "OpenDoor: open the named door.")
PutNextLocalEnv = _level(
    "PutNextLocalEnv", "BabyAI-PutNextLocal-v0", "PutNextLocal: put one object next to another."
)
