"""Rewards for arborl: sources, their weighted combination, and shaping.

Sources are batched functions of per-step fields (see `sources`); `combine_rewards` adds
them with weights and keeps each component for logging. Shaping helpers add
potential-based terms and compute discounted returns. Reward models plug in through
`register_reward_source`; the `rm` source (`rm_source`) is a trained outcome or process
reward model (`reward_model`), local or behind `arborl rm serve`, built per run by
`build_reward_fns(reward_cfg)` and passed to `combine_rewards(..., fns=...)`.
"""

from arborl.rewards.build import build_reward_fns
from arborl.rewards.rm_source import RewardModelSource, build_rm_source
from arborl.rewards.shaping import (
    discounted_cumulative_returns,
    episode_potential_shaping,
    potential_shaping,
)
from arborl.rewards.sources import (
    FIELDS,
    REWARD_SOURCES,
    RewardFn,
    combine_rewards,
    get_reward_source,
    num_rows,
    register_reward_source,
)

__all__ = [
    "FIELDS",
    "REWARD_SOURCES",
    "RewardFn",
    "RewardModelSource",
    "build_reward_fns",
    "build_rm_source",
    "combine_rewards",
    "discounted_cumulative_returns",
    "episode_potential_shaping",
    "get_reward_source",
    "num_rows",
    "potential_shaping",
    "register_reward_source",
]
