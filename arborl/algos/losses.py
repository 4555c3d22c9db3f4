"""PPO policy and value losses, token entropy, and loss aggregation over (B, T) rows.

Losses are built per token as a (B, T) matrix and then reduced by `aggregate`, whose mode
decides how tokens and sequences are weighted (the choice behind GRPO, DAPO and Dr.GRPO):

- "token-mean": every valid token weighs the same (DAPO, verl default).
- "seq-mean-token-sum": sum over each sequence's tokens, mean over sequences.
- "seq-mean-token-mean": mean within each sequence, then over sequences (original GRPO).
- "seq-mean-token-sum-norm": each sequence's token sum divided by a constant `max_len`
  (the generation budget; defaults to T), then mean over sequences (Dr.GRPO). verl's local
  version of this mode leaves out the mean over sequences; the constant factor only
  rescales the learning rate.

Every mode selects the valid positions (`masked_sum`), so a NaN/inf in a masked position
does not reach the loss. Sequences without any valid token count as padding and are left out of sequence means.
For gradient accumulation, pass `num_tokens`/`num_seqs` of the whole mini-batch so that
micro-batch losses add up to the mini-batch loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from arborl.algos.masked import masked_mean, masked_sum
from arborl.registry import Registry

AggFn = Callable[[torch.Tensor, torch.Tensor, int | None, float | None, float | None], torch.Tensor]


def _num_seqs(mask: torch.Tensor, num_seqs: float | None) -> torch.Tensor | float:
    if num_seqs is not None:
        return num_seqs
    return (mask.sum(-1) > 0).sum().clamp(min=1)


def _token_mean(loss_mat, mask, max_len, num_tokens, num_seqs):
    total = masked_sum(loss_mat, mask)
    return total / (num_tokens if num_tokens is not None else mask.sum().clamp(min=1))


def _seq_mean_token_sum(loss_mat, mask, max_len, num_tokens, num_seqs):
    return masked_sum(loss_mat, mask) / _num_seqs(mask, num_seqs)


def _seq_mean_token_mean(loss_mat, mask, max_len, num_tokens, num_seqs):
    per_seq = masked_sum(loss_mat, mask, -1) / mask.sum(-1).clamp(min=1)  # (B,)
    return per_seq.sum() / _num_seqs(mask, num_seqs)


def _seq_mean_token_sum_norm(loss_mat, mask, max_len, num_tokens, num_seqs):
    scale = max_len if max_len is not None else mask.shape[-1]
    if scale <= 0:
        raise ValueError(f"max_len={max_len} must be positive (the generation budget)")
    return masked_sum(loss_mat, mask) / scale / _num_seqs(mask, num_seqs)


AGG_MODES: Registry[AggFn] = Registry("agg")
AGG_MODES.register("token-mean", _token_mean)
AGG_MODES.register("seq-mean-token-sum", _seq_mean_token_sum)
AGG_MODES.register("seq-mean-token-mean", _seq_mean_token_mean)
AGG_MODES.register("seq-mean-token-sum-norm", _seq_mean_token_sum_norm)
"""Loss aggregation modes by name; see the module docstring."""


def get_agg_mode(name: str) -> AggFn:
    """The aggregation function called `name`; raises listing the known modes."""
    return AGG_MODES.get(name)


def aggregate(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    max_len: int | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar over valid positions of `mask` (B, T).

    max_len: the constant of "seq-mean-token-sum-norm" (default T); num_tokens / num_seqs:
    denominators to use instead of this batch's counts (for gradient accumulation).
    """
    if loss_mat.shape != mask.shape:
        raise ValueError(
            f"loss_mat {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} must match"
        )
    fn = get_agg_mode(mode)
    return fn(loss_mat, mask.to(loss_mat.dtype), max_len, num_tokens, num_seqs)


def broadcast_adv(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if advantages.dim() == 1 and like.dim() == 2 and advantages.shape[0] == like.shape[0]:
        return advantages[:, None].expand_as(like)  # (B,) episode advantage -> (B, T)
    if advantages.shape != like.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} must be (B, T) like logp "
            f"{tuple(like.shape)} or (B,)"
        )
    return advantages


