"""ALFWorld (text) as an arborl env: household tasks in TextWorld, six task types.

Each episode is one game file of the chosen split (`train` 3,553; `valid_seen` 140, in
distribution; `valid_unseen` 134, out of distribution; arborl's `val`/`test` name the
last two). The game runs on TextWorld's PDDL engine with ALFWorld's own wrappers
(`AlfredDemangler`, `AlfredInfos`), exactly as ALFWorld's `AlfredTWEnv` plays it, but
loaded from the game files directly (the offline copy has no `traj_data.json`).

Protocol: the observation is the game text (the welcome banner cut, as verl-agent does);
`available_actions` are the admissible commands, sorted; an action outside them is
`valid_action=False` (the game answers "Nothing happens."); `won` is the game's own flag
and the reward is 1 on the winning step; `anchor` is a digest of the PDDL facts, the same
for the same state in any episode; snapshots replay the actions (`ReplaySnapshot`: the
engine has no copy). The oracle follows the game's walkthrough (the expert plan stored in
the game file), which wins every solvable game when followed from the start.

A game start translates its PDDL problem to SAS four times (TextWorld builds the state in
`load` and again in `reset`, each with and without optimisation): 85% of a reset. The
translation is a pure function of the two texts, so the last few are kept in memory
(~10 MB per kitchen game): a new game starts in about half the time, and the same game
again (a seeded reset repeated, a snapshot restore) in a fraction of it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import alfworld_data as data
import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

from arborl.envs.base import TextEnv
from arborl.envs.replay import ReplaySnapshot

BANNER_END = "You are in the middle of a room."
INFOS = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["gamefile"])

# TextWorld calls `fast_downward.pddl2sas(...)` through the module, so this is the one seam;
# the task it returns is only read (its actions, types, objects and initial facts).
if not hasattr(fast_downward.pddl2sas, "cache_info"):  # not twice on a module reload
    fast_downward.pddl2sas = functools.lru_cache(maxsize=8)(fast_downward.pddl2sas)


class ALFWorldEnv(ReplaySnapshot, TextEnv):
    env_id = "alfworld/ALFWorld-v0"
    description = (
        "You are an agent in a household (ALFWorld). Reach the goal given after 'Your task "
        "is to:' with one admissible command per turn (e.g. 'go to desk 1', 'take mug 1 "
        "from desk 1', 'heat mug 1 with microwave 1')."
    )
    action_format = "one admissible command"
    default_max_turns = 50
    _state_attrs = ("won_flag", "admissible", "facts_digest")

    def __init__(
        self, split: str = "train", max_turns: int | None = None, show_actions: bool = False
    ) -> None:
        """`show_actions`: end each observation with the admissible commands, as
        verl-agent's ALFWorld prompt does (`configs/env/alfworld.yaml` turns it on)."""
        self.show_actions = show_actions
        self.game_split = data.canonical_split(split)
        super().__init__("train", max_turns)  # TextEnv checks generic names only
        self.split = split
        self.games = data.game_files(self.game_split)
        self.root = data.data_root(self.game_split)
        self._engine = None
        self.won_flag, self.admissible, self.facts_digest = False, [], ""

    # --- tasks ------------------------------------------------------------------------
    def _sample_task(self, rng, split: str) -> dict:
        same = data.canonical_split(split) == self.game_split
        games = self.games if same else data.game_files(split)
        return {"game": games[rng.randrange(len(games))]}

    def _task_id(self, task: dict) -> str:
        return str(Path(task["game"]).parent)

    def _instruction(self, task: dict) -> str:
        return f"{self.description}\n{self.goal}"

    # --- engine -----------------------------------------------------------------------
    def _path(self, task: dict) -> Path:
        path = Path(task["game"])
        if path.is_absolute():
            return path
        # A game path starts with its split's folder, and splits may live in different
        # roots (ALFWORLD_DATA for one, the unpacked archive for another).
        return (
            self.root if path.parts[0] == self.game_split else data.data_root(path.parts[0])
        ) / path

    def _start(self, task: dict) -> str:
        if self._engine is not None:
            self._engine.close()
        path = self._path(task)
        self.walkthrough = json.loads(path.read_text())["walkthrough"]
        self._engine = textworld.start(
            str(path), INFOS, wrappers=[AlfredDemangler(shuffle=False), AlfredInfos]
        )
        state = self._engine.reset()  # a textworld GameState: the text and the infos
        obs = state.feedback
        self._absorb(state)
        text = obs[obs.find(BANNER_END) :] if BANNER_END in obs else obs
        self.goal = next((ln for ln in text.splitlines() if ln.startswith("Your task")), "")
        return self._with_actions(text.strip())

    def _with_actions(self, text: str) -> str:
        if not self.show_actions:
            return text
        listed = ", ".join(f"'{a}'" for a in self.admissible)
        return f"{text}\nYour admissible actions of the current situation are: [{listed}]."

    def _absorb(self, infos) -> None:
        self.won_flag = bool(infos["won"])
        self.admissible = sorted(infos["admissible_commands"])
        facts = sorted(map(str, infos["facts"]))
        self.facts_digest = hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]

    def _act(self, action: str):
        action = action.strip()
        valid = action in self.admissible
        state, _, done = self._engine.step(action)
        obs = state.feedback
        self._absorb(state)
        reward, ended = float(self.won_flag), bool(done or self.won_flag)
        return self._with_actions(obs.strip()), reward, ended, valid

    def _anchor(self):
        return self.facts_digest

    def _won(self) -> bool:
        return self.won_flag

    def _available_actions(self):
        return list(self.admissible)

    def oracle_action(self) -> str:
        """The walkthrough's next command (the expert plan from the episode's start)."""
        return self.plan_action(self.walkthrough)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        super().close()
