"""KL estimators, in-reward KL and controllers."""

import math

import pytest
import torch

from arborl.algos import (
    AdaptiveKLController,
    FixedKLController,
    UnknownNameError,
    kl_penalized_rewards,
    kl_penalty,
    make_kl_controller,
)

# token 0: logp -1, ref -2 -> d = ref - logp = -1; token 1: logp -2, ref -1 -> d = +1
LOGP = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-2.0, -1.0]])


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("k1", [1.0, -1.0]),  # logp - ref
        ("abs", [1.0, 1.0]),
        ("k2", [0.5, 0.5]),  # 0.5 d^2
        # exp(d) - d - 1: e^-1 + 1 - 1 = 0.367879; e - 1 - 1 = 0.718282
        ("k3", [math.exp(-1), math.e - 2]),
        ("low_var_kl", [math.exp(-1), math.e - 2]),
        ("k3+", [math.exp(-1), math.e - 2]),
    ],
)
def test_kl_estimators_by_hand(kind, expected):
    torch.testing.assert_close(kl_penalty(LOGP, REF, kind), torch.tensor([expected]))


def test_k3_is_clamped_and_k3_plus_has_the_k2_gradient():
    # d = ref - logp = 30 -> clamped to 20 -> e^20 - 21 -> clamped to 10
    assert float(kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3")) == 10.0
    logp = LOGP.clone().requires_grad_(True)
    kl_penalty(logp, REF, "k3+").sum().backward()
    # d k2 / d logp = logp - ref = (1, -1)
    torch.testing.assert_close(logp.grad, torch.tensor([[1.0, -1.0]]))


def test_unknown_kl_kind_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="'k4'.*abs.*k1.*k2.*k3"):
        kl_penalty(LOGP, REF, "k4")


def test_kl_penalized_rewards_by_hand():
    # k1 = (1, -1), token 1 masked: rewards (0, 5) - 0.1 * (1, 0) = (-0.1, 5); mean kl = 1
    rewards, seq_kl = kl_penalized_rewards(
        torch.tensor([[0.0, 5.0]]), LOGP, REF, torch.tensor([[1, 0]]), coef=0.1, kind="k1"
    )
    torch.testing.assert_close(rewards, torch.tensor([[-0.1, 5.0]]))
    torch.testing.assert_close(seq_kl, torch.tensor([1.0]))


def test_adaptive_controller_by_hand():
    ctrl = AdaptiveKLController(init_coef=0.1, target_kl=0.1, horizon=100)
    # kl 0.15: err = 0.15/0.1 - 1 = 0.5 -> clipped 0.2; coef *= 1 + 0.2 * 10/100 = 1.02
    ctrl.update(0.15, n_steps=10)
    assert ctrl.value == pytest.approx(0.102)
    # kl 0.09: err = -0.1; coef *= 1 - 0.1 * 10/100 = 0.99 -> 0.10098
    ctrl.update(0.09, n_steps=10)
    assert ctrl.value == pytest.approx(0.10098)
    restored = make_kl_controller("adaptive", 0.5, target_kl=0.1, horizon=100)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == ctrl.value
    fixed = FixedKLController(0.3)
    fixed.update(100.0, 10)
    assert fixed.value == 0.3
    with pytest.raises(ValueError, match="target_kl=0"):
        AdaptiveKLController(0.1, 0, 100)
    with pytest.raises(UnknownNameError, match="'pid'.*adaptive.*fixed"):
        make_kl_controller("pid", 0.1)
