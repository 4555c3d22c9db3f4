"""Which episodes train: RAFT's won episodes and DAPO's informative groups.

Two pure functions of per-episode numbers, each a mask (no I/O, no batch layout): the
trainer (`arborl.train.advantages`) lays a step-view batch out as trajectories and maps
the result back to its rows.

- `won_episodes`: RAFT / rejection-sampling fine-tuning keeps the episodes that were won;
  its advantage is that mask (1 won, 0 not), so the policy-gradient step is supervised
  learning on the batch's successes.
- `mixed_groups`: DAPO's dynamic-sampling filter keeps the task groups whose episodes got
  different returns; a group of equal returns has a zero group baseline signal (and a
  batch-normalising estimator would give it a spurious one). "Equal" is equal up to the
  rounding of the precision the rewards were computed in, at their own scale
  (`arborl.algos.group.equal_tolerance`), as the group estimators judge it.
"""

from __future__ import annotations

from typing import Any

import torch

from arborl.algos.group import equal_tolerance, group_index


def won_episodes(row_won: torch.Tensor, traj_index: torch.Tensor, num_traj: int) -> torch.Tensor:
    """(num_traj,) bool: the trajectories with at least one row in `row_won`.

    row_won: (R,) bool, the rows that end a won episode; traj_index: (R,) long in
    [0, num_traj), each row's trajectory."""
    hits = torch.zeros(num_traj).index_add_(0, traj_index, row_won.float())  # (num_traj,)
    return hits > 0


def mixed_groups(
    scores: torch.Tensor, group_ids: Any, precision: torch.dtype = torch.float32
) -> tuple[torch.Tensor, float]:
    """(N,) bool mask of the episodes whose group holds different returns, and the share
    of groups dropped (all returns equal).

    scores: (N,) float64 returns, one per episode; group_ids: N group ids (anything
    `group_index` takes); precision: the dtype the rewards were computed in, whose
    rounding does not count as a difference."""
    index, n = group_index(group_ids)  # (N,), G
    scores = scores.double()
    hi = torch.full((n,), -torch.inf, dtype=torch.float64).scatter_reduce(0, index, scores, "amax")
    lo = torch.full((n,), torch.inf, dtype=torch.float64).scatter_reduce(0, index, scores, "amin")
    tol = equal_tolerance(torch.maximum(hi.abs(), lo.abs()), precision)
    mixed = (hi - lo) > tol  # (G,)
    return mixed[index], float(1.0 - mixed.double().mean())
