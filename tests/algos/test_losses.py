"""PPO policy/value losses, entropy and aggregation modes on hand-worked examples."""

import math

import pytest
import torch

from arborl.algos import (
    UnknownNameError,
    aggregate,
    entropy_from_logits,
    get_agg_mode,
    ppo_policy_loss,
    value_loss,
)


def _logp(*ratios):
    return torch.tensor([[math.log(r) for r in ratios]], requires_grad=True)


def test_clipped_ratio_has_zero_gradient_and_unclipped_does_not():
    # A = +1 on both tokens, old_logp = 0, ratios (1.5, 1.1), clip 0.2:
    #   token 0: max(-1.5, -1.2) = -1.2, the clipped branch: constant, gradient 0
    #   token 1: max(-1.1, -1.1) = -1.1 (inside the range): d/dlogp (-r)/2 = -1.1/2 = -0.55
    # token-mean loss = (-1.2 - 1.1) / 2 = -1.15; clipfrac 1/2
    logp = _logp(1.5, 1.1)
    loss, stats = ppo_policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    loss.backward()
    assert loss.item() == pytest.approx(-1.15)
    assert float(logp.grad[0, 0]) == 0.0
    assert float(logp.grad[0, 1]) == pytest.approx(-0.55)
    assert float(stats["clipfrac"]) == 0.5
    # approx_kl = mean(old - new) = -(ln 1.5 + ln 1.1) / 2
    assert float(stats["approx_kl"]) == pytest.approx(-(math.log(1.5) + math.log(1.1)) / 2)
    assert float(stats["ratio_mean"]) == pytest.approx(1.3)


def test_clip_higher_and_negative_advantage_clipping():
    # ratio 1.25 with A = +1: clipped at 1.2 by default, free under clip_high = 0.28
    loss, _ = ppo_policy_loss(_logp(1.25), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-1.2)
    loss, _ = ppo_policy_loss(
        _logp(1.25), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), clip_high=0.28
    )
    assert loss.item() == pytest.approx(-1.25)
    # A = -1, ratio 0.5 < 1 - 0.2: max(0.5, 0.8) = 0.8, constant -> gradient 0
    logp = _logp(0.5)
    loss, _ = ppo_policy_loss(logp, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(0.8) and float(logp.grad) == 0.0


def test_dual_clip_caps_the_loss_of_negative_advantages():
    # A = -1, ratio 5: plain PPO loss max(5, 1.2) = 5; the dual cap -A*3 = 3 wins -> 3, grad 0
    logp = _logp(5.0)
    plain, _ = ppo_policy_loss(logp, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1))
    assert plain.item() == pytest.approx(5.0)
    loss, stats = ppo_policy_loss(
        logp, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1), dual_clip=3.0
    )
    loss.backward()
    assert loss.item() == pytest.approx(3.0) and float(logp.grad) == 0.0
    assert float(stats["clipfrac_dual"]) == 1.0
    # a positive advantage is never capped: A = +1, ratio 5 -> -1.2
    pos, _ = ppo_policy_loss(
        _logp(5.0), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), dual_clip=3.0
    )
    assert pos.item() == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="dual_clip=0.5"):
        ppo_policy_loss(logp, logp, logp, logp, dual_clip=0.5)


def test_policy_loss_broadcasts_episode_advantages_and_skips_masked_tokens():
    # advantages (B,) = (2,) broadcast over T; token 1 is masked (huge ratio ignored).
    # ratio 1 on token 0: loss = -2 * 1 = -2
    logp = torch.tensor([[0.0, 10.0]])
    loss, stats = ppo_policy_loss(
        logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.tensor([[1, 0]])
    )
    assert loss.item() == pytest.approx(-2.0)
    assert float(stats["ratio_max"]) == pytest.approx(1.0)


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 is padding


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        # valid tokens: row 0 -> (1, 2), row 1 -> (4); row 2 has none and is left out
        ("token-mean", {}, 7 / 3),  # (1 + 2 + 4) / 3
        ("token-mean", {"num_tokens": 7}, 1.0),  # 7 / 7, a mini-batch token count
        ("seq-mean-token-sum", {}, 3.5),  # (3 + 4) / 2
        ("seq-mean-token-mean", {}, 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", {}, 7 / 6),  # (3/3 + 4/3) / 2, max_len = T = 3
        ("seq-mean-token-sum-norm", {"max_len": 10}, 0.35),  # (0.3 + 0.4) / 2
        ("seq-mean-token-sum", {"num_seqs": 7}, 1.0),  # 7 / 7
    ],
)
def test_aggregate_modes_by_hand(mode, kwargs, expected):
    assert float(aggregate(LOSS, MASK, mode, **kwargs)) == pytest.approx(expected)


def test_unknown_agg_mode_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="agg='mean'.*seq-mean-token-mean.*token-mean"):
        get_agg_mode("mean")


def test_value_loss_by_hand():
    # token 0: v=1, v_old=0.5, R=1: err 0; clipped v = 0.5 + 0.2 = 0.7 -> 0.09; max 0.09
    # token 1: v=2, v_old=2,  R=3: err 1; clipped v = 2 -> 1; max 1
    # loss = 0.5 * (0.09 + 1) / 2 = 0.2725; clipped error larger on 1 of 2 tokens
    values, old, ret = (
        torch.tensor([[1.0, 2.0]]),
        torch.tensor([[0.5, 2.0]]),
        torch.tensor([[1.0, 3.0]]),
    )
    loss, stats = value_loss(values, old, ret, torch.ones(1, 2), clip=0.2)
    assert loss.item() == pytest.approx(0.2725)
    assert float(stats["clipfrac"]) == 0.5
    # no clipping: 0.5 * (0 + 1) / 2 = 0.25
    loss, _ = value_loss(values, old, ret, torch.ones(1, 2), clip=None)
    assert loss.item() == pytest.approx(0.25)


def test_entropy_by_hand_chunked_and_with_masked_logits():
    # uniform over 4 -> ln 4 = 1.386294; p = (1/4, 3/4) -> -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335
    # logits (0, 0, -inf) -> uniform over 2 -> ln 2
    logits = torch.tensor(
        [[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3), -1e9, -1e9], [0.0, 0.0, -math.inf, -math.inf]]]
    )
    h = entropy_from_logits(logits)
    torch.testing.assert_close(h, torch.tensor([[math.log(4), 0.562335, math.log(2)]]))
    x = torch.randn(2, 5, 7, requires_grad=True)
    full = entropy_from_logits(x)
    chunked = entropy_from_logits(x, chunk_size=3)
    torch.testing.assert_close(chunked, full)
    # reference: -sum p log p
    ref = -(torch.softmax(x, -1) * torch.log_softmax(x, -1)).sum(-1)
    torch.testing.assert_close(full, ref)
    chunked.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
