"""GRPO, Dr.GRPO, RLOO and REINFORCE++ over episode scores: hand numbers and properties."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.algos import drgrpo, group_index, grpo, reinforce_pp, rloo


def test_grpo_by_hand_uses_the_unbiased_std():
    # group "a" = (1, 2, 3): mean 2, unbiased std = sqrt((1 + 0 + 1) / 2) = 1
    #   -> (-1, 0, 1). (The biased std sqrt(2/3) would give -/+1.2247.)
    # group "b" = (5,): a singleton -> 0.
    adv = grpo([1.0, 2.0, 3.0, 5.0], ["a", "a", "a", "b"], eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 1.0, 0.0]))


def test_grpo_pair_and_constant_group():
    # (0, 1): mean 0.5, unbiased std 0.70711 -> -/+0.5 / 0.70711 = -/+0.70711
    # (4, 4): std 0 -> 0 / eps = 0
    adv = grpo(torch.tensor([0.0, 1.0, 4.0, 4.0]), torch.tensor([7, 7, 9, 9]))
    torch.testing.assert_close(adv, torch.tensor([-0.70711, 0.70711, 0.0, 0.0]), atol=1e-4, rtol=0)


def test_drgrpo_does_not_divide_by_std():
    # (0, 4): mean 2 -> (-2, 2); (3,) singleton -> 0
    torch.testing.assert_close(drgrpo([0.0, 4.0, 3.0], [0, 0, 1]), torch.tensor([-2.0, 2.0, 0.0]))


def test_rloo_by_hand():
    # (1, 2, 6): A0 = 1 - (2+6)/2 = -3; A1 = 2 - (1+6)/2 = -1.5; A2 = 6 - (1+2)/2 = 4.5
    # (10,) singleton -> 0
    adv = rloo([1.0, 2.0, 6.0, 10.0], [0, 0, 0, 1])
    torch.testing.assert_close(adv, torch.tensor([-3.0, -1.5, 4.5, 0.0]))


def test_reinforce_pp_by_hand():
    # (1, 2, 3, 6): mean 3, deviations (-2, -1, 0, 3), unbiased var = 14/3, std 2.16025
    #   -> (-0.92582, -0.46291, 0, 1.38873)
    adv = reinforce_pp([1.0, 2.0, 3.0, 6.0])
    torch.testing.assert_close(adv, torch.tensor([-0.92582, -0.46291, 0.0, 1.38873]))


def test_reinforce_pp_baseline_by_hand():
    # groups (1, 3) and (10, 14): minus group means -> (-1, 1, -2, 2); batch mean 0,
    # unbiased var = (1 + 1 + 4 + 4) / 3 = 10/3, std 1.82574 -> (-0.54772, 0.54772, -1.09545, 1.09545)
    adv = reinforce_pp([1.0, 3.0, 10.0, 14.0], [0, 0, 1, 1], baseline=True)
    torch.testing.assert_close(adv, torch.tensor([-0.54772, 0.54772, -1.09545, 1.09545]))
    with pytest.raises(ValueError, match="needs group_ids"):
        reinforce_pp([1.0, 2.0], baseline=True)


def test_group_ids_of_any_hashable_kind_agree():
    scores = [1.0, 5.0, 2.0, 8.0, 3.0]
    ints = grpo(scores, torch.tensor([3, 1, 3, 1, 3]))
    torch.testing.assert_close(
        grpo(scores, [("t", 3), ("t", 1), ("t", 3), ("t", 1), ("t", 3)]), ints
    )
    torch.testing.assert_close(grpo(scores, np.array(["x", "y", "x", "y", "x"])), ints)


def test_group_index_errors():
    with pytest.raises(ValueError, match="integer tensor"):
        group_index(torch.tensor([0.5, 1.5]))
    with pytest.raises(TypeError, match=r"group_ids\[1\]=\[1\] is not hashable"):
        group_index([0, [1]])
    with pytest.raises(ValueError, match="group_ids has 1 entries but scores has 2"):
        grpo([1.0, 2.0], [0])


groups = st.lists(st.tuples(st.floats(-10, 10), st.integers(0, 4)), min_size=1, max_size=30)


@settings(max_examples=50, deadline=None)
@given(groups)
def test_group_advantages_have_zero_mean_per_group(rows):
    scores = torch.tensor([s for s, _ in rows], dtype=torch.float64)
    ids = torch.tensor([g for _, g in rows])
    for adv in (grpo(scores, ids), drgrpo(scores, ids), rloo(scores, ids)):
        for g in ids.unique():
            assert abs(float(adv[ids == g].sum())) < 1e-6
    # std-normalised groups with spread have unbiased std 1 (up to eps)
    adv = grpo(scores, ids, eps=0.0)
    for g in ids.unique():
        member = scores[ids == g]
        if member.numel() > 1 and float(member.std()) > 1e-3:
            assert abs(float(adv[ids == g].std()) - 1.0) < 1e-6


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=2, max_size=20))
def test_reinforce_pp_is_whitened_over_the_batch(scores):
    s = torch.tensor(scores, dtype=torch.float64)
    adv = reinforce_pp(s)
    assert abs(float(adv.mean())) < 1e-6
    if float(s.std()) > 1e-2:
        assert abs(float(adv.std()) - 1.0) < 1e-3
