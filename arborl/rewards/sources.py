"""Reward sources and their weighted combination, batched over step rows.

A reward source is a function of the batch's per-row fields, `fn(fields) -> (N,) float`,
where `fields` maps names such as `env_reward`, `valid_action`, `format_ok`, `is_last`
and `won` to (N,) numpy arrays (one entry per step row). Batched rather than per-row so a
reward model can score many rows in one call. `combine_rewards` sums weighted sources and
returns each weighted component too, so every one is logged as `reward/<name>`.

Built-ins (`REWARD_SOURCES`):
- "env": the env's own reward (`env_reward`).
- "outcome": 1 on the last step of an episode that was won (`won` and `is_last`), else 0.
- "format": -(1 - format_ok): -1 where the response did not parse.
- "invalid_action": -(1 - valid_action): -1 where the env rejected the action.
- "step": -1 on every row, a per-step cost that favours short solutions.
- "potential": potential-based shaping phi(s') - phi(s) from the env's `info['potential']`.

A trained reward model joins as "rm": it is not a built-in but is built per run, from
`reward.rm_model`, by `arborl.rewards.build_reward_fns(reward_cfg)`, whose callables the
trainer passes to `combine_rewards(..., fns=...)`. No run writes into `REWARD_SOURCES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from arborl.registry import Registry

FIELDS: dict[str, str] = {
    "env_reward": "float: the reward the env returned for the step.",
    "valid_action": "bool: the env accepted the action.",
    "format_ok": "bool: the model's response parsed (e.g. had <action>...</action>).",
    "is_last": "bool: the row is the last step of its episode.",
    "won": "bool: the env reported success at this step.",
    "potential": "float: the env's potential phi(s) before the step (NaN if it gives none).",
    "next_potential": "float: phi(s') after the step (NaN if the env gives none).",
    "terminated": "bool: the step ended the episode in a terminal state.",
}
"""Field names the built-in sources read, with their meaning."""


def batch_fields(batch) -> dict[str, np.ndarray]:
    """The `FIELDS` of each step row of a rollout `Batch` (`arborl.rollout.batching`), the
    arrays a reward source is called with."""
    done = batch.meta["done"]
    return {
        "env_reward": batch.tensors["step_reward"].numpy(),
        "valid_action": batch.meta["valid_action"].astype(float),
        "format_ok": batch.meta["format_ok"].astype(float),
        "is_last": done.astype(float),
        "won": batch.tensors["won"].numpy() & done.astype(bool),
        "potential": batch.meta["potential"].astype(float),
        "next_potential": batch.meta["next_potential"].astype(float),
        "terminated": batch.meta["terminated"].astype(float),
    }


@runtime_checkable
class RewardFn(Protocol):
    """A batched reward source: per-row fields in, one float per row out."""

    def __call__(self, fields: Mapping[str, np.ndarray]) -> np.ndarray: ...


def num_rows(fields: Mapping[str, np.ndarray]) -> int:
    """The common length N of all fields; raises if they disagree or there are none."""
    lengths = {name: len(np.asarray(v)) for name, v in fields.items()}
    if not lengths:
        raise ValueError("fields is empty; pass at least one (N,) array, e.g. env_reward")
    if len(set(lengths.values())) != 1:
        raise ValueError(f"all fields must have the same length N, got lengths {lengths}")
    return next(iter(lengths.values()))


def get_field(fields: Mapping[str, np.ndarray], name: str, source: str) -> np.ndarray:
    """`fields[name]` as a float64 (N,) array; a missing field names the source needing it."""
    if name not in fields:
        raise KeyError(
            f"reward source {source!r} needs field {name!r} ({FIELDS.get(name, 'user field')}); "
            f"fields has {sorted(fields)}; add it to the rollout's per-step record"
        )
    return np.asarray(fields[name], dtype=np.float64).reshape(-1)


def env_reward(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """The env's reward per row."""
    return get_field(fields, "env_reward", "env")