def ppo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    max_len: int | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped PPO surrogate; returns `(loss, stats)`.

    logp, old_logp, mask: (B, T); advantages: (B, T) or (B,). ratio = exp(logp - old_logp)
    (log-ratio clamped to +-20); per-token loss = max(-A r, -A clip(r, 1 - clip_low,
    1 + clip_high)). `clip_high > clip_low` is DAPO's clip-higher. With `dual_clip=c` (> 1)
    the loss of negative-advantage tokens is capped at -A c (Ye et al. 2020).
    stats (detached 0-d tensors, over valid tokens): clipfrac (the clipped branch is
    active), clipfrac_dual (the dual cap is active), approx_kl (mean old_logp - logp, the
    k1 estimate of KL(old || new)), approx_kl_k3 (mean (r - 1) - log r, Schulman's
    low-variance estimate, >= 0 per token), ratio_mean, ratio_max.
    """
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low={clip_low}, clip_high={clip_high} must be >= 0")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip={dual_clip} must be > 1 (3.0 is usual) or None")
    adv = broadcast_adv(advantages, logp).to(logp.dtype)
    mask_f = mask.to(logp.dtype)
    log_ratio = torch.clamp(logp - old_logp, -20.0, 20.0)
    ratio = torch.exp(log_ratio)  # (B, T)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)  # (B, T)
    dual_active = torch.zeros_like(loss_mat, dtype=torch.bool)
    if dual_clip is not None:
        cap = -adv * dual_clip
        dual_active = (adv < 0) & (loss_mat > cap)
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, cap), loss_mat)
    loss = aggregate(loss_mat, mask_f, agg, max_len, num_tokens, num_seqs)
    with torch.no_grad():
        stats = ratio_stats(log_ratio, ratio, mask)
        stats["clipfrac"] = masked_mean((loss_clipped > loss_unclipped).to(logp.dtype), mask_f)
        stats["clipfrac_dual"] = masked_mean(dual_active.to(logp.dtype), mask_f)
    return loss, stats


@torch.no_grad()
def ratio_stats(
    log_ratio: torch.Tensor, ratio: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The ratio diagnostics every policy loss reports, over the valid tokens of `mask`
    (all (B, T)): approx_kl (mean old_logp - logp, the k1 estimate of KL(old || new)),
    approx_kl_k3 (mean (r - 1) - log r, Schulman's low-variance estimate, >= 0 per
    token), ratio_mean, ratio_max (0-d tensors)."""
    mask_f = mask.to(ratio.dtype)
    return {
        "approx_kl": masked_mean(-log_ratio, mask_f),
        "approx_kl_k3": masked_mean(ratio - 1.0 - log_ratio, mask_f),
        "ratio_mean": masked_mean(ratio, mask_f),
        "ratio_max": torch.where(mask.bool(), ratio, torch.zeros_like(ratio)).max(),
    }


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = 0.2,
    agg: str = "token-mean",
    max_len: int | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Critic loss 0.5 * agg(max((v - R)^2, (clip(v, v_old +- clip) - R)^2)), as in verl.

    All inputs (B, T). `clip=None` gives the plain 0.5 * agg((v - R)^2). stats: clipfrac
    (the clipped error is the larger), values_mean.
    """
    if clip is not None and clip <= 0:
        raise ValueError(f"clip={clip} must be > 0 (e.g. 0.2) or None to disable clipping")
    mask_f = mask.to(values.dtype)
    err = (values - returns) ** 2  # (B, T)
    if clip is None:
        loss_mat = err
        clipped_more = torch.zeros_like(err)
    else:
        v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err_clipped = (v_clipped - returns) ** 2
        loss_mat = torch.maximum(err, err_clipped)
        clipped_more = (err_clipped > err).to(values.dtype)
    loss = 0.5 * aggregate(loss_mat, mask_f, agg, max_len, num_tokens, num_seqs)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean(clipped_more, mask_f),
            "values_mean": masked_mean(values, mask_f),
        }
    return loss, {k: v.detach() for k, v in stats.items()}


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Entropy of softmax(logits) per position: (B, T, V) -> (B, T).

    H = logsumexp(z) - sum softmax(z) * z, which needs no log-softmax tensor. With
    `chunk_size`, rows of B*T are processed that many at a time, so the (., V) temporaries
    stay small for large vocabularies; gradients flow either way.
    """
    if logits.dim() < 1:
        raise ValueError("logits must have a vocabulary dimension last, e.g. (B, T, V)")
    if chunk_size is None:
        probs = torch.softmax(logits, dim=-1)
        # where, not a product: a -inf logit (masked token) has p = 0 and adds nothing
        weighted = torch.where(probs > 0, probs * logits, torch.zeros_like(probs))
        return torch.logsumexp(logits, dim=-1) - weighted.sum(-1)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size={chunk_size} must be positive or None")
    flat = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    parts = [entropy_from_logits(c) for c in flat.split(chunk_size, dim=0)]
    return torch.cat(parts).reshape(logits.shape[:-1])
