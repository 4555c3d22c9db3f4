"""The multi-turn rollout engine: episodes over an env pool, as Batches and Trajectories.

Names load on first use (PEP 562): `from arborl.rollout import RolloutConfig` must not
import torch and transformers, so that `arborl --help` and config loading stay fast.
"""

import importlib

_EXPORTS = {
    "arborl.rollout.batching": ("build_batch", "build_episode_batch", "build_step_batch"),
    "arborl.rollout.config": ("VIEWS", "RolloutConfig"),
    "arborl.rollout.engine": (
        "RolloutResult",
        "collect_episodes",
        "draw_seeds",
        "run_episodes_with_policy",
        "run_rollout",
    ),
    "arborl.rollout.episode": ("TRUNCATION_REASONS", "EpisodeState", "TurnRecord", "to_trajectory"),
    "arborl.rollout.metrics": ("episode_stats", "wilson_interval"),
    "arborl.rollout.policies": (
        "BASELINE_POLICIES",
        "Decision",
        "LMPolicy",
        "OraclePolicy",
        "Policy",
        "RandomPolicy",
        "make_policy",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'arborl.rollout' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
