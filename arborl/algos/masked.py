"""Masked reductions over (B, T) tensors: sum, mean, variance, whitening.

Multi-turn rows mix model tokens (mask 1) with observation and padding tokens (mask 0);
every statistic in arborl.algos is taken over the mask-1 positions only. The reductions
*select* those positions (`torch.where`) rather than multiply by the mask, so a NaN or inf
at a masked position (a padded logit, an unscored token) never leaks into the result:
`masked_mean([1, 2, nan, 4], [1, 0, 0, 1])` is 2.5, where `(x * mask).sum()` gives nan.
The variance is the unbiased one, as in verl's `masked_var`, so whitening matches its
numbers; whitening is computed in float64 and a spread within rounding noise of 0 counts
as none (equal values whiten to 0, not to +-1 of float32 noise).
"""

from __future__ import annotations

import torch

# A std at or below this fraction of the largest |value| is rounding noise (group.py
# uses the same rule for group statistics).
NOISE_RTOL = 1e-9


def masked_select_zero(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`x` where `mask` is nonzero, exactly 0 elsewhere (whatever `x` holds there)."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `x` over positions where `mask` is nonzero, over `dim` (all dims when None).

    A non-binary mask weighs each selected position by its value (`x * mask` there)."""
    kept = masked_select_zero(x * mask.to(x.dtype), mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over positions where `mask` is 1; 0 where nothing is valid."""
    mask = mask.to(x.dtype)
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
    Statistics are float64; valid values that are all equal (up to rounding) give exactly
    0 deviations. The result has the dtype of `x`.
    """
    xd = x.double()
    mask = mask.to(torch.float64)
    mean = masked_mean(xd, mask)
    count = mask.sum()
    dev = xd - mean
    if count >= 2:
        var = masked_var(xd, mask)
        scale = masked_select_zero(xd.abs(), mask).max()
        if var.sqrt() <= NOISE_RTOL * scale:
            dev = torch.zeros_like(dev)
        dev = dev * torch.rsqrt(var + eps)
    out = dev + mean if not shift_mean else dev
    if not shift_mean and count < 2:
        out = xd
    return masked_select_zero(out, mask).to(x.dtype)
