"""Distillation losses and schedules: numbers worked by hand."""

import math

import torch

from arborl.algos import choice_kl, linear_schedule, token_reverse_kl


def test_choice_kl_to_a_distribution_and_to_an_action_by_hand():
    q = torch.log(torch.tensor([[0.25, 0.25, 0.5], [0.25, 0.25, 0.5]]))  # the student
    p = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]])  # a distribution; an action
    valid = torch.ones(2, 3, dtype=torch.bool)
    # row 0: 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.25) + 0 = ln 2 = 0.693147
    # row 1 (one-hot): 1 ln(1/0.25) = -ln 0.25 = 1.386294, the cross-entropy
    torch.testing.assert_close(choice_kl(q, p, valid), torch.tensor([math.log(2), math.log(4)]))


def test_choice_kl_ignores_padding_slots_and_its_gradient_is_minus_the_teacher():
    # two real candidates and a padding slot whose student log-prob is -inf
    q = torch.tensor([[math.log(0.25), math.log(0.75), float("-inf")]], requires_grad=True)
    p = torch.tensor([[1.0, 0.0, 0.0]])
    valid = torch.tensor([[True, True, False]])
    kl = choice_kl(q, p, valid)
    torch.testing.assert_close(kl, torch.tensor([math.log(4)]))  # -ln 0.25
    kl.sum().backward()
    # d/dq_k of sum_k p_k (ln p_k - q_k) = -p_k; nothing flows to the padding slot
    torch.testing.assert_close(q.grad, torch.tensor([[-1.0, 0.0, 0.0]]))


def test_token_reverse_kl_by_hand():
    # student logits (0, 0): s = (0.5, 0.5); teacher (ln 3, 0): t = (0.75, 0.25)
    # KL(s || t) = 0.5 ln(0.5/0.75) + 0.5 ln(0.5/0.25) = 0.5(-0.405465) + 0.5(0.693147)
    #            = 0.143841; the second position is masked out
    s = torch.zeros(1, 2, 2)
    t = torch.tensor([[[math.log(3), 0.0], [5.0, 0.0]]])
    kl = token_reverse_kl(s, t, torch.tensor([[1, 0]]))
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    torch.testing.assert_close(kl, torch.tensor([[expected, 0.0]]))
    assert abs(expected - 0.143841) < 1e-6


def test_linear_schedule_moves_then_holds_and_zero_steps_is_constant():
    assert linear_schedule(1.0, 0.0, 10, 0) == 1.0
    assert linear_schedule(1.0, 0.0, 10, 5) == 0.5
    assert linear_schedule(1.0, 0.0, 10, 10) == 0.0
    assert linear_schedule(1.0, 0.0, 10, 25) == 0.0  # held at the end
    assert linear_schedule(0.3, 0.9, 0, 7) == 0.3  # steps=0: constant start
    assert linear_schedule(0.0, 1.0, 4, 1) == 0.25
