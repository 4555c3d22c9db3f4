"""Algorithms: one record per `algo.name`, registered once beside its row arrangement.

The math lives in `arborl.algos` (pure functions); this module says, for each algorithm,
how its inputs are laid out from a step-view rollout Batch and what else it needs. An
`Algorithm` record holds the name, the `arborl.algos` estimator, its level, the row
arrangement, whether it trains a critic or needs the frozen reference, and the `algo`
section defaults that `algo=NAME` selects. Levels:

- "episode": one score per *trajectory* (its summed reward) with the trajectory's group
  id; the (n_traj,) result is broadcast back to the trajectory's step rows (grpo, drgrpo,
  rloo, reinforce_pp, reinforce_pp_baseline; raft keeps the won episodes with advantage 1:
  supervised learning on the batch's successes). `episode_algorithm` registers one.
- "step": step rows with trajectory, step, group ids and anchors (gigpo).
- "token": per-step GAE over the critic's values, laid out as (num_traj, max_steps) (ppo).

A new episode-level estimator is its math, one registration and its test:

    from arborl.train.advantages import episode_algorithm

    @episode_algorithm("opo", defaults={"norm_by_std": False})
    def opo(scores, group_ids, algo):     # (N,) float64 returns, N group ids, AlgoConfig
        return ...                        # (N,) advantages

Outside arborl, the module is reached by `algo.name=pkg.module:opo` or by an entry point
in the `arborl.algorithms` group (`opo = "pkg.module:opo"`), so `arborl train algo=opo`
finds it without an import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from arborl import algos
from arborl.algos.selection import mixed_groups, won_episodes
from arborl.data import Batch
from arborl.registry import Registry

REWARD_DTYPE = torch.float32
"""The precision step rewards are computed in (`batch_rewards`): trajectory returns are
summed in float64, but returns equal up to float32 rounding are equal (`equal_tolerance`)."""

RowsFn = Callable[..., tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]]
"""`rows(batch, rewards, algo, values) -> (adv (R,), returns (R,) | None, stats)`."""


@dataclass(frozen=True)
class Algorithm:
    """Everything the trainer needs to know about one `algo.name`."""

    name: str
    """The one name of the algorithm, in configs, metrics, docs and this registry."""
    level: Literal["token", "episode", "step"]
    """What the estimator consumes (see the module docstring)."""
    rows: RowsFn
    """Step rows -> one advantage per row (and critic returns where there is a critic)."""
    estimator: Callable | None = None
    """The `arborl.algos` function (or a plug-in's) that does the math."""
    needs_critic: bool = False
    """Train a value model (and fit it each step)."""
    needs_reference: bool = False
    """Score every row under the frozen reference even with `algo.kl_coef=0` (the
    reference is always built when `algo.kl_coef > 0`)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """`algo` section values that `algo=NAME` selects (the name itself is implied)."""
    loss: str = "ppo_clip"
    """The policy loss `algo=NAME` selects (`arborl.algos.policy_loss.POLICY_LOSSES`)."""

    def advantages(self, batch: Batch, rewards: torch.Tensor, algo, values=None):
        """`rows(batch, rewards, algo, values)`."""
        return self.rows(batch, rewards, algo, values)


ALGORITHMS: Registry[Algorithm] = Registry(
    "algo.name", allow_entry_points=True, entry_point_group="arborl.algorithms", error=ValueError
)
"""`algo.name` -> `Algorithm` (or a `"module:attr"` naming one, imported on first use)."""


def register_algorithm(record: Algorithm) -> Algorithm:
    """Add `record` under `record.name` (a name already taken is replaced)."""
    if record.level not in ("token", "episode", "step"):
        raise ValueError(
            f"algorithm {record.name!r}: level={record.level!r} is not one of token, episode, step"
        )
    ALGORITHMS.register(record.name, record)
    return record


def get_algorithm(name: str) -> Algorithm:
    """The record of `algo.name` (a registered name or a `"module:attr"` of a record)."""
    fix = "register the estimator with `episode_algorithm` (or `register_algorithm`) and name that record"
    return ALGORITHMS.get_record(name, Algorithm, "algo.name", fix)


def algorithm_defaults(name: str) -> dict[str, Any] | None:
    """The `algo` section `algo=NAME` selects, or None for an unknown name."""
    if not ALGORITHMS.accepts(name):
        return None
    record = get_algorithm(name)
    return {"name": name, "loss": record.loss, **record.defaults}


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


def informative_groups(batch: Batch, rewards: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(R,) mask of the rows whose task group has episodes of different returns, and the
    share of groups dropped (`arborl.algos.selection.mixed_groups`)."""
    scores, groups, inverse = trajectory_scores(batch, rewards)
    mixed, dropped = mixed_groups(scores, groups.tolist(), REWARD_DTYPE)  # (n_traj,)
    return mixed[torch.as_tensor(inverse)], dropped


def compute_advantages(
    batch: Batch, rewards: torch.Tensor, algo, values: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """Advantages (R,) for step rows, returns (R,) for the critic (ppo only), and stats.

    rewards: (R,) combined step reward of each row. `algo` is an `AlgoConfig`.
    """
    return get_algorithm(algo.name).advantages(batch, rewards, algo, values)


def episode_algorithm(
    name: str,
    estimator: Callable | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    needs_reference: bool = False,
    loss: str = "ppo_clip",
):
    """Register an episode-level algorithm: `estimator(scores, group_ids, algo)` maps the
    (N,) float64 trajectory returns and their N group ids (and the `AlgoConfig`) to (N,)
    advantages, which are broadcast back to each trajectory's step rows, trained with the
    policy loss `loss`. Returns the `Algorithm`; without `estimator`, a decorator that
    returns the record."""
    if estimator is None:
        return lambda fn: episode_algorithm(
            name, fn, defaults=defaults, needs_reference=needs_reference, loss=loss
        )

    def rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
        scores, groups, inverse = trajectory_scores(batch, rewards)
        traj_adv = torch.as_tensor(estimator(scores, groups.tolist(), algo))
        if traj_adv.shape != scores.shape:
            raise ValueError(
                f"algorithm {name!r} returned advantages of shape {tuple(traj_adv.shape)} "
                f"for {len(scores)} trajectories; return one per trajectory"
            )
        return traj_adv.float()[torch.as_tensor(inverse)], None, {}

    return register_algorithm(
        Algorithm(
            name, "episode", rows, estimator, False, needs_reference, dict(defaults or {}), loss
        )
    )


episode_algorithm(
    "grpo", lambda s, g, a: algos.grpo(s, g, norm_by_std=a.norm_by_std, precision=REWARD_DTYPE)
)
episode_algorithm(
    "drgrpo", lambda s, g, a: algos.drgrpo(s, g, precision=REWARD_DTYPE),
    defaults={"norm_by_std": False},
)  # fmt: skip
episode_algorithm("rloo", lambda s, g, a: algos.rloo(s, g, precision=REWARD_DTYPE))
episode_algorithm("reinforce_pp", lambda s, g, a: algos.reinforce_pp(s))
episode_algorithm(
    "reinforce_pp_baseline",
    lambda s, g, a: algos.reinforce_pp_baseline(s, g, precision=REWARD_DTYPE),
)


def _raft_rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
    """RAFT / rejection-sampling fine-tuning ("iterated action modeling"): every step of a
    won episode gets advantage 1, every other step 0 (dropped by `algo.drop_zero_adv`), so
    the policy-gradient step is supervised learning on the batch's successes."""
    won = batch.tensors["won"].bool() & torch.as_tensor(batch.meta["done"].astype(bool))
    inverse, _, n = _traj_layout(batch)
    traj_won = won_episodes(won, torch.as_tensor(inverse), n)  # (n_traj,)
    adv = traj_won[torch.as_tensor(inverse)].float()
    return adv, None, {"raft/episodes_kept": float(traj_won.double().mean())}


register_algorithm(
    Algorithm("raft", "episode", _raft_rows, defaults={"drop_zero_adv": True, "norm_by_std": False})
)


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


register_algorithm(
    Algorithm(
        "gigpo", "step", _gigpo_rows, algos.gigpo,
        defaults={"gigpo_gamma": 0.95, "gigpo_omega": 1.0, "norm_by_std": True},
    )
)  # fmt: skip


def _ppo_rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
    if values is None:
        raise ValueError("algo.name='ppo' needs critic values for every step row")
    return _gae_rows(batch, rewards, values, algo)


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


register_algorithm(
    Algorithm(
        "ppo", "token", _ppo_rows, algos.gae, needs_critic=True,
        defaults={"gamma": 0.95, "lam": 0.95, "ppo_epochs": 2, "critic_lr": 1.0e-3,
                  "value_clip": 0.2, "drop_zero_adv": False},
    )
)  # fmt: skip


def _distill_rows(batch: Batch, rewards: torch.Tensor, algo, values=None):
    """No policy-gradient signal: the update is the `teacher` section's distillation term
    alone (`arborl.train.distill`), on every row."""
    return torch.zeros(len(batch)), None, {}


register_algorithm(Algorithm("distill", "step", _distill_rows, defaults={"drop_zero_adv": False}))
