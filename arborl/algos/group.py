"""Critic-free advantages from one score per episode and a group id per episode.

A group is the set of episodes sampled for one task (`group_size` of them). The estimators
compare each episode with the others of its group:

- `grpo`: (s - mean) / (std + eps); `norm_by_std=False` gives Dr.GRPO's s - mean.
- `rloo`: s minus the mean of the *other* members = (s - mean) * n / (n - 1).
- `reinforce_pp`: REINFORCE++, whitening over the whole batch; with `baseline=True` the
  group mean is subtracted first (verl's `reinforce_plus_plus_baseline`).

Design choices, each tested:
- Group statistics are float64, and a group whose scores are equal up to float rounding
  counts as equal, with advantage exactly 0 (a float32 mean one ulp off used to give
  every member the same spurious advantage, e.g. 0.056 for eight scores of 0.7). "Up to
  rounding" is judged at the scores' own scale (`equal_tolerance`): a spread (max - min)
  of at most `EQUAL_ULPS` units in the last place of the precision the rewards were
  computed in, at the group's magnitude. Sixteen float32 returns of 1.0 summed from their
  pieces in different orders (1 - 2^-24 .. 1 + 2^-23) used to get GRPO advantages up to
  0.13 (a rule at float64's 1e-9 could not see float32 rounding).
- The std is the unbiased one (`torch.std`, divisor n - 1), as in verl, so numbers match
  verl runs. For a group of 2 with scores (0, 1) the advantages are -/+0.7071.
- A singleton group has nothing to compare with and gets advantage 0 (verl instead returns
  the raw score, which mixes a baseline-free signal into a baseline method).
- Batch whitening in `reinforce_pp` is over episodes, one value each. verl whitens over
  tokens, which weighs long responses more; broadcast the result over tokens afterwards.

Group ids may be an integer tensor, a numpy array, or any list of hashables (strings,
tuples); they are factorised once in O(N) and all statistics use `index_add_`, so the cost
is O(N) whatever the number of groups.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from arborl.algos.masked import NOISE_RTOL, masked_whiten


def group_index(group_ids: Any) -> tuple[torch.Tensor, int]:
    """Factorise group ids into `(index (N,) long, num_groups)`; index in [0, num_groups).

    Accepts an integer/bool tensor, a numpy array, or a sequence of hashables. Groups are
    numbered by order of first appearance for sequences, by sorted value for tensors.
    """
    if isinstance(group_ids, torch.Tensor):
        if group_ids.dim() != 1 or group_ids.is_floating_point():
            raise ValueError(
                f"group_ids must be a 1-D integer tensor, got dtype {group_ids.dtype} and "
                f"shape {tuple(group_ids.shape)}; pass ints or a list of hashables"
            )
        uniq, inverse = torch.unique(group_ids, return_inverse=True)
        return inverse.long(), int(uniq.numel())
    if isinstance(group_ids, np.ndarray) and group_ids.dtype != object:
        uniq, inverse = np.unique(group_ids.reshape(-1), return_inverse=True)
        return torch.from_numpy(inverse.astype(np.int64)), int(uniq.size)
    return _index_hashables(group_ids, "group_ids")


def _index_hashables(ids: Sequence[Hashable], what: str) -> tuple[torch.Tensor, int]:
    codes: dict[Hashable, int] = {}
    out = np.empty(len(ids), dtype=np.int64)
    for i, key in enumerate(ids):
        try:
            out[i] = codes.setdefault(key, len(codes))
        except TypeError:
            raise TypeError(
                f"{what}[{i}]={key!r} is not hashable; use ints, strings or tuples "
                "(convert lists/arrays with tuple(...))"
            ) from None
    return torch.from_numpy(out), len(codes)


def as_scores(scores: Any, what: str = "scores") -> torch.Tensor:
    """Turn a 1-D tensor/array/list into a float tensor (float64 stays float64)."""
    t = torch.as_tensor(scores)
    if t.dim() != 1:
        raise ValueError(f"{what} must be 1-D (one value per row), got shape {tuple(t.shape)}")
    return t if t.is_floating_point() else t.float()


EQUAL_ULPS = 8
"""A group's scores whose spread is at most this many units in the last place (of the
precision they were computed in, at their magnitude) are equal. Summing m float32 pieces
in two orders differs by up to about (m - 1) / 2 ulps (3.3 measured for 20 pieces);
float64 scores keep `NOISE_RTOL` (1e-9) as their floor, the rule issue 16 set."""


def equal_tolerance(magnitude: torch.Tensor, precision: torch.dtype) -> torch.Tensor:
    """The largest spread of a group's scores that is float rounding rather than a
    difference: `EQUAL_ULPS` x the machine epsilon of `precision` (1.2e-7 for float32)
    x the group's magnitude (its largest |score|, at least 1, so returns that cancel to
    about 0 compare at a reward unit's scale), and never below `NOISE_RTOL` of it."""
    rtol = max(EQUAL_ULPS * torch.finfo(precision).eps, NOISE_RTOL)
    return rtol * magnitude.clamp(min=1.0)


