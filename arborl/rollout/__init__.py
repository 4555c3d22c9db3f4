"""The multi-turn rollout engine: episodes over an env pool, as Batches and Trajectories."""

from arborl.rollout.batching import build_batch, build_episode_batch, build_step_batch
from arborl.rollout.config import VIEWS, RolloutConfig
from arborl.rollout.engine import (
    RolloutResult,
    collect_episodes,
    draw_seeds,
    run_episodes_with_policy,
    run_rollout,
)
from arborl.rollout.episode import TRUNCATION_REASONS, EpisodeState, TurnRecord, to_trajectory
from arborl.rollout.metrics import episode_stats, wilson_interval
from arborl.rollout.policies import (
    BASELINE_POLICIES,
    Decision,
    LMPolicy,
    OraclePolicy,
    Policy,
    RandomPolicy,
    make_policy,
)

__all__ = [
    "BASELINE_POLICIES",
    "TRUNCATION_REASONS",
    "VIEWS",
    "Decision",
    "EpisodeState",
    "LMPolicy",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "RolloutConfig",
    "RolloutResult",
    "TurnRecord",
    "build_batch",
    "build_episode_batch",
    "build_step_batch",
    "collect_episodes",
    "draw_seeds",
    "episode_stats",
    "make_policy",
    "run_episodes_with_policy",
    "run_rollout",
    "to_trajectory",
    "wilson_interval",
]
