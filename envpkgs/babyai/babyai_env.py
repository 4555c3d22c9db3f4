"""BabyAI levels (minigrid) as arborl text envs, with the BabyAI bot as oracle.

One class, `BabyAIEnv(level="BabyAI-GoTo-v0")`, runs any of the BabyAI levels minigrid
registers (`LEVELS`); the manifest registers each as `babyai/<Name>-vN` with the level in
its kwargs (`babyai_levels.py manifest` writes those entries).

The observation is the mission plus arborl's language view of the egocentric window
(`babyai_text.describe`; `view="compact"`: the same facts in about half the words,
`babyai_text.describe_compact`, for small models). Actions are six fixed phrases (`available_actions`); anything
else is `valid_action=False` and changes nothing. `won` is minigrid's success (a positive
reward at termination), rewarded 1. The level's own step limit is lifted: arborl's turn
limit ends episodes. The simulator is plain Python, so snapshots are exact deep copies
(`TextEnv`'s), no replay; `anchor` is minigrid's state hash (grid, agent position and
direction), with the grid's part computed again only after an action that can change the
grid (pick up, drop, toggle): minigrid encodes the whole grid at every call, ~20% of a step.
Observations come from `babyai_fastobs.FastObs` (minigrid's image, 5x faster: the grid kept
as arrays between such actions).
A split is a disjoint seed range (BabyAI has no official split: levels are procedural).
"""

from __future__ import annotations

import contextlib
import hashlib
import io

import gymnasium as gym
import minigrid  # noqa: F401 - registers the BabyAI-* ids
from babyai_fastobs import FastObs
from babyai_text import describe, describe_compact
from minigrid.utils.baby_ai_bot import BabyAIBot

from arborl.envs.base import TextEnv

ACTIONS = {"turn left": 0, "turn right": 1, "move forward": 2, "pick up": 3, "drop": 4,
           "toggle": 5}  # fmt: skip
"""Text action -> minigrid action index (minigrid's `done`, 6, is unused by BabyAI)."""
GRID_ACTIONS = {3, 4, 5}
"""The actions that can change the grid (pick up, drop, toggle); moving and turning do not."""
SEED_RANGES = {
    "train": (0, 10**9),
    "val": (10**9, 10**9 + 10**6),
    "test": (2 * 10**9, 2 * 10**9 + 10**6),
}
"""Disjoint task-seed ranges per split."""
VIEWS = ("text", "compact")
"""The observation views (`BabyAIEnv(view=...)`)."""


LEVELS = tuple(k for k in gym.registry if k.startswith("BabyAI-"))
"""Every BabyAI level id minigrid registers (96 in minigrid 3.2.0)."""
SUMMARIES = {
    "BabyAI-GoToLocal-v0": "GoToLocal: go to the named object.",
    "BabyAI-PickupLoc-v0": "PickupLoc: pick up the named object.",
    "BabyAI-OpenDoor-v0": "OpenDoor: open the named door.",
    "BabyAI-PutNextLocal-v0": "PutNextLocal: put one object next to another.",
}
"""The task line of the first four levels arborl shipped (kept word for word); the others
get a generic one."""


def level_name(level: str) -> str:
    """`BabyAI-GoToObjS6-v1` -> `GoToObjS6-v1`, the part after arborl's `babyai/`."""
    return level.removeprefix("BabyAI-")


