"""Masked reductions over (B, T) tensors: mean, variance, whitening.

Multi-turn rows mix model tokens (mask 1) with observation and padding tokens (mask 0);
every statistic in arborl.algos is taken over the mask-1 positions only. The variance is
the unbiased one, as in verl's `masked_var`, so whitening matches its numbers.
"""

from __future__ import annotations

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `x * mask` over `dim` (all dims when None)."""
    prod = x * mask
    return prod.sum() if dim is None else prod.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over positions where `mask` is 1; 0 where nothing is valid."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `x` over all valid positions (a 0-d tensor); 0 with fewer than 2 of them."""
    mask = mask.to(x.dtype)
    count = mask.sum()
    mean = masked_mean(x, mask)
    sq = masked_sum((x - mean) ** 2, mask)
    denom = count - 1 if unbiased else count
    if denom <= 0:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    return sq / denom


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the valid positions; masked positions become 0.

    With `shift_mean=False` the mean is added back (only the scale changes), as PPO
    implementations do for returns. Fewer than 2 valid positions: only the shift applies.
    """
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    count = mask.sum()
    if count < 2:
        out = x - mean if shift_mean else x
        return out * mask
    out = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        out = out + mean
    return out * mask
