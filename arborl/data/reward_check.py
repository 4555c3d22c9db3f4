"""The one rule a reward must meet wherever it enters a run: a number (int, float, bool, a
numpy or 0-d torch scalar; not a str or None) that converts to a float, finite, and at
most `MAX_ABS_REWARD` in size.

Every entry point checks a reward with `check_reward` (or, for a tensor of them,
`bad_reward_rows`, the same rule): an env's step reward (`arborl.rollout.loop`), an agent
program's result, its `agent_program.reward` and the env's grade of its answer
(`arborl.rollout.agents`), and the combined `reward.sources`, reward model included
(`arborl.train.rows.nonfinite_reward_episodes`). A reward that fails ends its episode as an
env error, counted (`rollout/env_errors`, `eval/env_errors`) and never trained on; the
held-out evaluation gets its episodes through the same rollout code, so it counts them the
same way.

    r = check_reward(value, "the agent's reward")   # float, or raises BadReward
"""

from __future__ import annotations

import math
from typing import Any

MAX_ABS_REWARD = 1e6
"""The largest reward magnitude accepted. RL rewards are O(1) (success 1, penalties a
fraction); one of 1e6 already swamps every advantage of its group, and 1e39 is past
float32, where the update computes. Scale a larger reward down to within it."""


class BadReward(ValueError):
    """A reward that is not a finite number within +-`MAX_ABS_REWARD`."""


def reward_problem(value: Any) -> str | None:
    """Why `value` is not a sound reward, or None when it is one. A number is anything
    `float()` takes that is not text (int, float, bool, numpy and 0-d torch scalars)."""
    if isinstance(value, str | bytes) or not hasattr(type(value), "__float__"):
        return f"is {value!r:.80}, a {type(value).__name__}, not a number"
    try:
        r = float(value)
    except OverflowError:
        return f"is an int of about {int(int(value).bit_length() * 0.30103)} digits, past a float"
    except Exception as e:  # noqa: BLE001 - a __float__ that raises is not a number
        return f"is a {type(value).__name__} that does not convert to a float ({e})"
    if not math.isfinite(r):
        return f"is {r}, not finite"
    if abs(r) > MAX_ABS_REWARD:
        return f"is {r:g}, beyond +-{MAX_ABS_REWARD:g}"
    return None


def check_reward(value: Any, what: str) -> float:
    """`value` as a float; `BadReward` naming `what`, the value, the bound and the fix when
    it is not a finite number within +-`MAX_ABS_REWARD`."""
    problem = reward_problem(value)
    if problem is not None:
        raise BadReward(
            f"{what} {problem}; a reward must be a finite number within "
            f"+-{MAX_ABS_REWARD:g} (arborl.data.reward_check.MAX_ABS_REWARD): return one, "
            "scaled down if it is larger"
        )
    return float(value)


def bad_reward_rows(rewards) -> list[int]:
    """The indices of a 1-d tensor's (or array's) rewards that `check_reward` refuses:
    not finite, or beyond +-`MAX_ABS_REWARD`."""
    import torch

    r = torch.as_tensor(rewards)
    bad = ~torch.isfinite(r) | (r.abs() > MAX_ABS_REWARD)
    return torch.nonzero(bad).flatten().tolist()
