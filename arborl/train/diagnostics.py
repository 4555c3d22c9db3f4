"""Per-step learning diagnostics of a rollout batch: what the advantages carry, which
groups can teach anything, how the groups' episodes went, how many tokens are trained on.

RL on a group baseline learns only from groups whose episodes differ: a group where every
episode wins (or every one fails) has advantage 0 everywhere and teaches nothing. These
numbers say, step by step, how much of a batch could move the policy and why; the update's
own numbers (entropy, clip fraction, KL to the rollout policy, gradient norm) come from
`arborl.train.update`, computed once for 1 or N ranks. `docs/training.md` ("Reading the
diagnostics") says how to read them when learning stalls.

Everything here is computed by the loop (`RLTrainer`) on the whole batch in the driver,
so every engine logs the same numbers.
"""

from __future__ import annotations

import numpy as np
import torch

from arborl.data import Batch


def _layout(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's trajectory index, each trajectory's group index and number of steps."""
    _, traj, lengths = np.unique(
        batch.meta["traj_id"].astype(str), return_inverse=True, return_counts=True
    )
    groups = np.empty(len(lengths), dtype=object)
    groups[traj] = batch.meta["group_id"]
    _, group_index = np.unique(groups.astype(str), return_inverse=True)
    return traj, group_index, lengths


def advantage_diagnostics(batch: Batch, adv: torch.Tensor) -> dict[str, float]:
    """`adv/*` over the step rows: mean, std (unbiased), mean |adv|, the share of rows and
    of task groups with a nonzero advantage (`adv/groups_with_signal`)."""
    a = adv.double()
    nonzero = (a != 0).numpy()
    traj, group, _ = _layout(batch)
    group_of_row = group[traj]
    groups_with = np.zeros(int(group.max()) + 1 if len(a) else 0, dtype=bool)
    np.logical_or.at(groups_with, group_of_row, nonzero)
    return {
        "adv/mean": float(a.mean()) if len(a) else 0.0,
        "adv/std": float(a.std()) if len(a) > 1 else 0.0,
        "adv/abs_mean": float(a.abs().mean()) if len(a) else 0.0,
        "adv/rows_nonzero": float(nonzero.mean()) if len(a) else 0.0,
        "adv/groups_with_signal": float(groups_with.mean()) if len(groups_with) else 0.0,
    }


def group_diagnostics(batch: Batch) -> dict[str, float]:
    """`rollout/*` by task group: the share of groups all won, all lost and mixed (only
    mixed groups give a group baseline a signal), the spread of group success rates, and
    episode length (steps) by group and by outcome. {} for rows without a `won` flag."""
    if "won" not in batch.tensors or not len(batch):
        return {}
    traj, group, lengths = _layout(batch)
    won = np.zeros(len(lengths), dtype=bool)
    won[traj] = batch.tensors["won"].numpy().astype(bool)  # an episode's flag on each row
    num_groups = int(group.max()) + 1
    count = np.bincount(group, minlength=num_groups)
    rate = np.bincount(group, weights=won, minlength=num_groups) / count  # (G,)
    mean_len = np.bincount(group, weights=lengths, minlength=num_groups) / count  # (G,)
    out = {
        "rollout/groups_all_won": float((rate == 1).mean()),
        "rollout/groups_all_lost": float((rate == 0).mean()),
        "rollout/groups_mixed": float(((rate > 0) & (rate < 1)).mean()),
        "rollout/group_success_std": float(rate.std()),
        "rollout/len_mean": float(lengths.mean()),
        "rollout/len_group_min": float(mean_len.min()),
        "rollout/len_group_max": float(mean_len.max()),
    }
    if won.any():
        out["rollout/len_won"] = float(lengths[won].mean())
    if (~won).any():
        out["rollout/len_lost"] = float(lengths[~won].mean())
    return out


def train_token_diagnostics(batch: Batch, train: Batch) -> dict[str, float]:
    """`train/tokens`: response tokens in the rows trained on (each counted once, however
    many epochs), and `train/tokens_frac`: their share of the batch's response tokens."""
    total = float(batch.tensors["response_mask"].sum()) if len(batch) else 0.0
    kept = float(train.tensors["response_mask"].sum()) if len(train) else 0.0
    return {"train/tokens": kept, "train/tokens_frac": kept / total if total else 0.0}