class BabyAIEnv(TextEnv):
    """One BabyAI level, named by its minigrid id (`level`; the class default for the
    four preset subclasses below)."""

    level = ""
    default_max_turns = 64
    action_format = "one of: " + ", ".join(ACTIONS)
    _state_attrs = ("world", "success")

    def __init__(self, split: str = "train", max_turns: int | None = None,
                 level: str | None = None, view: str = "text") -> None:  # fmt: skip
        """`view`: "text" (sentences) or "compact" (the same facts, fewer tokens)."""
        level = level or type(self).level
        if view not in VIEWS:
            raise ValueError(f"view={view!r} is not a BabyAI view; use one of {sorted(VIEWS)}")
        self.view = view
        if level not in LEVELS:
            raise ValueError(
                f"level={level!r} is not a BabyAI level of minigrid; use one of "
                f"{', '.join(LEVELS[:4])}, ... ({len(LEVELS)} in all, babyai_env.LEVELS)"
            )
        super().__init__(split, max_turns)
        self.level = level
        self.env_id = f"babyai/{level_name(level)}"
        task = SUMMARIES.get(level, f"{level_name(level).split('-')[0]}: carry out the mission.")
        self.description = f"BabyAI {task} You see a 7x7 window ahead."
        self.world = None
        self.success = False
        self._bot = None
        self._grid_text: str | None = None  # str(world.grid.encode().tolist()), for _anchor
        self._fast_obs: FastObs | None = None

    def _sample_task(self, rng, split: str) -> dict:
        lo, hi = SEED_RANGES[split]
        return {"level": self.level, "seed": rng.randrange(lo, hi)}

    def _task_id(self, task: dict) -> str:
        return f"{task['level']}/{task['seed']}"

    def _start(self, task: dict) -> str:
        self.world = gym.make(task["level"]).unwrapped
        self._fast_obs = FastObs(self.world).install()  # its reset and steps observe with it
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints its rejections
            obs, _ = self.world.reset(seed=task["seed"])
        self._fast_obs.grid_changed()  # a level may edit the grid after its reset observed it
        self.world.max_steps = 10**9  # arborl's turn limit ends the episode
        self.success, self._bot, self._grid_text = False, None, None
        return self._view(obs)

    def _instruction(self, task: dict) -> str:
        return f"{self.description}\nMission: {self.world.mission}"

    def _view(self, obs) -> str:
        carrying = self.world.carrying
        held = f"a {carrying.color} {carrying.type}" if carrying is not None else None
        if self.view == "compact":
            return f"{obs['mission']}\n{describe_compact(obs['image'], held)}"
        return f"Mission: {obs['mission']}\n{describe(obs['image'], held)}"

    def _act(self, action: str):
        key = action.strip().lower()
        if key not in ACTIONS:
            obs = self.world.gen_obs()
            return f"Unknown action {action[:30]!r}. " + self._view(obs), 0.0, False, False
        if ACTIONS[key] in GRID_ACTIONS:  # before the step: its observation must see it
            self._grid_text = None
            self._fast_obs.grid_changed()
        obs, reward, terminated, _, _ = self.world.step(ACTIONS[key])
        self.success = bool(terminated and reward > 0)
        return self._view(obs), float(self.success), bool(terminated), True

    def _anchor(self):
        """`self.world.hash()`, with the grid's encoding kept while the grid stays."""
        if self._grid_text is None:
            self._grid_text = str(self.world.grid.encode().tolist())
        digest = hashlib.sha256()
        for item in (self._grid_text, self.world.agent_pos, self.world.agent_dir):
            digest.update(str(item).encode("utf8"))
        return digest.hexdigest()[:16]

    def _won(self) -> bool:
        return self.success

    def _available_actions(self):
        return list(ACTIONS)

    def restore(self, state) -> None:
        super().restore(state)
        self._bot, self._grid_text = None, None  # both belong to the state they saw
        self._fast_obs = FastObs(self.world).install()

    def oracle_action(self) -> str:
        """The BabyAI bot's action (it replans from the true state every step). The bot
        is not complete: on a few levels it can end up in a state it asserts never
        happens ("nothing left to explore"); then it is dropped, "turn left" is returned,
        and the next call starts a fresh bot from the new state (the episode goes on and
        may fail; docs/envs.md gives the bot's success per level)."""
        if self._bot is None:
            self._bot = BabyAIBot(self.world)
        try:
            idx = int(self._bot.replan())
        except AssertionError:
            self._bot = None
            return "turn left"
        return next((k for k, v in ACTIONS.items() if v == idx), "toggle")


def _preset(name: str, level: str) -> type:
    return type(name, (BabyAIEnv,), {"level": level, "env_id": f"babyai/{level_name(level)}"})


# The first four levels' own classes, kept for code that names them.
GoToLocalEnv = _preset("GoToLocalEnv", "BabyAI-GoToLocal-v0")
PickupLocEnv = _preset("PickupLocEnv", "BabyAI-PickupLoc-v0")
OpenDoorEnv = _preset("OpenDoorEnv", "BabyAI-OpenDoor-v0")
PutNextLocalEnv = _preset("PutNextLocalEnv", "BabyAI-PutNextLocal-v0")
