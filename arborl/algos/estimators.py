"""The advantage-estimator registry: config names to functions, and what each consumes.

Estimators take different inputs, so the registry also records each one's level:

- "token": (B, T) rewards, values and mask (needs a critic): `gae`.
- "episode": one score per episode plus group ids: grpo, drgrpo, rloo, reinforce_pp,
  reinforce_pp_baseline; broadcast the (N,) result over each episode's action tokens.
- "step": step rows with trajectory, step, group ids and anchors: `gigpo`.
"""

from __future__ import annotations

from collections.abc import Callable

from arborl.algos.gigpo import gigpo
from arborl.algos.group import drgrpo, grpo, reinforce_pp, reinforce_pp_baseline, rloo
from arborl.algos.returns import gae
from arborl.registry import Registry

ADV_ESTIMATORS: Registry[Callable] = Registry("adv_estimator")
"""Advantage estimators by config name."""

ADV_ESTIMATOR_LEVELS: Registry[str] = Registry("adv_estimator")
"""What each estimator consumes: "token", "episode" or "step" (see the module docstring)."""

for _name, _fn, _level in (
    ("gae", gae, "token"),
    ("grpo", grpo, "episode"),
    ("drgrpo", drgrpo, "episode"),
    ("rloo", rloo, "episode"),
    ("reinforce_pp", reinforce_pp, "episode"),
    ("reinforce_pp_baseline", reinforce_pp_baseline, "episode"),
    ("gigpo", gigpo, "step"),
):
    ADV_ESTIMATORS.register(_name, _fn)
    ADV_ESTIMATOR_LEVELS.register(_name, _level)


def get_adv_estimator(name: str) -> Callable:
    """The estimator function called `name`; raises listing the known names."""
    return ADV_ESTIMATORS.get(name)


def adv_estimator_level(name: str) -> str:
    """ "token", "episode" or "step" for the estimator called `name`."""
    return ADV_ESTIMATOR_LEVELS.get(name)


def needs_critic(name: str) -> bool:
    """Whether the estimator called `name` needs value estimates (a critic)."""
    return adv_estimator_level(name) == "token"
