"""TextWorld-Express as arborl envs: one class per game family, one JVM per env object.

TextWorld-Express generates each game from (family, parameters, seed, fold); its folds
`train`/`dev`/`test` hold disjoint seeds (arborl's `val` is `dev`), so a split is a fold
and a task is a seed of it. The JVM starts once per env object (0.6 s) and is reused
across resets (2 ms each).

Protocol: `available_actions` are the game's `validActions`, sorted (the game's order is
unstable); an action outside them is `valid_action=False`; `won` is `tasksuccess`, and the
reward is the change of the 0-1 score; `anchor` is a digest of the object tree, which is
exact under replay; snapshots replay the actions (`ReplaySnapshot`: a restore re-runs the
reset and the moves in the same JVM, milliseconds); the oracle follows the gold action
sequence the game generates with the episode.
"""

from __future__ import annotations

import hashlib
import os

from textworld_express import TextWorldExpressEnv

from arborl.envs.base import TextEnv
from arborl.envs.replay import ReplaySnapshot

FOLDS = {"train": "train", "val": "dev", "dev": "dev", "test": "test"}
"""arborl split -> TextWorld-Express fold."""
JVM_OPTIONS = "-Xmx256m -XX:+UseSerialGC"
"""The heap cap per worker: the JVM's default (a quarter of RAM) adds up across workers."""


def _start_jvm(step_limit: int) -> TextWorldExpressEnv:
    os.environ.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
    return TextWorldExpressEnv(envStepLimit=step_limit)


class TWXEnv(ReplaySnapshot, TextEnv):
    """One TextWorld-Express game family; subclasses set `game`, `params`, `description`."""

    game = ""
    params = ""
    action_format = "one of the valid actions"
    _state_attrs = ("score", "valid_actions", "success", "tree_digest", "gold")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        if split not in FOLDS:
            raise ValueError(f"split={split!r} is not a TextWorld-Express fold; use {list(FOLDS)}")
        super().__init__("train", max_turns)  # TextEnv checks generic names only
        self.split = split
        self._jvm = _start_jvm(10_000)  # arborl's turn limit ends episodes, not the game's
        self.score, self.valid_actions, self.success, self.tree_digest = 0.0, [], False, ""
        self.gold: list[str] = []

    def _seeds(self, split: str) -> list[int]:
        fold = FOLDS[split]
        getter = {
            "train": "getValidSeedsTrain",
            "dev": "getValidSeedsDev",
            "test": "getValidSeedsTest",
        }
        return list(getattr(self._jvm, getter[fold])())

    def _sample_task(self, rng, split: str) -> dict:
        if split not in FOLDS:
            raise ValueError(f"split={split!r} is not a TextWorld-Express fold; use {list(FOLDS)}")
        seeds = self._seeds(split)
        return {"game": self.game, "params": self.params, "fold": FOLDS[split],
                "seed": int(seeds[rng.randrange(len(seeds))])}  # fmt: skip

    def _task_id(self, task: dict) -> str:
        return f"{task['game']}/{task['fold']}/{task['seed']}"

    def _start(self, task: dict) -> str:
        obs, infos = self._jvm.reset(
            seed=task["seed"], gameFold=task["fold"], gameName=task["game"],
            gameParams=task["params"], generateGoldPath=True,
        )  # fmt: skip
        self.gold = list(self._jvm.getGoldActionSequence())
        self._absorb(infos)
        return obs.strip()

    def _absorb(self, infos: dict) -> None:
        self.score = float(infos["score"])
        self.success = bool(infos["tasksuccess"])
        self.failure = bool(infos["taskfailure"])
        self.valid_actions = sorted(infos["validActions"])
        tree = self._jvm.getObjectTree()
        self.tree_digest = hashlib.sha256(str(tree).encode()).hexdigest()[:16]

    def _act(self, action: str):
        action = action.strip()
        valid = action in self.valid_actions
        before = self.score
        obs, _, _, infos = self._jvm.step(action)
        self._absorb(infos)
        return obs.strip(), self.score - before, self.success or self.failure, valid

    def _instruction(self, task: dict) -> str:
        return self.description

    def _anchor(self):
        return self.tree_digest

    def _won(self) -> bool:
        return self.success

    def _available_actions(self):
        return list(self.valid_actions)

    def oracle_action(self) -> str:
        """The gold sequence's next action (the sequence starts with 'look around')."""
        return self.plan_action(self.gold)

    def close(self) -> None:
        jvm, self._jvm = getattr(self, "_jvm", None), None
        if jvm is not None:
            try:
                jvm.close()
            except Exception:  # noqa: BLE001 - py4j raises BrokenPipeError on a dead JVM
                pass
        super().close()


def _family(name: str, game: str, params: str, turns: int, text: str) -> type:
    return type(name, (TWXEnv,), {
        "env_id": f"twx/{name.removesuffix('Env')}-v0", "game": game, "params": params,
        "default_max_turns": turns, "description": f"TextWorld-Express {text}",
    })  # fmt: skip


CoinCollectorEnv = _family(
    "CoinCollectorEnv", "coin", "numLocations=5,numDistractorItems=0,includeDoors=0", 30,
    "Coin Collector: explore the rooms and take the coin.")  # fmt: skip
CookingWorldEnv = _family(
    "CookingWorldEnv", "cookingworld", "numLocations=3,numIngredients=2,numDistractorItems=2,"
    "includeDoors=0,limitInventorySize=0", 40,
    "CookingWorld: read the cookbook, gather and prepare the ingredients, eat the meal.")  # fmt: skip
TWCEnv = _family(
    "TWCEnv", "twc", "numLocations=1,numItemsToPutAway=2,includeDoors=0", 30,
    "TextWorld Commonsense: put each misplaced item where it belongs.")  # fmt: skip
MapReaderEnv = _family(
    "MapReaderEnv", "mapreader", "numLocations=8,maxDistanceApart=3,includeDoors=0", 40,
    "MapReader: read the map, fetch the coin and bring it to the box.")  # fmt: skip
ArithmeticEnv = _family(
    "ArithmeticEnv", "arithmetic", "", 20,
    "Arithmetic: solve the task's sum and put the object of that count in the box.")  # fmt: skip
SortingEnv = _family(
    "SortingEnv", "sorting", "", 20,
    "Sorting: put the objects in the box from smallest to largest quantity.")  # fmt: skip
SimonSaysEnv = _family(
    "SimonSaysEnv", "simonsays", "", 20, "Simon Says: do exactly what Simon says.")  # fmt: skip
PeckingOrderEnv = _family(
    "PeckingOrderEnv", "peckingorder", "", 20,
    "Pecking Order: do the tasks in the order of precedence given.")  # fmt: skip
