"""The multi-turn rollout loop: episodes over an env pool, as Batches and Trajectories.

Names load on first use (PEP 562): `from arborl.rollout import RolloutConfig` must not
import torch and transformers, so that `arborl --help` and config loading stay fast.
"""

from arborl.lazy import lazy_exports

_EXPORTS = {
    "arborl.rollout.action_scoring": ("ScoringPolicy",),
    "arborl.rollout.batching": (
        "CHOICE_KEYS",
        "build_batch",
        "build_episode_batch",
        "build_step_batch",
    ),
    "arborl.rollout.config": ("VIEWS", "RolloutConfig", "with_turn_limit"),
    "arborl.rollout.loop": (
        "RolloutResult",
        "collect_episodes",
        "draw_seeds",
        "run_episodes_with_policy",
        "run_rollout",
    ),
    "arborl.rollout.episode": (
        "TRUNCATION_REASONS",
        "EpisodeState",
        "ScoredChoice",
        "TurnRecord",
        "to_trajectory",
    ),
    "arborl.rollout.metrics": ("episode_stats", "wilson_interval"),
    "arborl.rollout.policies": (
        "BASELINE_POLICIES",
        "Decision",
        "LMPolicy",
        "OraclePolicy",
        "Policy",
        "RandomPolicy",
        "make_lm_policy",
        "make_policy",
    ),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)
