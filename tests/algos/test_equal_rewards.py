"""Issue 16's two bugs: equal scores must give advantage exactly 0 (group statistics in
float64, a std within rounding noise of 0 is 0), and masked reductions must select the
valid positions, so a NaN/inf at a masked one cannot leak. Issue 34 #12: scores equal up
to float rounding at their own precision (float32 returns summed in another order) are
equal too. Each case failed before its fix (the old numbers are in the comments)."""

import math

import pytest
import torch

from arborl.algos import (
    aggregate,
    drgrpo,
    gigpo,
    group_stats,
    grpo,
    kl_penalized_rewards,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)
from arborl.algos.group import group_index


def test_eight_equal_scores_of_0_7_give_zero():
    # float32 mean of eight 0.7s was one ulp off: every member got 0.056
    adv = grpo(torch.full((8,), 0.7), [0] * 8)
    assert adv.dtype == torch.float32
    assert torch.equal(adv, torch.zeros(8))


def test_sixty_four_equal_scores_of_100_3_give_zero():
    # this was 0.974 for each of the 64
    assert torch.equal(grpo(torch.full((64,), 100.3), [0] * 64), torch.zeros(64))


def test_gigpo_anchor_group_with_a_shared_discounted_return_gets_zero():
    # 12 trajectories of one task, each s0 -r=0-> s1 -r=0-> s2 -r=1-> goal, gamma 0.95:
    # the anchor group s0 holds twelve returns of 0.95^2 = 0.9025, s1 twelve of 0.95.
    # Before the fix s0's steps got -0.106 and s1's +0.106 (and survived drop_zero_adv).
    rows = [(t, s, [0.0, 0.0, 1.0][s]) for t in range(12) for s in range(3)]
    out = gigpo(
        torch.tensor([r for _, _, r in rows]),
        [t for t, _, _ in rows],
        [s for _, s, _ in rows],
        [0] * len(rows),
        [f"s{s}" for _, s, _ in rows],
        gamma=0.95,
    )
    expected = torch.tensor([0.9025, 0.95, 1.0])
    torch.testing.assert_close(out.step_returns[:3], expected)
    assert torch.equal(out.step_adv, torch.zeros(36))
    assert torch.equal(out.advantages, torch.zeros(36))


@pytest.mark.parametrize("value", [0.7, 100.3, 0.95**7, -3.1, 1e6 + 0.1])
@pytest.mark.parametrize("n", [2, 3, 7, 11, 64, 1000])
def test_every_group_estimator_gives_zero_for_equal_scores(value, n):
    scores = torch.full((n,), value)
    for fn in (grpo, drgrpo, rloo, reinforce_pp_baseline):
        assert torch.equal(fn(scores, [0] * n), torch.zeros(n)), fn.__name__
    assert torch.equal(reinforce_pp(scores), torch.zeros(n))  # batch whitening, same rule


EPS32 = 2.0**-23  # float32 machine epsilon: one ulp at 1.0 (half an ulp just below it)


def test_float32_returns_equal_up_to_rounding_give_zero():
    # issue 34 #12: three float32 returns of 1.0 summed from their pieces in different
    # orders: 1 - 2^-24, 1, 1 + 2^-23. Spread 1.5 * 2^-23 <= EQUAL_ULPS (8) x 2^-23 x
    # magnitude (1 + 2^-23): equal. Before, mean 1 + 2^-24/3, deviations (-4, -1, 5)/3 x
    # 2^-24, unbiased std sqrt(42/18) x 2^-24 = 9.10e-8, so GRPO gave dev / (std + 1e-6)
    # = -0.0728, -0.0182, +0.0911 (and sixteen such returns up to 0.1316).
    x = torch.tensor([1 - EPS32 / 2, 1.0, 1 + EPS32])
    for fn in (grpo, drgrpo, rloo, reinforce_pp_baseline):
        assert torch.equal(fn(x, [0, 0, 0]), torch.zeros(3)), fn.__name__
    x16 = torch.tensor([1.0] * 8 + [1 - EPS32 / 2] * 7 + [1 + EPS32])
    assert torch.equal(grpo(x16, [0] * 16), torch.zeros(16))  # was 0.018 / -0.039 / 0.132


