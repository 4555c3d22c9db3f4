"""Policy losses by name (`algo.loss`): PPO-clip and CISPO, and the registry a new one joins.

A loss is a `PolicyLoss` record, as verl's `register_policy_loss` keeps a function per
`loss_mode`: the update (`arborl.train.update`) calls the record's function and knows no
loss by name. A loss with settings of its own declares them as a dataclass (`options`);
the train config builds it from `algo.loss_options` and checks it at load, so a plug-in's
knobs are a typed section, not new `algo` fields. Every function has one signature,

    fn(logp, old_logp, advantages, mask, algo, options, *, agg, max_len, num_tokens,
       num_seqs) -> (loss, stats)

logp, old_logp, mask: (B, T); advantages: (B,) or (B, T); `algo` the `AlgoConfig` (the
PPO clip settings predate `options`), `options` the loss's options instance (None if it
declares none); the keywords are `aggregate`'s. stats: detached 0-d tensors named as
`ppo_policy_loss` names them (the update averages those it knows).

    @register_policy_loss("mine", options=MyOptions)
    def mine(logp, old_logp, advantages, mask, algo, options, **agg): ...

Outside arborl, an entry point in the `arborl.policy_losses` group names the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from arborl.algos.losses import aggregate, broadcast_adv, ppo_policy_loss, ratio_stats
from arborl.algos.masked import masked_mean
from arborl.registry import Registry

LossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class PolicyLoss:
    """One `algo.loss`: its function and the dataclass of its own settings."""

    name: str
    """The loss's one name, in configs, docs and `POLICY_LOSSES`."""
    fn: LossFn
    """The loss (the signature in the module docstring)."""
    options: type | None = None
    """A dataclass of the loss's settings, built from `algo.loss_options` (None: none)."""


POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "algo.loss",
    allow_entry_points=True,
    entry_point_group="arborl.policy_losses",
    error=ValueError,
)
"""`algo.loss` -> `PolicyLoss` (or a `"module:attr"` naming one, imported on first use)."""


def register_policy_loss(name: str, options: type | None = None) -> Callable[[LossFn], LossFn]:
    """A decorator: register `fn` as the `PolicyLoss` `name` with `options`."""

    def deco(fn: LossFn) -> LossFn:
        POLICY_LOSSES.register(name, PolicyLoss(name, fn, options))
        return fn

    return deco


def get_policy_loss(name: str) -> PolicyLoss:
    """The record of `algo.loss=name` (a registered name or a `"module:attr"` of a record)."""
    fix = "register the function with `register_policy_loss` and name that"
    return POLICY_LOSSES.get_record(name, PolicyLoss, "algo.loss", fix)


@register_policy_loss("ppo_clip")
def ppo_clip(logp, old_logp, advantages, mask, algo, options, **agg):
    """`ppo_policy_loss` with `algo.clip_low`, `algo.clip_high` and `algo.dual_clip`."""
    return ppo_policy_loss(
        logp, old_logp, advantages, mask, algo.clip_low, algo.clip_high, algo.dual_clip, **agg
    )


@dataclass
class CISPOOptions:
    """CISPO's settings (`algo.loss_options.*` with `algo.loss=cispo`)."""

    clip_low: float | None = field(default=None, metadata={"min": 0.0})
    """The weight's floor is 1 - clip_low; None: no floor (as MiniMax-M1 runs it)."""
    clip_high: float = field(default=4.0, metadata={"min": 0.0})
    """The weight's ceiling is 1 + clip_high (a setting to tune; the paper tunes it)."""


@register_policy_loss("cispo", options=CISPOOptions)
def cispo(logp, old_logp, advantages, mask, algo, options: CISPOOptions, **agg):
    """`cispo_policy_loss` with the `CISPOOptions` of `algo.loss_options`."""
    return cispo_policy_loss(
        logp, old_logp, advantages, mask, options.clip_low, options.clip_high, **agg
    )


def cispo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float | None = None,
    clip_high: float = 4.0,
    agg: str = "token-mean",
    max_len: int | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1, 2025): clip the importance-sampling weight, not the update.

    logp, old_logp, mask: (B, T); advantages: (B, T) or (B,). With r = exp(logp - old_logp)
    and w = sg(clip(r, 1 - clip_low, 1 + clip_high)) (sg: no gradient; no floor when
    clip_low is None), the per-token loss is

        -A * w * exp(logp - sg(logp))

    whose value is -A w and whose gradient is -A w grad(logp): REINFORCE with a truncated
    IS weight. PPO-clip zeroes the gradient of a token whose ratio left the clip range
    (often the rare tokens of a reasoning fork); here every token keeps its gradient, only
    its weight is capped. stats: clipfrac (the weight was clipped), approx_kl,
    approx_kl_k3, ratio_mean, ratio_max (as `ppo_policy_loss`)."""
    adv = broadcast_adv(advantages, logp).to(logp.dtype)
    mask_f = mask.to(logp.dtype)
    log_ratio = torch.clamp(logp - old_logp, -20.0, 20.0)
    ratio = torch.exp(log_ratio)  # (B, T)
    low = None if clip_low is None else 1.0 - clip_low
    weight = torch.clamp(ratio, low, 1.0 + clip_high).detach()  # (B, T)
    loss_mat = -adv * weight * torch.exp(logp - logp.detach())  # (B, T); value -A w
    loss = aggregate(loss_mat, mask_f, agg, max_len, num_tokens, num_seqs)
    with torch.no_grad():
        stats = ratio_stats(log_ratio, ratio, mask)
        stats["clipfrac"] = masked_mean((weight != ratio).to(logp.dtype), mask_f)
    return loss, stats
