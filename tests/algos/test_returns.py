"""GAE and discounted returns: hand-computed numbers, mask skipping, properties."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.algos import discounted_returns, gae


def test_gae_three_steps_by_hand():
    # r = (0, 0, 1), V = (0.5, 0.6, 0.7), gamma = 0.9, lam = 0.8, gamma*lam = 0.72
    # t=2: delta = 1 + 0.9*0 - 0.7 = 0.3;          A2 = 0.3
    # t=1: delta = 0 + 0.9*0.7 - 0.6 = 0.03;       A1 = 0.03 + 0.72*0.3 = 0.246
    # t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04;       A0 = 0.04 + 0.72*0.246 = 0.21712
    # returns = A + V = (0.71712, 0.846, 1.0)
    adv, ret = gae(
        torch.tensor([[0.0, 0.0, 1.0]]),
        torch.tensor([[0.5, 0.6, 0.7]]),
        torch.ones(1, 3),
        gamma=0.9,
        lam=0.8,
    )
    torch.testing.assert_close(adv, torch.tensor([[0.21712, 0.246, 0.3]]))
    torch.testing.assert_close(ret, torch.tensor([[0.71712, 0.846, 1.0]]))


def test_gae_skips_a_mask_hole_like_the_compacted_row():
    # The hole (an observation token) carries junk reward/value, even nan: it must be ignored.
    rewards = torch.tensor([[0.0, float("nan"), 0.0, 1.0]])
    values = torch.tensor([[0.5, float("nan"), 0.6, 0.7]])
    mask = torch.tensor([[1, 0, 1, 1]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    adv_c, ret_c = gae(
        torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]]), torch.ones(1, 3), 0.9, 0.8
    )
    torch.testing.assert_close(adv[:, [0, 2, 3]], adv_c)
    torch.testing.assert_close(ret[:, [0, 2, 3]], ret_c)
    assert adv[0, 1] == 0 and ret[0, 1] == 0


def test_gae_is_terminal_after_the_last_valid_position():
    # mask (1, 1, 0): the value beyond t=1 is 0, not V2 = 100.
    # A1 = 2 - 1 = 1; A0 = (0 + 0.5*1 - 1) + 0.5*1*1 = 0
    adv, _ = gae(
        torch.tensor([[0.0, 2.0, 0.0]]),
        torch.tensor([[1.0, 1.0, 100.0]]),
        torch.tensor([[1, 1, 0]]),
        gamma=0.5,
        lam=1.0,
    )
    torch.testing.assert_close(adv, torch.tensor([[0.0, 1.0, 0.0]]))


def test_discounted_returns_by_hand():
    # r = (1, 0, 2), gamma = 0.5: R2 = 2, R1 = 0 + 0.5*2 = 1, R0 = 1 + 0.5*1 = 1.5
    out = discounted_returns(torch.tensor([[1.0, 0.0, 2.0]]), torch.ones(1, 3), 0.5)
    torch.testing.assert_close(out, torch.tensor([[1.5, 1.0, 2.0]]))


def _reference_gae(rewards, values, mask, gamma, lam):
    """Scalar loops over each row's valid positions only (the compacted sequence)."""
    b, t = rewards.shape
    adv = torch.zeros(b, t, dtype=torch.float64)
    for i in range(b):
        idx = [j for j in range(t) if mask[i, j]]
        next_v = next_a = 0.0
        for j in reversed(idx):
            delta = float(rewards[i, j]) + gamma * next_v - float(values[i, j])
            next_a = delta + gamma * lam * next_a
            next_v = float(values[i, j])
            adv[i, j] = next_a
    return adv


rows = st.integers(1, 3).flatmap(
    lambda b: st.integers(1, 6).flatmap(
        lambda t: st.tuples(
            st.lists(st.floats(-3, 3), min_size=b * t, max_size=b * t),
            st.lists(st.floats(-3, 3), min_size=b * t, max_size=b * t),
            st.lists(st.booleans(), min_size=b * t, max_size=b * t),
            st.just((b, t)),
        )
    )
)


@settings(max_examples=40, deadline=None)
@given(rows, st.floats(0, 1), st.floats(0, 1))
def test_gae_matches_compacted_reference(data, gamma, lam):
    r, v, m, shape = data
    rewards = torch.tensor(r, dtype=torch.float64).reshape(shape)
    values = torch.tensor(v, dtype=torch.float64).reshape(shape)
    mask = torch.tensor(m).reshape(shape)
    adv, ret = gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, _reference_gae(rewards, values, mask, gamma, lam))
    torch.testing.assert_close(ret, torch.where(mask, adv + values, torch.zeros_like(adv)))


@settings(max_examples=40, deadline=None)
@given(rows, st.floats(0, 1))
def test_gae_with_lam_one_is_returns_minus_values(data, gamma):
    r, v, m, shape = data
    rewards = torch.tensor(r, dtype=torch.float64).reshape(shape)
    values = torch.tensor(v, dtype=torch.float64).reshape(shape)
    mask = torch.tensor(m).reshape(shape)
    adv, _ = gae(rewards, values, mask, gamma, lam=1.0)
    expected = torch.where(mask, discounted_returns(rewards, mask, gamma) - values, 0.0)
    torch.testing.assert_close(adv, expected)


def test_bad_arguments_are_named():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="gamma=1.5"):
        gae(x, x, x, gamma=1.5, lam=0.9)
    with pytest.raises(ValueError, match="lam=-0.1"):
        gae(x, x, x, gamma=0.9, lam=-0.1)
    with pytest.raises(ValueError, match="shapes"):
        gae(x, torch.zeros(2, 4), x, gamma=0.9, lam=0.9)
