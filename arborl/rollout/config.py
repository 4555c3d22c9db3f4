"""`RolloutConfig`: how many episodes, how long, how sampled, which training view.

Checked at construction so a bad value fails before any env is built or token sampled.
`mode` is only stored here: the modes (and the `search` section a tree needs) live above
`arborl.rollout`, in `arborl.train.rollout_modes`, which checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VIEWS = ("step", "episode")


@dataclass
class RolloutConfig:
    """One rollout call: tasks x group_size episodes, run until done or a limit."""

    num_tasks: int = 8
    """Tasks (distinct seeds) per call; ignored when `seeds` are passed explicitly."""
    group_size: int = 1
    """Episodes per task, sharing its seed (GRPO-style groups)."""
    max_turns: int | None = None
    """Turn limit per episode; None uses the env's own `max_turns`. Envs the rollout builds
    from an id are made with this limit (above or below their default); a pool passed in
    keeps its envs' limits, and this only lowers them."""
    max_new_tokens: int = 16
    """Largest number of tokens generated in one turn."""
    max_episode_tokens: int | None = None
    """Largest number of generated tokens over a whole episode (None: no limit). A turn's
    budget is `min(max_new_tokens, what is left)`; an episode that spends it all ends
    truncated after that turn's action is stepped."""
    max_prompt_tokens: int | None = None
    """Longest prompt (None: no limit). `step` view: longer prompts are left-truncated and
    counted in `stats['prompt_truncations']`. `episode` view: the first prompt is
    left-truncated the same way; a later context that outgrows it ends the episode
    truncated (cutting the growing sequence would break its token-exactness)."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy); `old_logp` is taken at this temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables)."""
    top_k: int = 0
    """Keep the k most likely tokens (0 disables)."""
    view: str = "step"
    """Training view of the Batch: "step" (one row per turn, prompt rebuilt from memory)
    or "episode" (one growing token sequence per episode)."""
    seed: int | None = 0
    """Seeds the task draw (when `seeds` are not given) and every turn's sampling; None
    leaves sampling to the backend's own generator."""
    mode: str = "flat"
    """How episodes are collected, a name of `arborl.train.rollout_modes.ROLLOUT_MODES`:
    "flat" (independent episodes) or "tree" (one search tree per task grown by the policy,
    each node one training row, step view; the tree settings are the `search` section).
    Checked by the train config, since the modes live above this package."""
    async_envs: bool = False
    """Let episodes progress independently (the `flat` mode; the train config refuses it
    with `tree`): an episode whose env step returns is queued for its next generation at
    once, env steps run on a thread pool while the model generates for the episodes that
    are ready, so one slow env holds only its own episode. False: lockstep turns (generate for every live episode,
    then step them all). Both give the same trajectories for the same seeds, since each
    episode-turn samples from its own seeded stream (see `arborl.rollout.scheduler`)."""
    async_max_batch: int = 64
    """Async mode: most episodes in one generate call."""
    async_wait_s: float = 0.005
    """Async mode: how long generation waits for more episodes to become ready before it
    runs a batch smaller than `async_max_batch` (0: never wait)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, prefix: str = "rollout") -> None:
        """Raise `ValueError` naming the field, the value and what is allowed."""
        positive = {"num_tasks": self.num_tasks, "group_size": self.group_size}
        positive["max_new_tokens"] = self.max_new_tokens
        positive["async_max_batch"] = self.async_max_batch
        for name in ("max_turns", "max_episode_tokens", "max_prompt_tokens"):
            if getattr(self, name) is not None:
                positive[name] = getattr(self, name)
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{prefix}.{name}={value!r} must be an int >= 1")
        if self.view not in VIEWS:
            raise ValueError(f"{prefix}.view={self.view!r} is not one of {list(VIEWS)}")
        if self.temperature < 0:
            raise ValueError(f"{prefix}.temperature={self.temperature!r} must be >= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"{prefix}.top_p={self.top_p!r} must be in (0, 1]")
        if not isinstance(self.async_envs, bool):
            raise ValueError(f"{prefix}.async_envs={self.async_envs!r} must be true or false")
        wait = self.async_wait_s
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 10:
            raise ValueError(
                f"{prefix}.async_wait_s={wait!r} must be a number of seconds in [0, 10] "
                "(0: never wait to fill a generation batch)"
            )
        if self.top_k < 0:
            raise ValueError(f"{prefix}.top_k={self.top_k!r} must be >= 0 (0 disables)")


def with_turn_limit(env_kwargs: dict[str, Any], max_turns: int | None) -> dict[str, Any]:
    """`env_kwargs` that build envs with the rollout's turn limit (`arborl.envs.make` passes
    it on or wraps the env), so a limit above the env's default is honoured rather than
    capped at it; an explicit `max_turns` env kwarg wins."""
    if max_turns is None or "max_turns" in env_kwargs:
        return env_kwargs
    return {**env_kwargs, "max_turns": max_turns}
