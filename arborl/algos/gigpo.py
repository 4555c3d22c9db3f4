"""GiGPO: group-in-group advantages over step rows (Feng et al. 2025, verl-agent).

Each row is one (trajectory, step) of a multi-turn episode. Two baselines are combined:

- episode level: each trajectory's return (the plain sum of its step rewards) gets the
  GRPO advantage among the *trajectories* of its task group, then is broadcast to its
  steps. One value per trajectory, so a 10-step episode does not weigh 10 times as much
  as a 1-step one in the group mean (verl-agent takes the mean over step rows instead).
- step level: the discounted return from each step, R_t = sum_{k>=t} gamma^(k-t) r_k
  within its trajectory (ordered by step id), minus the mean (and divided by the std when
  `norm_by_std`) over all steps of the same task group that share its anchor state. A step
  whose anchor occurs once in its group has nothing to compare with and gets 0.

advantage = episode_adv + omega * step_adv. Rows may come in any order; the cost is one
sort plus O(N) work and a loop over the longest trajectory, never O(N^2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from arborl.algos.group import _index_hashables, as_scores, group_index, grpo
from arborl.algos.returns import discounted_returns


@dataclass(frozen=True)
class GiGPOOutput:
    """What `gigpo` returns; every tensor is (N,) in the order of the input rows."""

    advantages: torch.Tensor
    """episode_adv + omega * step_adv: the advantage to train on."""
    episode_adv: torch.Tensor
    """GRPO advantage of the row's trajectory return among its group's trajectories."""
    step_adv: torch.Tensor
    """Normalised step return within the row's (group, anchor) cluster; 0 if singleton."""
    step_returns: torch.Tensor
    """Discounted return from the row's step to the end of its trajectory."""
    stats: dict[str, float] = field(default_factory=dict)
    """num_trajectories, num_groups, num_anchor_groups, mean_anchor_group_size,
    max_anchor_group_size and shared_anchor_frac (fraction of steps whose anchor group has
    more than one step)."""


def _step_order(traj_index: torch.Tensor, step_ids: Any, traj_ids: Any) -> np.ndarray:
    steps = np.asarray(step_ids.cpu() if isinstance(step_ids, torch.Tensor) else step_ids)
    if steps.shape != (traj_index.numel(),) or not np.issubdtype(steps.dtype, np.integer):
        raise ValueError(
            f"step_ids must be {traj_index.numel()} integers (one per row), got dtype "
            f"{steps.dtype} and shape {steps.shape}"
        )
    traj = traj_index.numpy()
    order = np.lexsort((steps, traj))  # by trajectory, then step
    dup = (np.diff(traj[order]) == 0) & (np.diff(steps[order]) == 0)
    if dup.any():
        row = int(order[np.argmax(dup)])
        raise ValueError(
            f"step_ids[{row}]={int(steps[row])} occurs twice in trajectory "
            f"{traj_ids[row]!r}; each (traj_id, step_id) pair must be unique"
        )
    return order


def step_discounted_returns(
    step_rewards: torch.Tensor, traj_index: torch.Tensor, order: np.ndarray, gamma: float
) -> torch.Tensor:
    """Per-row discounted return to the end of the row's trajectory, (N,).

    `order` sorts rows by (trajectory, step). Rows are laid out in a padded
    (num_traj, max_len) matrix and `discounted_returns` runs over it.
    """
    n = step_rewards.numel()
    if n == 0:
        return step_rewards.clone()
    order_t = torch.from_numpy(order).to(step_rewards.device)
    traj_sorted = traj_index.to(step_rewards.device)[order_t]  # (N,)
    num_traj = int(traj_sorted.max()) + 1
    counts = torch.bincount(traj_sorted, minlength=num_traj)  # (num_traj,)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(n, device=step_rewards.device) - starts[traj_sorted]  # (N,)
    shape = (num_traj, int(counts.max()))
    padded = torch.zeros(shape, dtype=step_rewards.dtype, device=step_rewards.device)
    mask = torch.zeros(shape, dtype=torch.bool, device=step_rewards.device)
    padded[traj_sorted, pos] = step_rewards[order_t]
    mask[traj_sorted, pos] = True
    returns_mat = discounted_returns(padded, mask, gamma)  # (num_traj, max_len)
    out = torch.empty_like(step_rewards)
    out[order_t] = returns_mat[traj_sorted, pos]
    return out


