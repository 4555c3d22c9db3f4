"""Rollout and eval figures: success rate with a Wilson interval, returns, turns, rates.

`wilson_interval` is the binomial confidence interval every success rate in arborl is
reported with (eval tables, trainer logs): unlike the normal approximation it stays inside
[0, 1] and is sensible at 0/n and n/n, which tiny evals hit often.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for `k` successes in `n` trials (z=1.96: 95%).

    Returns (low, high); (0.0, 1.0) when n == 0 (nothing is known).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def episode_stats(episodes: Sequence[Any], wall_s: float) -> dict[str, float]:
    """Aggregate figures of finished `EpisodeState`s.

    success (+ success_lo/hi, Wilson 95%), mean_return (of the episodes whose
    return is finite), mean_turns,
    invalid_action_rate and format_ok_rate (over turns), truncated_rate, env_errors
    (episodes an env fault ended), episodes, turns,
    generated_tokens, wall_s, tokens_per_s and turns_per_s.
    """
    turns = [t for ep in episodes for t in ep.turns]
    wins = sum(bool(ep.won) for ep in episodes)
    low, high = wilson_interval(wins, len(episodes))
    tokens = sum(ep.generated_tokens for ep in episodes)
    wall = max(wall_s, 1e-9)
    return {
        "success": wins / len(episodes) if episodes else 0.0,
        "success_lo": low,
        "success_hi": high,
        # an episode whose reward is not finite is an env error (counted below): no mean
        "mean_return": _mean([r for ep in episodes if math.isfinite(r := ep.total_return)]),
        "mean_turns": _mean([len(ep.turns) for ep in episodes]),
        "invalid_action_rate": _mean([0.0 if t.valid_action else 1.0 for t in turns]),
        "format_ok_rate": _mean([1.0 if t.format_ok else 0.0 for t in turns]),
        "truncated_rate": _mean([1.0 if ep.truncated else 0.0 for ep in episodes]),
        "env_errors": float(sum(ep.truncation_reason == "env_error" for ep in episodes)),
        "episodes": float(len(episodes)),
        "turns": float(len(turns)),
        "generated_tokens": float(tokens),
        "wall_s": float(wall_s),
        "tokens_per_s": tokens / wall,
        "turns_per_s": len(turns) / wall,
    }
