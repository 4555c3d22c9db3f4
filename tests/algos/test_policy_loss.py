"""The policy-loss registry: PPO-clip is one entry, CISPO another, on hand-worked numbers."""

import math
from types import SimpleNamespace

import pytest
import torch

from arborl.algos.losses import ppo_policy_loss
from arborl.algos.policy_loss import (
    POLICY_LOSSES,
    CISPOOptions,
    cispo_policy_loss,
    get_policy_loss,
)


def _inputs():
    # Row 0: A = +1, ratios r = 1, 2, 8 (all three tokens valid).
    # Row 1: A = -2, ratios r = 1/4, 1, (1, masked out).
    logp = torch.tensor([[-1.0, -0.5, -0.25], [-2.0, -1.0, -3.0]], dtype=torch.float64)
    log_ratio = torch.tensor(
        [[0.0, math.log(2), math.log(8)], [math.log(0.25), 0.0, 0.0]], dtype=torch.float64
    )
    old = logp - log_ratio
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    return logp.requires_grad_(), old, adv, mask


def test_cispo_caps_the_weight_and_keeps_every_tokens_gradient():
    logp, old, adv, mask = _inputs()
    loss, stats = cispo_policy_loss(logp, old, adv, mask, clip_low=None, clip_high=4.0)
    # w = clip(r, no floor, 1 + 4 = 5): row 0 -> 1, 2, 5 (8 capped); row 1 -> 0.25, 1.
    # Token losses -A w: row 0 -> -1, -2, -5; row 1 -> +0.5, +2. token-mean over the 5
    # valid tokens: (-1 - 2 - 5 + 0.5 + 2) / 5 = -5.5 / 5 = -1.1.
    assert float(loss.detach()) == pytest.approx(-1.1, abs=1e-9)
    loss.backward()
    # d loss / d logp = -A w / 5: row 0 -> -0.2, -0.4, -1.0; row 1 -> 0.1, 0.4, 0 (masked).
    expected = torch.tensor([[-0.2, -0.4, -1.0], [0.1, 0.4, 0.0]], dtype=torch.float64)
    assert torch.allclose(logp.grad, expected, atol=1e-9)
    assert float(stats["clipfrac"]) == pytest.approx(1 / 5)  # the 8 only
    # ratio_mean = (1 + 2 + 8 + 0.25 + 1) / 5 = 2.45; ratio_max 8.
    assert float(stats["ratio_mean"]) == pytest.approx(2.45)
    assert float(stats["ratio_max"]) == pytest.approx(8.0)


def test_cispo_floor_and_the_contrast_with_ppo_clip():
    logp, old, adv, mask = _inputs()
    loss, stats = cispo_policy_loss(logp, old, adv, mask, clip_low=0.5, clip_high=4.0)
    # The floor 1 - 0.5 lifts row 1's 0.25 to 0.5: its token loss -(-2)(0.5) = +1, so the
    # mean is (-1 - 2 - 5 + 1 + 2) / 5 = -1.0; two of five weights clipped.
    assert float(loss.detach()) == pytest.approx(-1.0, abs=1e-9)
    assert float(stats["clipfrac"]) == pytest.approx(2 / 5)
    # PPO-clip (0.2, 0.28) gives the r = 8 token (A > 0, r > 1.28) no gradient at all;
    # CISPO gave it -1.0 above.
    ppo, _ = ppo_policy_loss(logp, old, adv, mask, 0.2, 0.28)
    (grad,) = torch.autograd.grad(ppo, logp)
    assert float(grad[0, 2]) == 0.0


def test_the_registry_holds_both_and_ppo_clip_reads_the_algo_section():
    assert POLICY_LOSSES.names() == ["cispo", "ppo_clip"]
    assert get_policy_loss("cispo").options is CISPOOptions
    assert get_policy_loss("ppo_clip").options is None
    logp, old, adv, mask = _inputs()
    algo = SimpleNamespace(clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    got, _ = get_policy_loss("ppo_clip").fn(logp, old, adv, mask, algo, None, agg="token-mean")
    want, _ = ppo_policy_loss(logp, old, adv, mask, 0.2, 0.28, 3.0, agg="token-mean")
    assert float(got.detach()) == float(want.detach())
    with pytest.raises(ValueError, match=r"algo.loss='cispoo' is not known.*Did you mean 'cispo'"):
        get_policy_loss("cispoo")
