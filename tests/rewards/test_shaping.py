"""Potential-based shaping and per-episode discounted returns."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.rewards import (
    discounted_cumulative_returns,
    episode_potential_shaping,
    potential_shaping,
)


def test_potential_shaping_by_hand():
    # F = gamma * phi(s') * (1 - done) - phi(s), gamma = 0.9
    # (phi_s, phi_next, done) = (1, 2, 0) -> 1.8 - 1 = 0.8; (2, 5, 1) -> 0 - 2 = -2
    np.testing.assert_allclose(potential_shaping([1.0, 2.0], [2.0, 5.0], 0.9, [0, 1]), [0.8, -2.0])


def test_episode_shaping_with_a_distance_potential():
    # phi(s) = -distance to goal; states 3 -> 2 -> 1 -> 0 (terminal), gamma = 1:
    # F = (-2 + 3, -1 + 2, 0 + 1) = (1, 1, 1) (last transition: phi(terminal) = 0)
    shaped = episode_potential_shaping([3, 2, 1, 0], lambda d: -float(d), gamma=1.0)
    np.testing.assert_allclose(shaped, [1.0, 1.0, 1.0])
    # truncated at state 1 instead: F = (1, 1), phi(s_T) = -1 is kept
    truncated = episode_potential_shaping([3, 2, 1], lambda d: -float(d), 1.0, terminated=False)
    np.testing.assert_allclose(truncated, [1.0, 1.0])
    with pytest.raises(ValueError, match="T \\+ 1 states"):
        episode_potential_shaping([3], lambda d: 0.0, 1.0)


def test_discounted_cumulative_returns_by_hand():
    # r = (1, 0, 2), gamma 0.5: G2 = 2, G1 = 1, G0 = 1 + 0.5 = 1.5
    np.testing.assert_allclose(discounted_cumulative_returns([1.0, 0.0, 2.0], 0.5), [1.5, 1.0, 2.0])


episodes = st.integers(1, 8).flatmap(
    lambda t: st.tuples(
        st.lists(st.floats(-5, 5), min_size=t, max_size=t),  # rewards r_0..r_{T-1}
        st.lists(st.floats(-5, 5), min_size=t + 1, max_size=t + 1),  # phi(s_0..s_T)
    )
)


@settings(max_examples=50, deadline=None)
@given(episodes, st.floats(0, 1), st.booleans())
def test_shaping_telescopes(episode, gamma, terminated):
    rewards, potentials = episode
    shaped = episode_potential_shaping(
        list(range(len(potentials))), potentials.__getitem__, gamma, terminated
    )
    t = len(rewards)
    # sum_t gamma^t F_t = gamma^T phi(s_T) (0 if terminal) - phi(s_0)
    tail = 0.0 if terminated else gamma**t * potentials[-1]
    discounted_sum = sum(gamma**k * f for k, f in enumerate(shaped))
    assert discounted_sum == pytest.approx(tail - potentials[0], abs=1e-6)
    # so the shaped return from s_0 is the original return shifted by that constant;
    # for gamma = 1 and a terminal end: shaped return = original return - phi(s_0)
    orig = discounted_cumulative_returns(rewards, gamma)[0]
    new = discounted_cumulative_returns(np.asarray(rewards) + shaped, gamma)[0]
    assert new == pytest.approx(orig + tail - potentials[0], abs=1e-6)
    if terminated:
        shaped1 = episode_potential_shaping(list(range(t + 1)), potentials.__getitem__, 1.0)
        g1 = discounted_cumulative_returns(np.asarray(rewards) + shaped1, 1.0)[0]
        assert g1 == pytest.approx(sum(rewards) - potentials[0], abs=1e-6)
