"""The rows of one RL step, between the rollout and the update: their rewards from the
weighted sources, the episodes an env error or a bad reward took out, and the advantages
attached. Pure bookkeeping over a `Batch`; `arborl.train.rl.RLTrainer` calls these in order,
and dynamic sampling (`arborl.train.refill`) reuses them for its extra draws."""

from __future__ import annotations

import math

import numpy as np
import torch

from arborl.data.reward_check import MAX_ABS_REWARD, bad_reward_rows
from arborl.rewards import combine_rewards
from arborl.rewards.rm_source import rm_fields
from arborl.rewards.sources import batch_fields
from arborl.train.advantages import compute_advantages, episode_lengths
from arborl.train.diagnostics import advantage_diagnostics, train_token_diagnostics


def batch_rewards(
    batch, num_trajectories: int, sources: dict[str, float], trajectories=None, fns=None
) -> tuple[torch.Tensor, dict[str, float]]:
    """(R,) combined reward of each step row and the per-source `reward/*` metrics
    (summed over the batch, per trajectory). `sources` are the weights, `fns` the run's
    own source callables (`build_reward_fns`; default: the registry's built-ins).

    A reward that is not finite (NaN or inf from any source, or a sum past float32) is
    returned as it is, for `drop_env_errors(batch, trajectories, rewards)` to drop its
    episode as an env error; the metrics leave such episodes out (one NaN row made every
    `reward/*` of the step null)."""
    fields = batch_fields(batch)
    if "rm" in sources and trajectories is not None:  # a reward model reads whole episodes
        fields.update(rm_fields(batch, trajectories))
    total, comps = combine_rewards(fields, sources, fns=fns)
    rewards = torch.as_tensor(total, dtype=torch.float32)
    bad = nonfinite_reward_episodes(batch, rewards)
    ok = ~np.isin(batch.meta["traj_id"].astype(str), list(bad))  # (R,) rows of sound episodes
    per = max(1, num_trajectories - len(bad))
    metrics = {f"reward/{k}": float(v[ok].sum() / per) for k, v in comps.items()}
    return rewards, metrics


def nonfinite_reward_episodes(batch, rewards: torch.Tensor | None = None) -> dict[str, str]:
    """{traj_id: what} of the episodes with a step row whose reward is not sound (NaN,
    inf, or beyond +-MAX_ABS_REWARD: `arborl.data.reward_check`, the rule every reward
    entry point applies): the env's own `step_reward`, or, given `rewards` (R,), the
    combined reward of the run's sources (`batch_rewards`), reward model included. `what`
    names the first such row: task, turn and value."""
    checks = [("env reward", batch.tensors["step_reward"])]
    if rewards is not None:
        checks.append(("reward (reward.sources combined)", rewards))
    traj, task, turn = batch.meta["traj_id"].astype(str), batch.meta["task_id"], batch.meta["step"]
    out: dict[str, str] = {}
    for what, r in checks:
        for i in bad_reward_rows(r):
            v = float(r[i])
            far = "" if not math.isfinite(v) else f" (beyond +-{MAX_ABS_REWARD:g})"
            out.setdefault(traj[i], f"task {task[i]} turn {int(turn[i])}: {what} {v}{far}")
    return out


def attach_advantages(batch, rewards: torch.Tensor, algo, values: torch.Tensor | None):
    """Write `adv`, `weight` (and `returns`, `old_values` for ppo) into `batch`; return the
    rows to train on (zero-advantage rows dropped if `algo.drop_zero_adv`) and stats."""
    adv, returns, metrics = compute_advantages(batch, rewards, algo, values)
    metrics = dict(metrics)
    batch["adv"] = adv
    lengths = episode_lengths(batch)
    w = 1.0 / lengths if algo.episode_weighting else torch.ones(len(batch))
    batch["weight"] = w / w.mean()
    if returns is not None:
        batch["returns"], batch["old_values"] = returns, values
    train = batch[adv.abs() > 1e-8] if algo.drop_zero_adv else batch
    metrics["train/rows_with_signal"] = float(len(train)) / max(1, len(batch))
    metrics.update(advantage_diagnostics(batch, adv))
    metrics.update(train_token_diagnostics(batch, train))
    return train, metrics


def drop_env_errors(batch, trajectories: list, rewards: torch.Tensor | None = None) -> tuple:
    """`(batch, trajectories, rewards, errors)`: the step's rows, trajectories and (when
    given) rewards without the episodes an env fault spoiled, and one line per episode
    dropped, naming its env, task and fault. Faults: `truncation_reason == "env_error"` (a
    crashed or timed-out worker says nothing about the policy), and a reward that is not
    finite (`nonfinite_reward_episodes`: one NaN made its whole group's advantages NaN,
    and those rows left the loss without a word). Such an episode is marked an env error
    in its trajectory's meta (`truncation_reason`, `env_error`), so the saved trajectories
    say why. Groups shrink; a group left with one member gets zero advantage from every
    group estimator, i.e. no signal."""
    nonfinite = nonfinite_reward_episodes(batch, rewards)
    errors: dict[str, str] = {}
    for t in trajectories:
        tid = str(t.meta.get("traj_id"))
        if tid in nonfinite:  # also an env error of the rollout's own check: named by value
            kind = "out-of-range" if "(beyond +-" in nonfinite[tid] else "non-finite"
            t.meta.update(truncation_reason="env_error", env_error=f"{kind} {nonfinite[tid]}")
            errors[tid] = f"{t.env_id} {nonfinite[tid]}"
        elif t.meta.get("truncation_reason") == "env_error":
            why = t.meta.get("env_error") or next(  # an agent's reason is in its meta
                (s.info["env_error"] for s in t.steps if (s.info or {}).get("env_error")), ""
            )
            errors[tid] = f"{t.env_id} task {t.task_id}: env error {why}".rstrip()
    if not errors:
        return batch, trajectories, rewards, []
    keep = torch.as_tensor(~np.isin(batch.meta["traj_id"].astype(str), list(errors)))
    kept = [t for t in trajectories if str(t.meta.get("traj_id")) not in errors]
    return batch[keep], kept, None if rewards is None else rewards[keep], list(errors.values())