def test_returns_that_cancel_to_about_zero_compare_at_a_reward_unit():
    # 0.1 + 0.2 - 0.3 summed in float32 in three orders: 0, -2^-27, -2^-26. The magnitude
    # is taken as at least 1, so the tolerance is 8 x 2^-23 = 9.5e-7 >= 2^-26: equal.
    # Before: std = 7.45e-9 (unbiased, of (0, -1, -2) x 2^-27), adv = dev / (std + 1e-6).
    x = torch.tensor([0.0, -(2.0**-27), -(2.0**-26)])
    assert torch.equal(grpo(x, [0, 0, 0]), torch.zeros(3))


@pytest.mark.parametrize(
    "dtype,step,equal",
    [
        # float32: tolerance 8 ulps x magnitude. 1 vs 1 + 8 * 2^-23: spread 8 * 2^-23 <=
        # 8 * 2^-23 * (1 + 8 * 2^-23): equal. 9 ulps: 9 * 2^-23 > 8.0000009 * 2^-23: not.
        (torch.float32, 8 * 2.0**-23, True),
        (torch.float32, 9 * 2.0**-23, False),
        (torch.float32, 16 * 2.0**-23, False),
        # float64: 8 ulps is 1.8e-15, below the 1e-9 floor kept from issue 16:
        # 2^-30 = 9.3e-10 <= 1e-9 x (1 + 2^-30): equal; 2^-29 = 1.9e-9: not.
        (torch.float64, 2.0**-30, True),
        (torch.float64, 2.0**-29, False),
    ],
)
def test_the_equal_rule_sits_at_the_scores_own_precision(dtype, step, equal):
    # two scores d apart: deviations -/+d/2, unbiased std d / sqrt(2): GRPO (eps 0) -/+0.7071
    x = torch.tensor([1.0, 1.0 + step], dtype=dtype)
    adv = grpo(x, [0, 0], eps=0.0)
    expected = [0.0, 0.0] if equal else [-(0.5**0.5), 0.5**0.5]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=dtype), atol=1e-6, rtol=0)


def test_precision_names_the_rewards_scale_when_scores_come_wider():
    # float32 rewards 0.1 + 0.9 and 0.3 + 0.7 summed in float64 (as the trainer's episode
    # returns are): 0.99999997765 and 1.0, 2.2e-8 apart, 0.19 float32 ulps. At float64
    # precision that is a difference (+-0.7071 with eps 0); at float32 it is one return.
    a = float(torch.tensor(0.1).double() + torch.tensor(0.9).double())
    b = float(torch.tensor(0.3).double() + torch.tensor(0.7).double())
    scores = torch.tensor([a, b], dtype=torch.float64)
    torch.testing.assert_close(
        grpo(scores, [0, 0], eps=0.0), torch.tensor([-(0.5**0.5), 0.5**0.5], dtype=torch.float64)
    )
    for fn in (grpo, drgrpo, rloo, reinforce_pp_baseline):
        assert torch.equal(fn(scores, [0, 0], precision=torch.float32), torch.zeros(2))


