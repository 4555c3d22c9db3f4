"""The advantage-estimator registry: config names to functions, and what each consumes.

Estimators take different inputs, so the registry also records each one's level:

- "token": (B, T) rewards, values and mask (needs a critic): `gae`.
- "episode": one score per episode plus group ids: grpo, drgrpo, rloo, reinforce_pp,
  reinforce_pp_baseline; broadcast the (N,) result over each episode's action tokens.
- "step": step rows with trajectory, step, group ids and anchors: `gigpo`.
"""

from __future__ import annotations

from collections.abc import Callable

from arborl.algos._registry import lookup
from arborl.algos.gigpo import gigpo
from arborl.algos.group import drgrpo, grpo, reinforce_pp, reinforce_pp_baseline, rloo
from arborl.algos.returns import gae

ADV_ESTIMATORS: dict[str, Callable] = {
    "gae": gae,
    "grpo": grpo,
    "drgrpo": drgrpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "gigpo": gigpo,
}
"""Advantage estimators by config name."""

ADV_ESTIMATOR_LEVELS: dict[str, str] = {
    "gae": "token",
    "grpo": "episode",
    "drgrpo": "episode",
    "rloo": "episode",
    "reinforce_pp": "episode",
    "reinforce_pp_baseline": "episode",
    "gigpo": "step",
}
"""What each estimator consumes: "token", "episode" or "step" (see the module docstring)."""


def get_adv_estimator(name: str) -> Callable:
    """The estimator function called `name`; raises listing the known names."""
    return lookup(ADV_ESTIMATORS, name, "adv_estimator")


def adv_estimator_level(name: str) -> str:
    """ "token", "episode" or "step" for the estimator called `name`."""
    return lookup(ADV_ESTIMATOR_LEVELS, name, "adv_estimator")


def needs_critic(name: str) -> bool:
    """Whether the estimator called `name` needs value estimates (a critic)."""
    return adv_estimator_level(name) == "token"
