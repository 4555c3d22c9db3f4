"""The `rm` reward source: a trained reward model in the trainer's weighted combination.

    arborl train reward.sources.rm=0.5 reward.rm_model=runs/prm/model
    arborl train reward.sources.rm=0.5 reward.rm_model=http://127.0.0.1:8600

The source needs each row's episode, so the trainer adds two fields to the per-row
record: `trajectory` (the row's `Trajectory`, an object array) and `step_index` (the row's
step in it). Every distinct episode is scored once, all of them in batched calls to the
model (local) or to `arborl rm serve` (URL). What a row gets:

* outcome RM: sigmoid(score of the whole episode) on its last row, 0 elsewhere;
* process RM: p_t - p_{t-1}, with p_t = sigmoid(score after step t) and p_{-1} = 0, a
  potential-style difference that sums to the final p over an episode, so a policy cannot
  farm reward by lingering in states the PRM likes. A step the context cut off repeats
  the previous p (difference 0).

The source is built per run by `build_rm_source(reward_cfg)` (through
`arborl.rewards.build_reward_fns`, which the trainer calls at start-up), so two trainers in
one process can score with two reward models; `RewardConfig` already refuses `rm` without
`rm_model`. Nothing is registered globally.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from arborl.rewards.sources import get_field

RM_FIELDS = {
    "trajectory": "object: the row's episode as a Trajectory (for the rm source).",
    "step_index": "int: the row's step within its episode (for the rm source).",
}
"""Fields the `rm` source reads besides the built-in ones."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class RewardModelSource:
    """A batched reward source over a scorer with `score_steps` and `kind`."""

    def __init__(self, scorer: Any, kind: str | None = None, batch_size: int = 32) -> None:
        self.scorer, self.batch_size = scorer, batch_size
        self.kind = kind or scorer.kind
        if self.kind not in ("orm", "prm"):
            raise ValueError(f"reward model kind {self.kind!r} is not 'orm' or 'prm'")

    def __call__(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        for name in RM_FIELDS:
            if name not in fields:
                raise KeyError(
                    f"reward source 'rm' needs field {name!r} ({RM_FIELDS[name]}); fields has "
                    f"{sorted(fields)}; the RL trainer adds it, other callers must too"
                )
        rows = list(fields["trajectory"])
        step = get_field(fields, "step_index", "rm").astype(int)
        keys = [id(t) for t in rows]
        unique = list({k: t for k, t in zip(keys, rows)}.items())
        scores = self.scorer.score_steps([t for _, t in unique], batch_size=self.batch_size)
        by_key = {k: np.asarray(s, dtype=np.float64) for (k, _), s in zip(unique, scores)}
        out = np.zeros(len(rows), dtype=np.float64)
        for r, k in enumerate(keys):
            s = by_key[k]
            if not 0 <= step[r] < len(s):
                raise ValueError(
                    f"row {r}: step_index {step[r]} is outside its trajectory's {len(s)} steps"
                )
            out[r] = self._row_reward(s, int(step[r]))
        return out

    def _row_reward(self, scores: np.ndarray, t: int) -> float:
        if self.kind == "orm":
            last = len(scores) - 1
            return float(_sigmoid(scores[last])) if t == last else 0.0
        p = _sigmoid(scores)
        # A step cut off by the context (NaN) carries the previous value forward.
        p = np.array([x if np.isfinite(x) else np.nan for x in p])
        filled, prev = np.empty_like(p), 0.0
        for i, x in enumerate(p):
            prev = prev if np.isnan(x) else x
            filled[i] = prev
        before = filled[t - 1] if t > 0 else 0.0
        return float(filled[t] - before)


def build_rm_source(reward_cfg: Any) -> RewardModelSource:
    """A fresh `rm` source for `reward_cfg` (a `RewardConfig`); loads the local model or
    connects to the server now, so a bad path fails at start. Registers nothing."""
    if not getattr(reward_cfg, "rm_model", None):
        raise ValueError(
            "reward.sources has 'rm' but reward.rm_model is not set; give a directory from "
            "`arborl rm train` or an `arborl rm serve` URL (reward.rm_model=...)"
        )
    from arborl.rewards.rm_evaluator import load_scorer

    scorer = load_scorer(reward_cfg.rm_model, token=reward_cfg.rm_token)
    return RewardModelSource(scorer, batch_size=reward_cfg.rm_batch_size)


def rm_fields(batch: Any, trajectories: Any) -> dict[str, np.ndarray]:
    """The `trajectory` and `step_index` fields of a step-view rollout `batch`, whose rows
    carry `meta['traj_id']` and `meta['step']`, from the rollout's `trajectories`."""
    by_id = {t.meta.get("traj_id"): t for t in trajectories}
    ids = list(batch.meta["traj_id"])
    missing = sorted({i for i in ids if i not in by_id})
    if missing:
        raise KeyError(f"batch rows of episodes {missing[:3]} have no trajectory in the rollout")
    column = np.empty(len(ids), dtype=object)
    column[:] = [by_id[i] for i in ids]
    return {"trajectory": column, "step_index": np.asarray(batch.meta["step"], dtype=np.int64)}
