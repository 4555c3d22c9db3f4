"""`TurnLimit`: the framework's turn limit for envs that do not count turns themselves.

A Gymnasium-style env registered with `register(id, entry_point, max_turns=30)` need not
take a `max_turns` argument or keep a `max_turns` attribute: `make` wraps it in
`TurnLimit`, which (like Gymnasium's `TimeLimit`) counts steps since the last reset and
reports `truncated=True` on the step that reaches the limit, unless the env terminated
there. Everything else (`instruction`, `task`, `available_actions`, ...) is the wrapped
env's; `snapshot()`/`restore()` carry the turn count with the env's own state, so a search
branch restored to turn 3 is truncated at the same step as the original.
"""

from __future__ import annotations

from typing import Any


class TurnLimit:
    """Truncate the wrapped env's episodes after `max_turns` steps."""

    def __init__(self, env: Any, max_turns: int) -> None:
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns={max_turns!r} must be an int >= 1")
        self.env = env
        self.max_turns = max_turns
        self.turn = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.turn = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turn += 1
        if self.turn >= self.max_turns and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info

    def snapshot(self) -> Any:
        return {"turn": self.turn, "env": self.env.snapshot()}

    def restore(self, state: Any) -> None:
        self.env.restore(state["env"])
        self.turn = int(state["turn"])

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str) -> Any:
        # Only called for names this wrapper lacks: the wrapped env answers them.
        if name == "env":  # not set yet (e.g. during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("env", "max_turns", "turn"):
            object.__setattr__(self, name, value)
        else:  # e.g. `env_id`, set by `make`: it belongs to the wrapped env
            setattr(self.env, name, value)
