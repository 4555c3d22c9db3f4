"""The text environment protocol every arborl env follows.

Gymnasium-style, but text in and text out: `reset` returns an observation string, `step`
takes any string as an action. An action the env cannot parse or that is illegal never
raises: it returns feedback in the observation and `info["valid_action"] = False`.

`snapshot()`/`restore()` let search fork branches without sharing mutable state: a
snapshot is an independent value (deep-copied), so restoring it twice gives two identical,
unrelated branches.

`HeuristicView` is what an env's search heuristic reads: envs own their heuristics (they
know their observation format), search finds them through the registry.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol, runtime_checkable

INFO_KEYS: dict[str, str] = {
    "won": "bool: the episode has reached its goal (set on every step, True at success).",
    "valid_action": "bool: the last action was parsed and legal (True after reset).",
    "anchor": (
        "hashable: canonical encoding of the true env state (not the observation text); "
        "GiGPO groups steps of one task by it."
    ),
    "available_actions": "list[str]: the legal actions now, where the action set is finite.",
    "task_id": "str: stable id of the task, the same whatever the seed that drew it.",
    "potential": (
        "float (optional): a potential phi(s) of the true state for potential-based reward "
        "shaping (e.g. minus the distance to the goal); the agent never sees it."
    ),
}
"""The documented keys of every `info` dict, with their meaning."""

SPLITS = ("train", "val", "test")


@runtime_checkable
class Env(Protocol):
    """What the rollout loop, search and the conformance checker rely on."""

    instruction: str
    """The task and the action format, for the prompt (set by `reset`)."""
    max_turns: int
    """Episodes are truncated after this many steps."""

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]: ...

    def snapshot(self) -> Any: ...

    def restore(self, state: Any) -> None: ...

    def close(self) -> None: ...


class HeuristicView(Protocol):
    """What an env's search heuristic may read of a search node (a search `NodeView` is
    one): the env's own outputs there, never its hidden task. A heuristic is a function
    `fn(view) -> float` in [0, 1] named by `register(..., heuristic="module:fn")`."""

    observation: str
    """The observation the env returned at the node."""
    won: bool
    """`info["won"]` at the node."""


class TextEnv:
    """A convenient base for text envs: turn counting, truncation, snapshots, info keys.

    Subclasses implement:
      - `_sample_task(rng, split) -> dict` (a JSON-serialisable task drawn from `split`),
      - `_task_id(task) -> str`,
      - `_start(task) -> str` (set up state from the task, return the first observation),
      - `_act(action) -> (obs, reward, terminated, valid)`,
      - `_anchor() -> hashable`, `_won() -> bool`,
      - optionally `_available_actions() -> list[str] | None`, `_instruction(task) -> str`
        (default: `description` and "Reply with `action_format`.") and `oracle_action()`
        (the expert's next action from the current state: demos, SFT, baselines need it).
    All mutable episode state must live in attributes listed in `_state_attrs` so that
    `snapshot()` can copy it.
    """

    env_id: str = ""
    description: str = ""
    action_format: str = ""
    default_max_turns: int = 20
    _state_attrs: tuple[str, ...] = ()

    def __init__(self, split: str = "train", max_turns: int | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}")
        self.split = split
        self.max_turns = int(max_turns if max_turns is not None else self.default_max_turns)
        if self.max_turns < 1:
            raise ValueError(f"max_turns={max_turns!r} must be >= 1")
        self.task: dict | None = None
        self.instruction = ""
        self.turn = 0
        self.done = False
        self._closed = False

    # --- subclass hooks -------------------------------------------------------------
    def _sample_task(self, rng, split: str) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _task_id(self, task: dict) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _start(self, task: dict) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _act(self, action: str) -> tuple[str, float, bool, bool]:  # pragma: no cover
        raise NotImplementedError

    def _anchor(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _won(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _available_actions(self) -> list[str] | None:
        return None

    def _potential(self) -> float | None:
        """phi(s) for potential-based shaping (`info['potential']`); None: not provided."""
        return None

    def _instruction(self, task: dict) -> str:
        """`description`, then how to answer (`action_format`): the instruction is all a
        pretrained model learns the rules from, so an override should state both."""
        if not self.action_format:
            return self.description
        return f"{self.description}\nReply with {self.action_format}."

    # --- protocol ---------------------------------------------------------------------
    def _info(self, valid: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "won": bool(self._won()),
            "valid_action": bool(valid),
            "anchor": self._anchor(),
            "task_id": self._task_id(self.task),
        }
        acts = self._available_actions()
        if acts is not None:
            info["available_actions"] = list(acts)
        phi = self._potential()
        if phi is not None:
            info["potential"] = float(phi)
        return info

    def _resolve_seed(self, seed: int | None) -> int | None:
        """The seed of this reset: `seed`, or (for `reset()` after a seeded reset) the next
        draw of a stream started by that seed, so `reset(seed=s); reset()` replays the same
        episodes every time, as Gymnasium's checker requires. Never seeded: None (entropy)."""
        import random

        if seed is not None and seed < 0:  # random.Random(-s) is random.Random(s)
            raise ValueError(
                f"reset(seed={seed}): seeds must be >= 0; a negative seed would draw the same "
                f"task as seed={-seed}"
            )
        stream = getattr(self, "_seed_stream", None)
        if seed is None and stream is not None:
            seed = stream.getrandbits(63)
        if seed is not None:
            self._seed_stream = random.Random(seed)
        return seed

    def reset(self, seed: int | None = None, options: dict | None = None):
        import random

        seed = self._resolve_seed(seed)
        options = options or {}
        task = options.get("task")
        if task is None:
            task = self._sample_task(random.Random(seed), options.get("split", self.split))
        self.task = copy.deepcopy(task)
        self.turn = 0
        self.done = False
        obs = self._start(self.task)
        self.instruction = self._instruction(self.task)
        return obs, self._info(True)

    def step(self, action: str):
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        if not isinstance(action, str):
            action = str(action)
        if self.done:
            return (
                "The episode is over; call reset().",
                0.0,
                True,
                False,
                self._info(False),
            )
        obs, reward, terminated, valid = self._act(action)
        self.turn += 1
        truncated = (not terminated) and self.turn >= self.max_turns
        self.done = terminated or truncated
        return obs, float(reward), bool(terminated), bool(truncated), self._info(valid)

    def snapshot(self) -> dict[str, Any]:
        base = ("task", "instruction", "turn", "done")
        return copy.deepcopy({k: getattr(self, k) for k in base + self._state_attrs})

    def restore(self, state: dict[str, Any]) -> None:
        for k, v in copy.deepcopy(state).items():
            setattr(self, k, v)

    def close(self) -> None:
        self._closed = True

    def oracle_action(self) -> str:
        """The expert's next action from the current state (for demos and checks)."""
        raise NotImplementedError(f"{type(self).__name__} has no oracle")
