"""Held-out evaluation of an LM policy: success with a Wilson 95% interval.

The same tasks (seeds drawn from `eval.seed`) are used before and after RL, so the two
numbers are a paired comparison on identical mazes, rooms or puzzles.
"""

from __future__ import annotations

from dataclasses import replace

from arborl.rollout import RolloutConfig, draw_seeds, run_episodes_with_policy
from arborl.rollout.metrics import wilson_interval
from arborl.rollout.policies import LMPolicy


def evaluate_policy(
    backend,
    tokenizer,
    env_id,
    env_kwargs,
    agent_cfg,
    rollout_cfg: RolloutConfig,
    eval_cfg,
    num_episodes: int | None = None,
    split: str = "test",
) -> dict[str, float]:
    """Success rate (with a 95% Wilson interval), mean return, turns and invalid rate."""
    n = num_episodes or eval_cfg.num_episodes
    cfg = replace(
        rollout_cfg, group_size=1, num_tasks=n, temperature=eval_cfg.temperature, seed=eval_cfg.seed
    )
    seeds = draw_seeds(n, eval_cfg.seed)
    policy = LMPolicy(backend, tokenizer, cfg, agent_cfg)
    res = run_episodes_with_policy(policy, env_id, seeds, cfg, split=split, env_kwargs=env_kwargs)
    wins = sum(t.won for t in res.trajectories)
    lo, hi = wilson_interval(wins, n)
    out = {"success": wins / n, "success_lo": lo, "success_hi": hi, "episodes": float(n)}
    for k in ("mean_return", "mean_turns", "invalid_action_rate"):
        if k in res.stats:
            out[k] = float(res.stats[k])
    return out


def format_success(label: str, result: dict[str, float]) -> str:
    """One line for the console: `label: 0.504  95% CI [0.460, 0.548]  (n=500)`."""
    return (
        f"{label}: {result['success']:.3f}  95% CI [{result['success_lo']:.3f}, "
        f"{result['success_hi']:.3f}]  (n={int(result['episodes'])})"
    )