def test_gigpo_float32_rewards_with_one_return_give_zero_at_both_levels():
    # trajectories A: rewards (0.1, 0.9), B: (0.3, 0.7) in float32, one task, gamma 1, both
    # start at state s0. Returns A = 0.99999997765, B = 1.0 in float64: equal at float32.
    # Before: episode adv -/+0.0110 (dev 1.1e-8 / (std 1.6e-8 + 1e-6)), the s0 steps the
    # same again, so A's first step got -0.0220 (and -/+1.414 with eps 0).
    out = gigpo(
        torch.tensor([0.1, 0.9, 0.3, 0.7]),
        ["A", "A", "B", "B"],
        [0, 1, 0, 1],
        [0, 0, 0, 0],
        ["s0", "a1", "s0", "b1"],
        gamma=1.0,
    )
    assert torch.equal(out.episode_adv, torch.zeros(4))
    assert torch.equal(out.step_adv, torch.zeros(4))
    assert torch.equal(out.advantages, torch.zeros(4))


def test_equal_groups_stay_zero_with_eps_zero():
    # the std of an equal group is 0; with eps=0, 0 / 0 used to make its advantages NaN
    adv = grpo(torch.tensor([0.7, 0.7, 0.0, 1.0]), [0, 0, 1, 1], eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([0.0, 0.0, -(0.5**0.5), 0.5**0.5]))


def test_group_stats_are_float64_with_noise_std_zero():
    x = torch.tensor([0.7] * 8 + [0.0, 1.0], dtype=torch.float32)
    index, g = group_index([0] * 8 + [1, 1])
    mean, std, count = group_stats(x, index, g)
    assert mean.dtype == std.dtype == torch.float64
    assert float(std[0]) == 0.0
    # group 1 = (0, 1): mean 0.5, unbiased std sqrt(0.5) = 0.70711
    assert float(std[1]) == pytest.approx(math.sqrt(0.5), abs=1e-12)
    assert count.tolist() == [8.0, 2.0]


NAN = float("nan")


def test_masked_mean_selects_rather_than_multiplies():
    # (1 + 4) / 2 = 2.5; (x * mask).sum() made it nan
    x, m = torch.tensor([1.0, 2.0, NAN, 4.0]), torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert float(masked_mean(x, m)) == 2.5
    assert float(masked_sum(x, m)) == 5.0
    # var of (1, 4): mean 2.5, ((1.5)^2 * 2) / 1 = 4.5
    assert float(masked_var(x, m)) == 4.5
    inf_x = torch.tensor([[1.0, float("inf")], [3.0, -float("inf")]])
    m2 = torch.tensor([[1, 0], [1, 0]])
    torch.testing.assert_close(masked_mean(inf_x, m2, dim=0), torch.tensor([2.0, 0.0]))
    # whitened (1, 4): (x - 2.5) / sqrt(4.5) = -/+0.7071; masked positions exactly 0
    white = masked_whiten(x, m, eps=0.0)
    torch.testing.assert_close(
        white, torch.tensor([-0.70711, 0.0, 0.0, 0.70711]), atol=1e-4, rtol=0
    )


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_aggregate_ignores_nan_at_masked_positions_and_its_gradient(mode):
    # row 0 valid (1, 2), row 1 valid (4); the NaNs are masked
    loss = torch.tensor([[1.0, 2.0, NAN], [4.0, NAN, NAN]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    clean = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]])
    out = aggregate(loss, mask, mode)
    assert math.isfinite(out.item())
    assert float(out) == pytest.approx(float(aggregate(clean, mask, mode)))
    out.backward()
    assert torch.isfinite(loss.grad).all()
    assert torch.equal(loss.grad[~mask.bool()], torch.zeros(3))


def test_in_reward_kl_ignores_masked_nan():
    rewards = torch.zeros(1, 3)
    logp = torch.tensor([[-1.0, -2.0, NAN]])
    ref = torch.tensor([[-1.5, -2.0, NAN]])
    out, seq_kl = kl_penalized_rewards(rewards, logp, ref, torch.tensor([[1, 1, 0]]), 1.0)
    # k1 = logp - ref = (0.5, 0); mean over 2 valid tokens = 0.25
    torch.testing.assert_close(out, torch.tensor([[-0.5, 0.0, 0.0]]))
    torch.testing.assert_close(seq_kl, torch.tensor([0.25]))
