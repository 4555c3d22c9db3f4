"""Pure RL math for arborl: advantage estimators, PPO losses, KL terms, loss aggregation.

Everything here is a function of tensors (or a tiny controller object) with documented
shapes: no I/O, no global state, and no imports from the rest of arborl, so trainers,
search and tests can call it directly.
"""

from arborl.algos.distill import choice_kl, linear_schedule, token_reverse_kl
from arborl.algos.gigpo import GiGPOOutput, gigpo, step_discounted_returns
from arborl.algos.group import (
    drgrpo,
    group_index,
    group_stats,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)
from arborl.algos.kl import (
    KL_CONTROLLERS,
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    get_kl_estimator,
    kl_penalized_rewards,
    kl_penalty,
    make_kl_controller,
)
from arborl.algos.losses import (
    AGG_MODES,
    aggregate,
    entropy_from_logits,
    get_agg_mode,
    ppo_policy_loss,
    value_loss,
)
from arborl.algos.masked import masked_mean, masked_sum, masked_var, masked_whiten
from arborl.algos.returns import discounted_returns, gae
from arborl.registry import UnknownNameError

__all__ = [
    "AGG_MODES",
    "KL_CONTROLLERS",
    "KL_ESTIMATORS",
    "AdaptiveKLController",
    "FixedKLController",
    "GiGPOOutput",
    "UnknownNameError",
    "aggregate",
    "choice_kl",
    "discounted_returns",
    "drgrpo",
    "entropy_from_logits",
    "gae",
    "get_agg_mode",
    "get_kl_estimator",
    "gigpo",
    "group_index",
    "group_stats",
    "grpo",
    "kl_penalized_rewards",
    "kl_penalty",
    "linear_schedule",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "ppo_policy_loss",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "step_discounted_returns",
    "token_reverse_kl",
    "value_loss",
]
