"""Held-out evaluation of an LM policy: success with a Wilson 95% interval.

The same tasks (seeds drawn from `eval.seed`) are used before and after RL, with the same
sampling seed, so the two numbers are a paired comparison on identical mazes, rooms or
puzzles: `paired_gain` gives the change with its paired 95% interval.
"""

from __future__ import annotations

import math
from dataclasses import replace

from arborl.rollout import RolloutConfig, draw_seeds, run_episodes_with_policy
from arborl.rollout.metrics import episode_stats, wilson_interval
from arborl.rollout.policies import LMPolicy

STAT_KEYS = ("mean_return", "mean_turns", "invalid_action_rate")


def evaluate_share(
    backend,
    tokenizer,
    env_id,
    env_kwargs,
    agent_cfg,
    rollout_cfg: RolloutConfig,
    eval_cfg,
    seeds: list[int],
    sample_seed: int,
    split: str = "test",
    pool_mode: str = "inproc",
    pool_options: dict | None = None,
    keep_episodes: int = 0,
) -> dict:
    """Greedy-or-sampled episodes of `seeds` (one each): `episodes`, `wins`, `env_errors`
    and the mean of each of `STAT_KEYS`, `outcomes` (task seed -> 1.0 won / 0.0 lost, for
    `paired_gain`), plus `sample`: the first `keep_episodes` trajectories (for the report). One engine worker's share of an evaluation;
    `summarize_eval` combines shares. The envs run in `pool_mode` (the run's
    `env.pool_mode`, so a packaged env is evaluated where it is trained)."""
    n = len(seeds)
    cfg = replace(
        rollout_cfg, group_size=1, num_tasks=n, temperature=eval_cfg.temperature, seed=sample_seed
    )
    policy = LMPolicy(backend, tokenizer, cfg, agent_cfg)
    chunk = eval_cfg.chunk_episodes or n
    episodes, trajectories = [], []
    for c in range(0, n, chunk):  # one policy: each chunk continues its sampling streams
        res = run_episodes_with_policy(
            policy, env_id, seeds[c : c + chunk], cfg, split=split, env_kwargs=env_kwargs,
            pool_mode=pool_mode, pool_options=pool_options,
        )  # fmt: skip
        episodes += res.episodes
        trajectories += res.trajectories
    stats = episode_stats(episodes, 0.0)
    out = {"episodes": float(n), "wins": float(sum(t.won for t in trajectories))}
    out["env_errors"] = float(stats.get("env_errors", 0.0))
    out.update({k: float(stats[k]) for k in STAT_KEYS if k in stats})
    out["outcomes"] = {int(seed): float(t.won) for seed, t in zip(seeds, trajectories, strict=True)}
    if keep_episodes:
        out["sample"] = trajectories[:keep_episodes]
    return out


def summarize_eval(shares: list[dict], keep_episodes: int = 0) -> dict:
    """The held-out metrics of the whole evaluation (every engine logs these names):
    success with its Wilson 95% interval, episodes, and the episode-weighted means; with
    `keep_episodes`, also `sample`: up to that many of the shares' trajectories, and
    `outcomes`: task seed -> 1.0/0.0 over all shares (neither is a metric:
    `RLTrainer.evaluate` pops both, writes `eval_episodes/` and keeps the outcomes for
    `paired_gain`)."""
    shares = [s for s in shares if s and s["episodes"]]
    n = int(sum(s["episodes"] for s in shares))
    wins = int(sum(s["wins"] for s in shares))
    lo, hi = wilson_interval(wins, n)
    out = {"success": wins / n, "success_lo": lo, "success_hi": hi, "episodes": float(n)}
    out["env_errors"] = float(sum(s.get("env_errors", 0.0) for s in shares))
    for k in STAT_KEYS:
        if shares and all(k in s for s in shares):
            # One share: its mean as is (a weighted mean of one would round differently).
            out[k] = (
                shares[0][k] if len(shares) == 1 else sum(s[k] * s["episodes"] for s in shares) / n
            )
    out["outcomes"] = {k: v for s in shares for k, v in s.get("outcomes", {}).items()}
    if keep_episodes:
        out["sample"] = [t for s in shares for t in s.get("sample", [])][:keep_episodes]
    return out


def paired_gain(before: dict, after: dict, z: float = 1.96) -> dict[str, float] | None:
    """The change in success between two evaluations of the same tasks (task seed -> 1.0
    won / 0.0 lost), paired per task: `gain` (mean of after - before), its normal-theory
    `gain_lo`/`gain_hi` interval (z=1.96: 95%) from the per-task differences, and the
    counts of tasks that turned won (`improved`) and lost (`worsened`). Tasks that won or
    lost both times add no variance, which is why this interval is narrower than the gap
    between two separate Wilson intervals. None when the two share fewer than 2 tasks."""
    common = sorted(set(before) & set(after))
    n = len(common)
    if n < 2:
        return None
    diffs = [after[k] - before[k] for k in common]
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = z * sd / math.sqrt(n)
    return {
        "gain": mean, "gain_lo": mean - half, "gain_hi": mean + half, "tasks": float(n),
        "improved": float(sum(d > 0 for d in diffs)),
        "worsened": float(sum(d < 0 for d in diffs)),
    }  # fmt: skip


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
    pool_mode: str = "inproc",
    pool_options: dict | None = None,
    keep_episodes: int = 0,
) -> dict:
    """Success rate (with a 95% Wilson interval), mean return, turns and invalid rate on
    `num_episodes` (default `eval.num_episodes`) tasks drawn from `eval.seed`, with the
    envs in `pool_mode` (and the first `keep_episodes` trajectories as `sample`)."""
    n = num_episodes or eval_cfg.num_episodes
    share = evaluate_share(
        backend, tokenizer, env_id, env_kwargs, agent_cfg, rollout_cfg, eval_cfg,
        draw_seeds(n, eval_cfg.seed), eval_cfg.seed, split, pool_mode, pool_options,
        keep_episodes,
    )  # fmt: skip
    return summarize_eval([share], keep_episodes)


def format_gain(label: str, gain: dict[str, float]) -> str:
    """One line for the console: `label: +0.110  paired 95% CI [+0.070, +0.150]  (n=500,
    81 tasks won that were lost, 26 lost that were won)`."""
    return (
        f"{label}: {gain['gain']:+.3f}  paired 95% CI [{gain['gain_lo']:+.3f}, "
        f"{gain['gain_hi']:+.3f}]  (n={int(gain['tasks'])}, {int(gain['improved'])} tasks won "
        f"that were lost, {int(gain['worsened'])} lost that were won)"
    )


def format_success(label: str, result: dict[str, float]) -> str:
    """One line for the console: `label: 0.504  95% CI [0.460, 0.548]  (n=500)`."""
    return (
        f"{label}: {result['success']:.3f}  95% CI [{result['success_lo']:.3f}, "
        f"{result['success_hi']:.3f}]  (n={int(result['episodes'])})"
    )
