"""Dynamic sampling that refills: with `algo.filter_groups`, draw more tasks until the step
holds `rollout.num_tasks` groups with a signal, or `algo.max_gen_batches` draws were made.

DAPO's filter drops every task group whose episodes all got the same return (no group
signal); without a refill a step can shrink to a few rows. verl (`max_num_gen_batches`),
NeMo-RL (`dynamic_sampling_max_gen_batches`) and ROLL keep drawing instead. Here each
extra draw is a full `rollout.num_tasks` x `group_size` rollout of fresh tasks (its own
seeds, a pure function of the run seed, the step and the draw, so a resumed run replays
it), scored and filtered like the first; the kept groups of all draws are merged into one
batch (`merge_batches` re-lays the widths out) and cut to the first `num_tasks` groups in
draw order, as verl cuts to its batch size. Episode stats (`train/success`, ...) stay the
first draw's, so they keep meaning "the policy's rollouts this step".

Metrics: `rollout/gen_batches` (draws made), `rollout/groups_drawn`,
`rollout/groups_kept` (after the cut), `rollout/groups_dropped` (drawn without a signal,
or lost to env errors) and `train/rows` (step rows the step trains on).
No per-task success record steers which tasks are drawn (a curriculum is future work).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from arborl.data import Batch
from arborl.rollout.merge import merge_batches

Draw = Callable[[int], tuple[Batch, torch.Tensor]]
"""`draw(k) -> (rows, rewards)`: the k-th extra draw's rows of mixed groups (k >= 1)."""


def num_groups(batch: Batch) -> int:
    """Distinct task groups among `batch`'s rows."""
    return len(set(batch.meta["group_id"].tolist())) if len(batch) else 0


def first_groups(batch: Batch, rewards: torch.Tensor, n: int) -> tuple[Batch, torch.Tensor]:
    """The rows (and rewards) of the first `n` groups of `batch`, in order of appearance."""
    ids = batch.meta["group_id"].tolist()
    kept = set(list(dict.fromkeys(ids))[:n])
    if len(kept) == len(set(ids)):
        return batch, rewards
    mask = torch.tensor([g in kept for g in ids])
    return batch[mask], rewards[mask]


def refill_groups(
    batch: Batch, rewards: torch.Tensor, draw: Draw, num_tasks: int, max_gen_batches: int
) -> tuple[Batch, torch.Tensor, dict[str, float]]:
    """`batch`, `rewards`: the first draw's rows of mixed groups. Draws more with `draw`
    until `num_tasks` groups are kept or `max_gen_batches` draws were made; returns the
    merged rows cut to `num_tasks` groups, their rewards and the refill metrics."""
    parts = [(batch, rewards)] if len(batch) else []
    kept, draws = num_groups(batch), 1
    while kept < num_tasks and draws < max_gen_batches:
        rows, r = draw(draws)
        if len(rows):  # group ids restart at 0 in every draw: keep groups apart
            rows.meta["group_id"] = np.asarray(rows.meta["group_id"]) + draws * num_tasks
            parts.append((rows, r))
            kept += num_groups(rows)
        draws += 1
    if len(parts) > 1:
        batch = merge_batches([b for b, _ in parts])
        rewards = torch.cat([r for _, r in parts])
    elif parts:
        batch, rewards = parts[0]
    batch, rewards = first_groups(batch, rewards, num_tasks)
    metrics = {
        "rollout/gen_batches": float(draws),
        "rollout/groups_drawn": float(draws * num_tasks),
        "rollout/groups_kept": float(num_groups(batch)),
        "rollout/groups_dropped": float(draws * num_tasks - kept),
        "train/rows": float(len(batch)),
    }
    return batch, rewards, metrics


def trainer_draw(trainer, timer) -> Draw:
    """The `Draw` of `trainer`'s current step: roll out `trainer.plan(step, k)` on its
    engine (timed as rollout, counted in env steps and env errors), score the rows with
    the run's reward sources and keep the rows of mixed groups."""
    # rl.py imports this module; its reward and env-error helpers are read on use
    from arborl.train.advantages import informative_groups
    from arborl.train.rows import batch_rewards, drop_env_errors

    c = trainer.cfg

    def draw(k: int) -> tuple[Batch, torch.Tensor]:
        with timer.phase("rollout"):
            out = trainer.engine.rollout(trainer.plan(trainer.step, k))
        trainer.env_steps += len(out.batch)
        batch, trajectories, _, errors = drop_env_errors(out.batch, out.trajectories)
        empty = (batch[:0], torch.zeros(0))
        if len(batch):
            with timer.phase("rewards"):
                n, fns = len(trajectories), trainer.reward_fns
                rewards, _ = batch_rewards(batch, n, c.reward.sources, trajectories, fns)
                batch, _, rewards, more = drop_env_errors(batch, trajectories, rewards)
            errors += more
        trainer._count_env_errors(errors)
        if not len(batch):
            return empty
        keep, _ = informative_groups(batch, rewards)
        return batch[keep], rewards[keep]

    return draw
