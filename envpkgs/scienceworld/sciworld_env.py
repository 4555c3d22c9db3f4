"""ScienceWorld as an arborl env: 30 science tasks, official variation splits, one JVM.

A task is (task name, variation); a split is the task's official variation list
(`train`, `dev` = arborl's `val`, `test`). `task_names` narrows the tasks (default: all
30). The JVM starts once per env object and is reused across resets, with its heap
capped (`JAVA_TOOL_OPTIONS`, default 400 MB; the JVM's own default is a quarter of RAM).

Protocol: reward is the change of the 0-100 score, divided by 100; `won` is a score of
100; a score of -100 (a wrong `focus on`) ends the episode. An ambiguous command makes
the game ask for a number: arborl answers 0 (as AgentBench and ETO do) and returns the
resolved outcome. Invalid commands ("No known action matches...") are
`valid_action=False`. The valid-action list costs ~120 ms a step, so it is computed
only with `list_actions=True` (then `available_actions` is set). `anchor` hashes the text
state (look + inventory + score): the object tree does not replay exactly (temperatures
drift in the 4th digit). Snapshots replay the actions (`ReplaySnapshot`). The oracle
follows the task's gold path.
"""

from __future__ import annotations

import hashlib
import os

from scienceworld import ScienceWorldEnv as _SWEnv

from arborl.envs.base import TextEnv
from arborl.envs.replay import ReplaySnapshot

JVM_OPTIONS = "-Xmx400m -XX:+UseSerialGC"
INVALID = ("No known action matches", "Unknown action")
AMBIGUOUS = "Ambiguous request"
SPLITS = {"train": "get_variations_train", "val": "get_variations_dev",
          "dev": "get_variations_dev", "test": "get_variations_test"}  # fmt: skip


class ScienceWorldEnv(ReplaySnapshot, TextEnv):
    env_id = "sciworld/ScienceWorld-v0"
    description = "You are an agent in ScienceWorld, a text science lab. Do the task."
    action_format = "one command, e.g. 'open door to kitchen', 'focus on thermometer'"
    default_max_turns = 100
    _state_attrs = ("score", "gold", "digest")

    def __init__(self, split: str = "train", max_turns: int | None = None,
                 task_names: list[str] | None = None, list_actions: bool = False) -> None:  # fmt: skip
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not a ScienceWorld split; use {list(SPLITS)}")
        super().__init__("train", max_turns)  # TextEnv checks generic names only
        self.split, self.list_actions = split, list_actions
        self._sw = None  # the JVM starts on first use: creating a worker stays fast
        self._wanted = list(task_names or ())
        self.task_names: list[str] = []
        self.score, self.gold, self.digest = 0.0, [], ""
        self._variations: dict[tuple[str, str], list[int]] = {}

    def _jvm(self) -> _SWEnv:
        if self._sw is None:
            os.environ.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
            self._sw = _SWEnv("", envStepLimit=10_000)  # arborl's turn limit ends episodes
            known = list(self._sw.get_task_names())
            bad = sorted(set(self._wanted) - set(known))
            if bad:
                raise ValueError(f"task_names={bad} are not ScienceWorld tasks; known: {known}")
            self.task_names = self._wanted or known
        return self._sw

    def _sample_task(self, rng, split: str) -> dict:
        self._jvm()
        name = self.task_names[rng.randrange(len(self.task_names))]
        key = (name, SPLITS[split])
        if key not in self._variations:  # listing needs a loaded task: once per task
            self._sw.load(name, 0, "", generateGoldPath=False)
            self._variations[key] = list(getattr(self._sw, SPLITS[split])())
        variations = self._variations[key]
        return {"task": name, "variation": int(variations[rng.randrange(len(variations))])}

    def _task_id(self, task: dict) -> str:
        return f"{task['task']}/{task['variation']}"

    def _start(self, task: dict) -> str:
        self._jvm().load(task["task"], task["variation"], "", generateGoldPath=True)
        obs, _ = self._sw.reset()
        self.gold = list(self._sw.get_gold_action_sequence())
        self.score = 0.0
        self._instr = self._sw.get_task_description()
        self._absorb()
        return f"{self._instr}\n{obs.strip()}"

    def _absorb(self) -> None:
        text = f"{self._sw.look()}\n{self._sw.inventory()}\n{self.score}"
        self.digest = hashlib.sha256(text.encode()).hexdigest()[:16]

    def _act(self, action: str):
        obs, _, done, info = self._sw.step(action.strip())
        if obs.startswith(AMBIGUOUS):  # the game waits for a choice: take the first
            obs, _, done, info = self._sw.step("0")
        valid = not obs.startswith(INVALID)
        before, self.score = self.score, float(info["score"])
        self._absorb()
        ended = bool(done) or self.score >= 100 or self.score <= -100
        return obs.strip(), (self.score - before) / 100.0, ended, valid

    def _instruction(self, task: dict) -> str:
        return f"{self.description}\n{self._instr}"

    def _anchor(self):
        return self.digest

    def _won(self) -> bool:
        return self.score >= 100

    def _available_actions(self):
        if not self.list_actions:
            return None
        return sorted(self._sw.get_valid_action_object_combinations())

    def oracle_action(self) -> str:
        return self.plan_action(self.gold)

    def close(self) -> None:
        sw, self._sw = getattr(self, "_sw", None), None
        if sw is not None:
            try:
                sw.close()
            except Exception:  # noqa: BLE001 - py4j raises on an already dead JVM
                pass
        super().close()
