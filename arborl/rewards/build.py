"""Per-run reward functions: `build_reward_fns(reward_cfg)` -> {source name: callable}.

Why per run: a reward model is state (a loaded model, or a client of `arborl rm serve`).
Built per trainer and handed to `combine_rewards(fields, weights, fns=...)`, it never
lands in the module-level `REWARD_SOURCES`, so two trainers in one process (tests, sweeps,
a Ray driver) cannot see each other's reward model. Built-in sources still come from the
registry; only `rm` is built here.

    fns = build_reward_fns(cfg.reward)
    total, parts = combine_rewards(fields, cfg.reward.sources, fns=fns)
"""

from __future__ import annotations

from typing import Any

from arborl.registry import Registry, UnknownNameError, did_you_mean
from arborl.rewards.sources import REWARD_SOURCES, RewardFn

RUN_SOURCES: Registry = Registry("reward source built per run")
"""Sources built from the reward config per run: name -> `builder(reward_cfg) -> RewardFn`."""
RUN_SOURCES.register("rm", "arborl.rewards.rm_source:build_rm_source")


def build_reward_fns(reward_cfg: Any) -> dict[str, RewardFn]:
    """One callable per name in `reward_cfg.sources` (a `RewardConfig`): built-ins and
    registered sources from `REWARD_SOURCES`, `rm` freshly built from `reward.rm_model`
    (a clear error if it is not set). Writes no global state."""
    fns: dict[str, RewardFn] = {}
    for name in reward_cfg.sources:
        if name in RUN_SOURCES:
            fns[name] = RUN_SOURCES.get(name)(reward_cfg)
        elif name in REWARD_SOURCES:
            fns[name] = REWARD_SOURCES.get(name)
        else:
            known = sorted(REWARD_SOURCES.names() + RUN_SOURCES.names())
            raise UnknownNameError(
                f"reward.sources has {name!r}, which is not a known source; use one of: "
                f"{', '.join(known)} (or register_reward_source).{did_you_mean(name, known)}"
            )
    return fns
