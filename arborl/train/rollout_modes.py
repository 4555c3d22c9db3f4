"""Rollout modes: how one RL step collects its training rows (`rollout.mode`).

A mode is a function with one signature,

    fn(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split) -> RolloutResult

where `rollout_cfg` is the step's `RolloutConfig` (seeded for this step) and `cfg` the whole
`TrainConfig` (a mode reads `cfg.agent`, and `tree` reads `cfg.search`). The registry lives
here, above both `arborl.rollout` and `arborl.search`, so that neither has to know the
other: `flat` is `arborl.rollout.run_rollout`, `tree` is
`arborl.search.training.tree_rollout`, `agent` is `arborl.rollout.agents.run_agent_rollout`
(a program you wrote, through the gateway). A new mode is one `ROLLOUT_MODES.register` away.

    res = rollout_step(backend, tokenizer, pool, seeds=seeds, rollout_cfg=rollout_cfg, cfg=cfg,
                       split=cfg.env.train_split)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arborl.registry import Registry

ROLLOUT_MODES: Registry = Registry(
    "rollout.mode", error=ValueError, message="{what}={name} is not one of: {known}.{hint}"
)
"""Rollout mode name -> `fn(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split)`."""


@ROLLOUT_MODES.register("flat")
def flat_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """Independent multi-turn episodes (`arborl.rollout.run_rollout`)."""
    from arborl.rollout import run_rollout

    return run_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent, split=split)


@ROLLOUT_MODES.register("tree")
def tree_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """One search tree per task, grown by the policy with the `search` section's settings
    (`arborl.search.training.tree_rollout`); every node is one step-view row."""
    from arborl.search.training import tree_rollout as grow

    return grow(backend, tokenizer, pool, seeds, rollout_cfg, cfg.search, cfg.agent, split=split)


@ROLLOUT_MODES.register("agent")
def agent_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split: str):
    """Episodes of the `agent_program` section's program, each talking to the policy
    through the training gateway (`arborl.rollout.agents`); every model call it made is one
    step-view row, token-exact. Held-out evaluation runs the program too."""
    from arborl.rollout.agents import run_agent_rollout

    return run_agent_rollout(
        backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent_program, split, cfg.env.id
    )


# A mode whose episodes are not arborl's prompt loop evaluates with its own share function
# ("module:function" with `arborl.train.evaluate.evaluate_share`'s signature and result;
# imported when asked for, since it builds on the train config that imports this module).
agent_rollout.evaluate_share = "arborl.train.agent_eval:evaluate_agent_share"
agent_rollout.views = ("step",)  # one row per model call
tree_rollout.views = ("step",)  # each node is one decision: one step row, no episode view
# The one mode that runs `rollout.async_envs` (a tree grows in its own loop).
flat_rollout.async_envs = True


def check_rollout_mode(rollout_cfg: Any, prefix: str = "rollout") -> None:
    """Raise `ValueError` if `rollout_cfg.mode` is not a registered mode, if the mode
    cannot produce `rollout_cfg.view`, or if it cannot run `rollout_cfg.async_envs`."""
    fn = ROLLOUT_MODES.get(rollout_cfg.mode)
    if getattr(rollout_cfg, "async_envs", False) and not getattr(fn, "async_envs", False):
        raise ValueError(
            f"{prefix}.async_envs=true is for {prefix}.mode='flat' (independent episodes), got "
            f"{prefix}.mode={rollout_cfg.mode!r}; set {prefix}.async_envs=false"
        )
    views = getattr(fn, "views", None)
    if views is not None and rollout_cfg.view not in views:
        raise ValueError(
            f"{prefix}.mode={rollout_cfg.mode!r} needs view in {list(views)}, got "
            f"{prefix}.view={rollout_cfg.view!r}; set {prefix}.view={views[0]}"
        )


def rollout_step(
    backend: Any,
    tokenizer: Any,
    pool: Any,
    *,
    seeds: Sequence[int],
    rollout_cfg: Any,
    cfg: Any,
    split: str,
) -> Any:
    """One RL step's rollout in mode `cfg.rollout.mode`: a `RolloutResult`. The mode's
    own function takes the same arguments positionally (`ROLLOUT_MODES`); here they are
    named, since four of them would read alike at a call.

    rollout_cfg: the step's `RolloutConfig` (e.g. `replace(cfg.rollout, seed=step_seed)`);
    cfg: the `TrainConfig`; split: the env split the tasks come from."""
    return ROLLOUT_MODES.get(cfg.rollout.mode)(
        backend, tokenizer, pool, seeds, rollout_cfg, cfg, split
    )