def group_stats(
    x: torch.Tensor, index: torch.Tensor, num_groups: int, precision: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group `(mean, unbiased std, count)`, each (num_groups,) float64; std is 0 for
    singletons and for groups whose scores are equal up to rounding: their spread is at
    most `equal_tolerance` at the precision the scores were computed in (`precision`,
    default the dtype of `x`; pass float32 for float32 rewards summed in float64).

    Computed in float64 whatever the dtype of `x`, in two passes (mean, then squared
    deviations) with a correction of the mean by the mean deviation.
    """
    xd = x.double()
    index = index.to(x.device)
    zeros = torch.zeros(num_groups, dtype=torch.float64, device=x.device)
    count = zeros.index_add(0, index, torch.ones_like(xd))
    mean = zeros.index_add(0, index, xd) / count.clamp(min=1)  # (G,)
    mean = mean + zeros.index_add(0, index, xd - mean[index]) / count.clamp(min=1)
    sq = zeros.index_add(0, index, (xd - mean[index]) ** 2)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))  # (G,)
    hi = torch.full_like(zeros, -torch.inf).scatter_reduce(0, index, xd, reduce="amax")
    lo = torch.full_like(zeros, torch.inf).scatter_reduce(0, index, xd, reduce="amin")
    magnitude = torch.maximum(hi.abs(), lo.abs())  # (G,)
    tol = equal_tolerance(magnitude, precision or (x.dtype if x.is_floating_point() else xd.dtype))
    std = torch.where(hi - lo <= tol, torch.zeros_like(std), std)
    return mean, std, count


def centered(
    x: torch.Tensor, index: torch.Tensor, num_groups: int, precision: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(x - group mean (N,), group std (N,), group count (N,))`, all float64 per row.

    A group whose scores are equal up to rounding (`group_stats`) gets deviations of
    exactly 0, so equal scores never produce an advantage (nor survive `drop_zero_adv`).
    """
    mean, std, count = group_stats(x, index, num_groups, precision)
    std, count = std[index], count[index]
    dev = x.double() - mean[index]
    return torch.where(std > 0, dev, torch.zeros_like(dev)), std, count


def _prepare(scores: Any, group_ids: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
    s = as_scores(scores)
    index, num_groups = group_index(group_ids)
    if index.numel() != s.numel():
        raise ValueError(
            f"group_ids has {index.numel()} entries but scores has {s.numel()}; "
            "give one group id per score"
        )
    return s, index.to(s.device), num_groups


def grpo(
    scores: Any,
    group_ids: Any,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    precision: torch.dtype | None = None,
) -> torch.Tensor:
    """GRPO advantage per episode, (N,): (s - group mean) / (group std + eps).

    `norm_by_std=False` is Dr.GRPO (s - group mean). Singleton groups, and groups whose
    scores are equal up to rounding at `precision` (see `group_stats`), get 0.
    """
    s, index, num_groups = _prepare(scores, group_ids)
    adv, std, count = centered(s, index, num_groups, precision)
    if norm_by_std:  # an equal group's 0 stays 0 with eps=0 too (not 0 / 0)
        adv = torch.where(std > 0, adv / (std + eps), adv)
    return torch.where(count > 1, adv, torch.zeros_like(adv)).to(s.dtype)


def drgrpo(scores: Any, group_ids: Any, precision: torch.dtype | None = None) -> torch.Tensor:
    """Dr.GRPO: `grpo` without the division by the group std, (N,)."""
    return grpo(scores, group_ids, norm_by_std=False, precision=precision)


def rloo(scores: Any, group_ids: Any, precision: torch.dtype | None = None) -> torch.Tensor:
    """RLOO advantage, (N,): s_i minus the mean of the other members of its group.

    Equals (s_i - mean) * n / (n - 1). Singleton groups, and groups equal up to rounding at
    `precision` (see `group_stats`), get 0.
    """
    s, index, num_groups = _prepare(scores, group_ids)
    dev, _, n = centered(s, index, num_groups, precision)
    adv = dev * n / (n - 1).clamp(min=1)
    return torch.where(n > 1, adv, torch.zeros_like(adv)).to(s.dtype)


def reinforce_pp(
    scores: Any,
    group_ids: Any = None,
    baseline: bool = False,
    eps: float = 1e-8,
    precision: torch.dtype | None = None,
) -> torch.Tensor:
    """REINFORCE++ advantage, (N,): scores whitened over the whole batch.

    With `baseline=True` (needs `group_ids`) the group mean is subtracted before whitening
    (0 for a group equal up to rounding at `precision`, see `group_stats`); `group_ids` is
    ignored otherwise. Whitening uses the unbiased batch variance; a batch of one episode
    is only centred (giving 0).
    """
    s = as_scores(scores)
    if baseline:
        if group_ids is None:
            raise ValueError(
                "reinforce_pp(baseline=True) needs group_ids (one per score) to subtract "
                "the group mean; pass them or use baseline=False"
            )
        s, index, num_groups = _prepare(s, group_ids)
        s = centered(s, index, num_groups, precision)[0].to(s.dtype)
    return masked_whiten(s, torch.ones_like(s), eps=eps)


def reinforce_pp_baseline(
    scores: Any, group_ids: Any, precision: torch.dtype | None = None
) -> torch.Tensor:
    """REINFORCE++ with a group-mean baseline, then batch whitening, (N,)."""
    return reinforce_pp(scores, group_ids, baseline=True, precision=precision)