def outcome_reward(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """1.0 on the last row of a won episode, 0.0 elsewhere."""
    won = get_field(fields, "won", "outcome")
    last = get_field(fields, "is_last", "outcome")
    return ((won > 0) & (last > 0)).astype(np.float64)


def format_penalty(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """-1.0 where the response did not parse, 0.0 where it did."""
    return -(1.0 - get_field(fields, "format_ok", "format"))


def invalid_action_penalty(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """-1.0 where the env rejected the action, 0.0 where it accepted it."""
    return -(1.0 - get_field(fields, "valid_action", "invalid_action"))


def step_penalty(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """-1.0 on every row."""
    return -np.ones(num_rows(fields), dtype=np.float64)


def potential_reward(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """Potential-based shaping from the env's own `info['potential']` (undiscounted):
    phi(s') * (1 - terminated) - phi(s). It telescopes over an episode, so it changes no
    optimal policy (Ng et al., 1999); rows whose env gives no potential get 0."""
    phi = get_field(fields, "potential", "potential")
    phi_next = get_field(fields, "next_potential", "potential")
    term = get_field(fields, "terminated", "potential")
    shaped = phi_next * (1.0 - term) - phi
    return np.where(np.isnan(shaped), 0.0, shaped)


REWARD_SOURCES: Registry[RewardFn] = Registry(
    "reward source",
    message="{what} {name} is not known; use one of: {known} (or register_reward_source).{hint}",
)
"""Reward sources by name. Add more with `register_reward_source`."""
REWARD_SOURCES.register("env", env_reward)
REWARD_SOURCES.register("outcome", outcome_reward)
REWARD_SOURCES.register("format", format_penalty)
REWARD_SOURCES.register("invalid_action", invalid_action_penalty)
REWARD_SOURCES.register("step", step_penalty)
REWARD_SOURCES.register("potential", potential_reward)


def register_reward_source(
    name: str, fn: Callable[[Mapping[str, np.ndarray]], np.ndarray], overwrite: bool = False
) -> None:
    """Make `fn` available to `combine_rewards` under `name`.

    Re-registering a name raises unless `overwrite=True`, so two plug-ins cannot silently
    shadow each other.
    """
    if not callable(fn):
        raise TypeError(f"reward source {name!r} must be callable(fields) -> (N,), got {fn!r}")
    if name in REWARD_SOURCES and not overwrite:
        raise ValueError(
            f"reward source {name!r} is already registered; pick another name or pass "
            "overwrite=True"
        )
    REWARD_SOURCES.register(name, fn)


def get_reward_source(name: str) -> RewardFn:
    """The reward source called `name`; raises listing the known names."""
    return REWARD_SOURCES.get(name)


def combine_rewards(
    fields: Mapping[str, np.ndarray],
    weights: Mapping[str, float],
    fns: Mapping[str, RewardFn] | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted sum of reward sources: `(total (N,), {name: weight * source(fields) (N,)})`.

    `fns` (name -> callable, e.g. from `build_reward_fns(reward_cfg)`) are the run's own
    sources and are used instead of the registry when given. The components are the
    weighted contributions, so they add up to `total`. Every name in `weights` is checked
    before any source runs.
    """
    if not weights:
        raise ValueError("weights is empty; give at least one source, e.g. {'env': 1.0}")
    if fns is None:
        sources = {name: get_reward_source(name) for name in weights}
    else:
        missing = sorted(set(weights) - set(fns))
        if missing:
            raise KeyError(
                f"reward sources {missing} have weights but no function in fns (it has "
                f"{sorted(fns)}); build fns with build_reward_fns(reward_cfg) from the same "
                "reward.sources"
            )
        sources = {name: fns[name] for name in weights}
    n = num_rows(fields)
    total = np.zeros(n, dtype=np.float64)
    components: dict[str, np.ndarray] = {}
    for name, fn in sources.items():
        raw = np.asarray(fn(fields), dtype=np.float64).reshape(-1)
        if raw.shape != (n,):
            raise ValueError(
                f"reward source {name!r} returned shape {raw.shape}; it must return ({n},), "
                "one reward per row"
            )
        components[name] = float(weights[name]) * raw
        total += components[name]
    return total, components