def gigpo(
    step_rewards: Any,
    traj_ids: Any,
    step_ids: Any,
    group_ids: Any,
    anchors: Any,
    gamma: float = 0.95,
    omega: float = 1.0,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> GiGPOOutput:
    """GiGPO advantages over N step rows; see the module docstring for the definition.

    step_rewards: (N,) reward of each step; traj_ids: (N,) hashable trajectory id;
    step_ids: (N,) int position of the step within its trajectory; group_ids: (N,) task
    group (the same for all steps of a trajectory); anchors: (N,) hashable env state before
    the step. `norm_by_std` divides both levels by their group std (+ eps). Computed in
    float64; the outputs have the dtype of `step_rewards`. Both levels count returns equal
    up to rounding at the precision of `step_rewards` as equal (`group_stats`): float32
    rewards 0.1 + 0.9 and 0.3 + 0.7 make two returns 2.2e-8 apart in float64, one return.
    """
    given = as_scores(step_rewards, "step_rewards")
    r = given.double()  # float64 inside: equal discounted returns stay equal (group_stats)
    precision = given.dtype  # the rewards' own rounding scale, for the equal-return rule
    n = r.numel()
    traj_index, num_traj = group_index(traj_ids)
    group_idx, num_groups = group_index(group_ids)
    for name, seq in (("traj_ids", traj_index), ("group_ids", group_idx), ("anchors", anchors)):
        if len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries but step_rewards has {n}")
    order = _step_order(traj_index, step_ids, traj_ids)
    step_returns = step_discounted_returns(r, traj_index, order, gamma)

    traj_index_d = traj_index.to(r.device)
    traj_returns = torch.zeros(num_traj, dtype=r.dtype, device=r.device).index_add_(
        0, traj_index_d, r
    )  # (num_traj,)
    traj_group = torch.empty(num_traj, dtype=torch.long).scatter_(0, traj_index, group_idx)
    mixed = traj_group[traj_index] != group_idx
    if mixed.any():
        row = int(torch.nonzero(mixed)[0])
        raise ValueError(
            f"trajectory {traj_ids[row]!r} has rows in more than one group "
            f"(row {row} has group {group_ids[row]!r}); give every step of a trajectory "
            "the group id of its task"
        )
    episode_adv = grpo(traj_returns, traj_group, norm_by_std, eps, precision)[traj_index_d]

    keys = list(zip(group_idx.tolist(), anchors))
    anchor_idx, num_anchor_groups = _index_hashables(keys, "(group_id, anchor) of row")
    step_adv = grpo(step_returns, anchor_idx, norm_by_std, eps, precision)  # singletons -> 0
    sizes = torch.bincount(anchor_idx, minlength=num_anchor_groups)
    stats = {
        "num_trajectories": float(num_traj),
        "num_groups": float(num_groups),
        "num_anchor_groups": float(num_anchor_groups),
        "mean_anchor_group_size": n / max(num_anchor_groups, 1),
        "max_anchor_group_size": float(sizes.max()) if n else 0.0,
        "shared_anchor_frac": float((sizes[anchor_idx] > 1).double().mean()) if n else 0.0,
    }
    return GiGPOOutput(
        advantages=(episode_adv + omega * step_adv).to(given.dtype),
        episode_adv=episode_adv.to(given.dtype),
        step_adv=step_adv.to(given.dtype),
        step_returns=step_returns.to(given.dtype),
        stats=stats,
    )
