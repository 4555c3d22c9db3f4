"""From a step-view rollout Batch to one advantage per row, for every estimator.

The math lives in `arborl.algos`; this module only arranges rows: group estimators get
one score per *trajectory* (its return) with the trajectory's group id, and the result is
broadcast back to the trajectory's step rows; GiGPO works on rows directly; PPO lays the
rows of each trajectory out as a (num_traj, max_steps) matrix for step-level GAE over the
critic's values. Each `algo.name` has its row arrangement in `ADV_FUNCTIONS`.
"""

from __future__ import annotations

import numpy as np
import torch

from arborl import algos
from arborl.data import Batch
from arborl.registry import Registry


def _traj_layout(batch: Batch) -> tuple[np.ndarray, np.ndarray, int]:
    """Index of each row's trajectory (0..n_traj-1, first-seen order) and step position."""
    traj_ids = batch.meta["traj_id"]
    uniq, inverse = np.unique(traj_ids.astype(str), return_inverse=True)
    steps = batch.meta["step"].astype(np.int64)
    return inverse, steps, len(uniq)


def trajectory_scores(
    batch: Batch, rewards: torch.Tensor
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """(n_traj,) summed reward (float64: a float32 cast could split returns that are
    equal but summed in a different order), (n_traj,) group id, each row's trajectory."""
    inverse, _, n = _traj_layout(batch)
    inv = torch.as_tensor(inverse)
    scores = torch.zeros(n, dtype=torch.float64).index_add_(0, inv, rewards.double())
    groups = np.empty(n, dtype=object)
    groups[inverse] = batch.meta["group_id"]
    return scores, groups, inverse


def episode_lengths(batch: Batch) -> torch.Tensor:
    """(R,) number of step rows in each row's trajectory."""
    inverse, _, n = _traj_layout(batch)
    counts = np.bincount(inverse, minlength=n)
    return torch.as_tensor(counts[inverse], dtype=torch.float32)


ADV_FUNCTIONS: Registry = Registry("algo.name", error=ValueError)
"""`algo.name` -> `fn(batch, rewards, algo, values) -> (adv (R,), returns (R,) | None,
stats)`: how each estimator's inputs are laid out from step rows."""


def compute_advantages(
    batch: Batch, rewards: torch.Tensor, algo, values: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """Advantages (R,) for step rows, returns (R,) for the critic (ppo only), and stats.

    rewards: (R,) combined step reward of each row. `algo` is an `AlgoConfig`.
    """
    return ADV_FUNCTIONS.get(algo.name)(batch, rewards, algo, values)


@ADV_FUNCTIONS.register("gigpo")
def _gigpo_rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
    out = algos.gigpo(
        rewards,
        batch.meta["traj_id"].tolist(),
        batch.meta["step"].tolist(),
        batch.meta["group_id"].tolist(),
        batch.meta["anchor"].tolist(),
        gamma=algo.gigpo_gamma,
        omega=algo.gigpo_omega,
        norm_by_std=algo.norm_by_std,
    )
    stats = {
        "adv/step_abs_mean": float(out.step_adv.abs().mean()),
        "adv/episode_abs_mean": float(out.episode_adv.abs().mean()),
        **{f"gigpo/{k}": v for k, v in out.stats.items() if "anchor" in k},
    }
    return out.advantages.float(), None, stats


@ADV_FUNCTIONS.register("ppo")
def _ppo_rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
    if values is None:
        raise ValueError("algo.name='ppo' needs critic values for every step row")
    return _gae_rows(batch, rewards, values, algo)


def _episode_estimator(name: str, call):
    """Register a group estimator that scores whole trajectories: `call(fn, scores,
    groups, algo)` applies the `arborl.algos` estimator `fn`; the (n_traj,) result is
    broadcast back to each trajectory's step rows."""

    def rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
        scores, groups, inverse = trajectory_scores(batch, rewards)
        traj_adv = call(algos.get_adv_estimator(name), scores, groups.tolist(), algo)
        return traj_adv.float()[torch.as_tensor(inverse)], None, {}

    ADV_FUNCTIONS.register(name, rows)


_episode_estimator("grpo", lambda fn, s, g, algo: fn(s, g, norm_by_std=algo.norm_by_std))
_episode_estimator("reinforce_pp", lambda fn, s, g, algo: fn(s))
for _name in ("drgrpo", "rloo", "reinforce_pp_baseline"):
    _episode_estimator(_name, lambda fn, s, g, algo: fn(s, g))


def _gae_rows(batch: Batch, rewards: torch.Tensor, values: torch.Tensor, algo):
    inverse, steps, n = _traj_layout(batch)
    T = int(steps.max()) + 1
    r = torch.zeros(n, T)
    v = torch.zeros(n, T)
    mask = torch.zeros(n, T)
    idx = (torch.as_tensor(inverse), torch.as_tensor(steps))
    r[idx], v[idx], mask[idx] = rewards.float(), values.float().detach(), 1.0
    # A truncated episode's last state is not terminal: bootstrap from its own value so
    # that the cut does not read as failure (the critic's estimate stands in for the rest).
    last = torch.as_tensor(batch.meta["done"].astype(bool))
    last_trunc = last & torch.as_tensor(batch.meta["truncated"].astype(bool))
    r[idx] = r[idx] + torch.where(last_trunc, algo.gamma * values.detach().float(), 0.0)
    adv, ret = algos.gae(r, v, mask, algo.gamma, algo.lam)  # (n, T)
    adv_rows, ret_rows = adv[idx], ret[idx]
    adv_rows = (
        (adv_rows - adv_rows.mean()) / (adv_rows.std() + 1e-6) if len(adv_rows) > 1 else adv_rows
    )
    return adv_rows, ret_rows, {"critic/values_mean": float(values.mean())}
