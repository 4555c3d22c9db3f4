"""Reward sources and their weighted combination on a hand-worked batch."""

import numpy as np
import pytest

from arborl.algos import UnknownNameError
from arborl.rewards import (
    REWARD_SOURCES,
    combine_rewards,
    get_reward_source,
    register_reward_source,
)

# Two episodes: rows 0-2 are one won episode (last step row 2), rows 3-4 a lost one.
FIELDS = {
    "env_reward": np.array([0.5, 0.0, 1.0, 0.0, 0.2]),
    "valid_action": np.array([1, 0, 1, 1, 1], dtype=bool),
    "format_ok": np.array([1, 1, 0, 1, 1], dtype=bool),
    "is_last": np.array([0, 0, 1, 0, 1], dtype=bool),
    "won": np.array([0, 0, 1, 0, 0], dtype=bool),
}


def test_builtin_sources_by_hand():
    np.testing.assert_array_equal(get_reward_source("env")(FIELDS), [0.5, 0.0, 1.0, 0.0, 0.2])
    np.testing.assert_array_equal(get_reward_source("outcome")(FIELDS), [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(get_reward_source("format")(FIELDS), [0, 0, -1, 0, 0])
    np.testing.assert_array_equal(get_reward_source("invalid_action")(FIELDS), [0, -1, 0, 0, 0])
    np.testing.assert_array_equal(get_reward_source("step")(FIELDS), [-1, -1, -1, -1, -1])
    # won on a non-final row does not count as an outcome
    np.testing.assert_array_equal(
        get_reward_source("outcome")({"won": np.array([1, 1]), "is_last": np.array([0, 1])}), [0, 1]
    )


def test_combine_rewards_by_hand():
    weights = {"env": 1.0, "outcome": 10.0, "invalid_action": 0.1, "format": 0.5, "step": 0.01}
    total, parts = combine_rewards(FIELDS, weights)
    # row 0: 0.5                           - 0.01 = 0.49
    # row 1: 0   - 0.1 (invalid)           - 0.01 = -0.11
    # row 2: 1 + 10 (won) - 0.5 (format)   - 0.01 = 10.49
    # row 3: 0                             - 0.01 = -0.01
    # row 4: 0.2                           - 0.01 = 0.19
    np.testing.assert_allclose(total, [0.49, -0.11, 10.49, -0.01, 0.19])
    assert set(parts) == set(weights)
    np.testing.assert_allclose(parts["outcome"], [0, 0, 10, 0, 0])
    np.testing.assert_allclose(sum(parts.values()), total)


def test_errors_name_the_source_the_field_and_the_fix():
    with pytest.raises(UnknownNameError, match="'rm'.*env.*format.*invalid_action.*outcome.*step"):
        combine_rewards(FIELDS, {"env": 1.0, "rm": 1.0})
    with pytest.raises(KeyError, match="'outcome' needs field 'won'"):
        combine_rewards({"env_reward": np.zeros(2), "is_last": np.ones(2)}, {"outcome": 1.0})
    with pytest.raises(ValueError, match="same length"):
        combine_rewards({"env_reward": np.zeros(2), "won": np.zeros(3)}, {"env": 1.0})
    with pytest.raises(ValueError, match="weights is empty"):
        combine_rewards(FIELDS, {})


def test_register_a_user_source():
    def length_bonus(fields):
        return 0.1 * np.asarray(fields["num_tokens"], dtype=float)

    register_reward_source("length_bonus", length_bonus)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_reward_source("length_bonus", length_bonus)
        total, parts = combine_rewards(
            {"env_reward": np.array([1.0, 0.0]), "num_tokens": np.array([10, 20])},
            {"env": 1.0, "length_bonus": -1.0},
        )
        # (1 - 0.1*10, 0 - 0.1*20) = (0, -2)
        np.testing.assert_allclose(total, [0.0, -2.0])
        register_reward_source("bad_shape", lambda fields: np.zeros(3))
        with pytest.raises(ValueError, match=r"'bad_shape' returned shape \(3,\)"):
            combine_rewards({"env_reward": np.zeros(2)}, {"bad_shape": 1.0})
    finally:
        REWARD_SOURCES.pop("length_bonus", None)
        REWARD_SOURCES.pop("bad_shape", None)


def test_potential_source_shapes_by_env_potential():
    # phi = -distance: 3 -> 2 (closer), 2 -> 2 (bump), 1 -> goal (terminal, phi' = 0).
    # shaped = phi' * (1 - term) - phi: (-2) - (-3) = 1; (-2) - (-2) = 0; 0 - (-1) = 1.
    # A row whose env gives no potential (NaN) gets 0.
    fields = {
        "potential": np.array([-3.0, -2.0, -1.0, np.nan]),
        "next_potential": np.array([-2.0, -2.0, 0.0, np.nan]),
        "terminated": np.array([0.0, 0.0, 1.0, 0.0]),
    }
    total, parts = combine_rewards(fields, {"potential": 0.5})
    np.testing.assert_allclose(total, [0.5, 0.0, 0.5, 0.0])
    np.testing.assert_allclose(parts["potential"], total)


def test_per_run_fns_replace_the_registry_and_write_no_global_state():
    from arborl.rewards import build_reward_fns
    from arborl.train.config import RewardConfig

    before = list(REWARD_SOURCES)
    fns = build_reward_fns(RewardConfig(sources={"env": 1.0, "step": 0.5}))
    assert fns == {"env": get_reward_source("env"), "step": get_reward_source("step")}
    # A per-run callable is used instead of the registry (here shadowing "env").
    total, parts = combine_rewards(FIELDS, {"env": 2.0}, fns={"env": lambda f: np.ones(5)})
    np.testing.assert_allclose(total, [2.0] * 5)
    with pytest.raises(KeyError, match=r"\['step'\] have weights but no function in fns"):
        combine_rewards(FIELDS, {"env": 1.0, "step": 1.0}, fns={"env": get_reward_source("env")})
    with pytest.raises(KeyError, match=r"'rmm'.*Did you mean 'rm'"):
        build_reward_fns(RewardConfig(sources={"rmm": 1.0}))
    with pytest.raises(ValueError, match="reward.rm_model is not set"):
        build_reward_fns(RewardConfig(sources={"rm": 1.0}))
    assert list(REWARD_SOURCES) == before
