"""`ReplaySnapshot`: snapshot/restore by action replay, for engines that cannot copy state.

ALFWorld (TextWorld's PDDL engine), ScienceWorld and TextWorld-Express keep their state
inside an engine (a planner, a JVM) that offers no cheap, exact copy. Their episodes are
deterministic given the task and the actions, so a snapshot is the task plus the actions
taken since reset, and `restore` starts the task again and replays them. This is the one
replay mechanism every packaged env shares (an env whose state copies exactly, such as
BabyAI's, keeps `TextEnv`'s deep-copy snapshot instead).

Restoring a state that extends the current episode (same task, the current actions a
prefix of the snapshot's) replays only the missing suffix, so a search that walks one
branch deeper pays one step, not a whole replay.

Use it as the first base of a `TextEnv` subclass: `class MyEnv(ReplaySnapshot, TextEnv)`.
The subclass's `_start(task)` and `_act(action)` must be deterministic functions of the
task and the actions; `_state_attrs` may list cheap Python-side fields (they are restored
after the replay, which recomputes them anyway).
"""

from __future__ import annotations

import copy
from typing import Any

REPLAY_KEY = "replay_actions"


class ReplaySnapshot:
    """Mixin: `snapshot()` = task + actions; `restore()` = restart the task and replay."""

    _replay_log: list[str]

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._replay_log = []
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        was_done = self.done
        out = super().step(action)
        if not was_done:  # a step after the end changes nothing, so it is not replayed
            self._replay_log.append(str(action))
        return out

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        state[REPLAY_KEY] = list(getattr(self, "_replay_log", []))
        return state

    def restore(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        if REPLAY_KEY not in state or "task" not in state:
            raise ValueError(
                f"{type(self).__name__}.restore() needs a snapshot from snapshot() (with keys "
                f"'task' and {REPLAY_KEY!r}); got keys {sorted(state)}"
            )
        actions = state.pop(REPLAY_KEY)
        current = getattr(self, "_replay_log", None)
        same_task = self.task is not None and self.task == state["task"]
        if same_task and current is not None and actions[: len(current)] == current:
            todo = actions[len(current) :]
        else:
            self._start(copy.deepcopy(state["task"]))
            todo = actions
        for a in todo:
            self._act(a)
        super().restore(state)
        self._replay_log = list(actions)

    def plan_action(self, plan: list[str]) -> str:
        """The next action of a fixed expert plan (a walkthrough, a gold path) for an
        episode that has followed it from reset: its entry at the current step."""
        if not plan:
            raise NotImplementedError(f"{type(self).__name__}: this episode has no expert plan")
        return plan[min(len(self._replay_log), len(plan) - 1)]
