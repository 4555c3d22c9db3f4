"""TextWorld-Express as arborl envs: one class per game family, one JVM per process.

TextWorld-Express generates each game from (family, parameters, seed, fold); its folds
`train`/`dev`/`test` hold disjoint seeds (arborl's `val` is `dev`), so a split is a fold
and a task is a seed of it. `TextWorldExpressEnv` starts a JVM per object (0.6 s, ~100 MB);
a game only needs its own `PythonInterface` object inside a JVM, so every env object of a
worker process shares that process's one JVM (`_open_game`), and a worker holding 64 envs
runs one JVM, not 64. A reset reloads the game family only when it changes (a reload is
~70 ms, a reset of a loaded family 2-3 ms), and the folds' seed lists (the same for every
family, 300 ms to fetch) are fetched once per process.

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
import tempfile

from textworld_express import TextWorldExpressEnv

from arborl.envs.base import TextEnv
from arborl.envs.replay import ReplaySnapshot

FOLDS = {"train": "train", "val": "dev", "dev": "dev", "test": "test"}
"""arborl split -> TextWorld-Express fold."""
JVM_OPTIONS = "-Xmx256m -XX:+UseSerialGC"
"""The heap cap per worker: the JVM's default (a quarter of RAM) adds up across workers."""


_HOST: list[TextWorldExpressEnv] = []
"""The TextWorldExpressEnv that started this process's JVM (never handed to an env)."""
_SEEDS: dict[str, list[int]] = {}
"""Fold -> its valid seeds (fetched once per process)."""


class _Game(TextWorldExpressEnv):
    """A TextWorldExpressEnv on the shared JVM: its own game (`server`), the host's gateway.
    Closing it leaves the JVM running for the others."""

    def close(self) -> None:
        self.server = None

    def __del__(self) -> None:
        pass


def _open_game(step_limit: int) -> TextWorldExpressEnv:
    """A new game on this process's JVM, started with the first (or again if it died)."""
    if not _HOST or _HOST[0]._gateway.java_process.poll() is not None:
        os.environ.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
        _HOST[:] = [TextWorldExpressEnv(envStepLimit=step_limit)]
    game = _Game.__new__(_Game)
    game.__dict__.update(_HOST[0].__dict__)  # the gateway and the library's defaults
    game.server = game._gateway.jvm.textworldexpress.runtime.PythonInterface()
    game._obj_tree_tempfile = tempfile.NamedTemporaryFile()
    game.runHistory, game.envStepLimit = [], step_limit
    return game


def _jvm_alive(game: TextWorldExpressEnv | None) -> bool:
    if game is None or game.server is None:
        return False
    return game._gateway.java_process.poll() is None


class TWXEnv(ReplaySnapshot, TextEnv):
    """One TextWorld-Express game family; subclasses set `game`, `params`, `description`."""

    game = ""
    params = ""
    action_format = "one of the valid actions"
    _state_attrs = ("score", "valid_actions", "success", "state_digest", "gold")

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        if split not in FOLDS:
            raise ValueError(f"split={split!r} is not a TextWorld-Express fold; use {list(FOLDS)}")
        super().__init__("train", max_turns)  # TextEnv checks generic names only
        self.split = split
        self._jvm = _open_game(10_000)  # arborl's turn limit ends episodes, not the game's
        self._loaded: tuple[str, str] | None = None  # the (game, params) self._jvm holds
        self.score, self.valid_actions, self.success, self.state_digest = 0.0, [], False, ""
        self.gold: list[str] = []

    def _seeds(self, split: str) -> list[int]:
        fold = FOLDS[split]
        if fold not in _SEEDS:
            getter = {
                "train": "getValidSeedsTrain",
                "dev": "getValidSeedsDev",
                "test": "getValidSeedsTest",
            }
            _SEEDS[fold] = list(getattr(self._jvm, getter[fold])())
        return _SEEDS[fold]

    def _sample_task(self, rng, split: str) -> dict:
        if split not in FOLDS:
            raise ValueError(f"split={split!r} is not a TextWorld-Express fold; use {list(FOLDS)}")
        seeds = self._seeds(split)
        return {"game": self.game, "params": self.params, "fold": FOLDS[split],
                "seed": int(seeds[rng.randrange(len(seeds))])}  # fmt: skip

    def _task_id(self, task: dict) -> str:
        return f"{task['game']}/{task['fold']}/{task['seed']}"

    def _start(self, task: dict) -> str:
        if not _jvm_alive(self._jvm):  # the JVM died: a new game on a new one
            self._jvm, self._loaded = _open_game(10_000), None
        family = (task["game"], task["params"])
        load = {} if self._loaded == family else {"gameName": family[0], "gameParams": family[1]}
        obs, infos = self._jvm.reset(
            seed=task["seed"], gameFold=task["fold"], generateGoldPath=True, **load
        )
        self._loaded = family
        self.gold = list(self._jvm.getGoldActionSequence())
        self._absorb(infos)
        return obs.strip()

    def _absorb(self, infos: dict) -> None:
        self.score = float(infos["score"])
        self.success = bool(infos["tasksuccess"])
        self.failure = bool(infos["taskfailure"])
        self.valid_actions = sorted(infos["validActions"])
        # The anchor (GiGPO's step groups, search's merging of equal states) is what the
        # player can know of the state: the room as `look` describes it, the inventory and
        # the valid actions. (`getObjectTree()` returns {} for these games: a digest of it
        # gave every state of every game one anchor.)
        state = "\n".join([infos["look"], infos["inventory"], *self.valid_actions])
        self.state_digest = hashlib.sha256(state.encode()).hexdigest()[:16]

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
        return f"{self._task_id(self.task)}:{self.state_digest}"

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
