"""Issue 16's two bugs: equal scores must give advantage exactly 0 (group statistics in
float64, a std within rounding noise of 0 is 0), and masked reductions must select the
valid positions, so a NaN/inf at a masked one cannot leak. Each case failed before the fix
(the old numbers are in the comments)."""

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


def test_real_spread_survives_the_noise_rule():
    # two scores one float32 ulp apart (100.3 and its successor) still differ: +-0.7071
    a = torch.tensor(100.3)
    b = torch.nextafter(a, torch.tensor(200.0))
    adv = grpo(torch.stack([a, b]), [0, 0], eps=0.0)  # std ~5e-6: eps would dominate
    torch.testing.assert_close(adv, torch.tensor([-0.70711, 0.70711]), atol=1e-3, rtol=0)


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
