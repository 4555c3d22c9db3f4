"""Held-out evaluation of an LM policy: success with a Wilson 95% interval.

The same tasks (seeds drawn from `eval.seed`) are used before and after RL, with the same
sampling seed, so the two numbers are a paired comparison on identical mazes, rooms or
puzzles: `paired_gain` gives the change with its paired 95% interval.

Every engine and `arborl sft` make the same call, `evaluate_policy(backend, tokenizer,
cfg)` (the Ray engine: `evaluate_share` per worker, then `summarize_eval`), which reads
the run's own config, so no caller can drop a setting; and they handle its result with
`record_evaluation`. The success bounds are `success_lo`/`success_hi` everywhere.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from pathlib import Path

from arborl.data import write_trajectories
from arborl.envs.poolset import PoolSet
from arborl.registry import load_entry_point
from arborl.rollout import draw_seeds, run_episodes_with_policy
from arborl.rollout.metrics import episode_stats, wilson_interval
from arborl.rollout.policies import make_lm_policy
from arborl.train.build import build_pool_set
from arborl.train.config import TrainConfig
from arborl.train.rollout_modes import get_rollout_mode

STAT_KEYS = ("mean_return", "mean_turns", "invalid_action_rate")


def evaluate_share(
    backend, tokenizer, cfg: TrainConfig, seeds: list[int], sample_seed: int,
    pools: PoolSet | None = None,
) -> dict:  # fmt: skip
    """One episode of each task in `seeds`, sampled at `eval.temperature` from
    `sample_seed`, in the run's `env.eval_split` and `env.pool_mode` (so a packaged env is
    evaluated where it is trained), `eval.chunk_episodes` at a time, on the run's `pools`
    (its worker processes, kept for the next evaluation; without, pools built for this
    call and closed after it: `build_pool_set`). Returns `episodes`,
    `wins`, `env_errors`, the mean of each of `STAT_KEYS`, `outcomes` (task seed -> 1.0
    won / 0.0 lost, for `paired_gain`) and `sample`: the first `eval.save_episodes`
    trajectories (for the report). One engine worker's share of an evaluation;
    `summarize_eval` combines shares."""
    own = get_rollout_mode(cfg.rollout.mode).evaluate_share
    if own is not None:  # a mode whose episodes are not arborl's prompt loop (agent)
        share = load_entry_point(own, f"rollout.mode={cfg.rollout.mode} evaluate_share")
        return share(backend, tokenizer, cfg, seeds, sample_seed)
    n = len(seeds)
    ev, env = cfg.eval, cfg.env
    roll = replace(
        cfg.rollout, group_size=1, num_tasks=n, temperature=ev.temperature, seed=sample_seed
    )
    policy = make_lm_policy(backend, tokenizer, roll, cfg.agent)
    chunk = ev.chunk_episodes or n
    episodes, trajectories = [], []
    with contextlib.ExitStack() as own:
        if pools is None:
            pools = own.enter_context(build_pool_set(cfg))
        for c in range(0, n, chunk):  # one policy: each chunk continues its sampling streams
            part = seeds[c : c + chunk]
            res = run_episodes_with_policy(
                policy, pools, part, roll, split=env.eval_split, env_kwargs=env.kwargs
            )
            episodes += res.episodes
            trajectories += res.trajectories
    return share_metrics(episodes, trajectories, seeds, ev.save_episodes)


def share_metrics(episodes: list, trajectories: list, seeds: list, save_episodes: int) -> dict:
    """One evaluation share's metrics from its episodes (one per seed, in order): episodes,
    wins, env errors, the episode-weighted stats, per-seed outcomes and a sample."""
    stats = episode_stats(episodes, 0.0)
    out = {"episodes": float(len(seeds)), "wins": float(sum(t.won for t in trajectories))}
    out["env_errors"] = float(stats.get("env_errors", 0.0))
    out.update({k: float(stats[k]) for k in STAT_KEYS if k in stats})
    out["outcomes"] = {int(seed): float(t.won) for seed, t in zip(seeds, trajectories, strict=True)}
    if save_episodes:
        out["sample"] = trajectories[:save_episodes]
    return out


def summarize_eval(shares: list[dict], keep_episodes: int = 0) -> dict:
    """The held-out metrics of the whole evaluation (every engine logs these names):
    success with its Wilson 95% interval, episodes, and the episode-weighted means; with
    `keep_episodes`, also `sample`: up to that many of the shares' trajectories, and
    `outcomes`: task seed -> 1.0/0.0 over all shares (neither is a metric:
    `record_evaluation` takes both out)."""
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
    cfg: TrainConfig,
    num_episodes: int | None = None,
    seeds: list[int] | None = None,
    pools: PoolSet | None = None,
) -> dict:
    """The held-out evaluation of the run `cfg` (`summarize_eval`'s names): one episode
    of each of `num_episodes` (default `eval.num_episodes`) tasks drawn from `eval.seed`,
    or of the task seeds `seeds` when given, on the run's `pools` when given; see
    `evaluate_share` for what it reads."""
    if seeds is None:
        seeds = draw_seeds(num_episodes or cfg.eval.num_episodes, cfg.eval.seed)
    elif num_episodes is not None and num_episodes != len(seeds):
        raise ValueError(
            f"evaluate_policy: num_episodes={num_episodes} but {len(seeds)} seeds were "
            "given; pass one or the other"
        )
    share = evaluate_share(backend, tokenizer, cfg, list(seeds), cfg.eval.seed, pools)
    return summarize_eval([share], cfg.eval.save_episodes)


def record_evaluation(
    run_dir: str | Path, step: int, result: dict
) -> tuple[dict[str, float], dict[int, float]]:
    """Split an evaluation `result` (`summarize_eval`'s) into its metrics and its
    per-task `outcomes` (for `paired_gain`), writing its `sample` of trajectories, if any,
    to `run_dir/eval_episodes/step-{step:05d}.jsonl` for the report. `result` itself is
    left as it was."""
    metrics = dict(result)
    outcomes = metrics.pop("outcomes", {})
    sample = metrics.pop("sample", None)
    if sample:
        write_trajectories(Path(run_dir) / "eval_episodes" / f"step-{step:05d}.jsonl", sample)
    return metrics, outcomes


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
