"""Distillation losses (learn from a teacher on the student's own states) and the linear
schedules of their weight and of DAgger's mixing coefficient.

Two losses, as the teacher can be read:

- `choice_kl`: forward KL(teacher || student) over a state's K candidate actions, exact
  (the candidates are all the env's valid actions, scored as `arborl.models.candidates`
  does). A teacher that gives one action (an oracle) is a one-hot distribution, and the
  KL is then the cross-entropy `-log p_student(teacher's action)` (the teacher's entropy
  is 0). It compares actions, not tokens, so teacher and student may use different
  tokenizers (SmolLM2 can teach a tiny model). DAgger (Ross et al., 2011) trains this on
  every state the student visits; BabyAI's interactive imitation does the same with the
  bot as the teacher.
- `token_reverse_kl`: per-token reverse KL(student || teacher) over the shared
  vocabulary, exact at each response position (the on-policy distillation of the Tinker
  cookbook, NeMo-RL and prime-rl estimates it from the sampled token; with both models'
  logits at hand the sum over the vocabulary costs nothing more). It needs one tokenizer.

`linear_schedule` is the one schedule shape: `start` at step 0, moving linearly to `end`
over `steps` steps, then `end`; `steps=0` keeps `start` (constant).
"""

from __future__ import annotations

import torch


def choice_kl(student_logp: torch.Tensor, teacher_p: torch.Tensor, valid: torch.Tensor):
    """(B,) KL(teacher || student) of each row's categorical over its candidates.

    student_logp: (B, K) log-probabilities of the student's categorical (any value on
    invalid slots); teacher_p: (B, K) the teacher's probabilities (rows sum to 1 over the
    valid slots; one-hot for an action); valid: (B, K) bool, the real candidates.
    `sum_k p_k (log p_k - log q_k)`, with `0 log 0 = 0`, so a one-hot teacher gives the
    cross-entropy `-log q_a`. Differentiable in `student_logp`."""
    p = teacher_p.to(student_logp.dtype) * valid  # (B, K) no mass on padding slots
    q = torch.where(valid, student_logp, torch.zeros_like(student_logp))  # (B, K)
    return (torch.xlogy(p, p) - p * q).sum(-1)  # (B,)


def token_reverse_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """(B, T) KL(student || teacher) at each response position, 0 where `mask` is 0.

    student_logits, teacher_logits: (B, T, V) over the same vocabulary (one tokenizer);
    mask: (B, T), 1 on response tokens. `sum_v s_v (log s_v - log t_v)` with s, t the
    softmaxes; differentiable in `student_logits`, the teacher's side is detached."""
    s_logp = torch.log_softmax(student_logits.float(), -1)  # (B, T, V)
    t_logp = torch.log_softmax(teacher_logits.detach().float(), -1)
    kl = (s_logp.exp() * (s_logp - t_logp)).sum(-1)  # (B, T)
    return kl * mask.to(kl.dtype)


def linear_schedule(start: float, end: float, steps: int, step: int) -> float:
    """The value at `step` (0-based) of a schedule from `start` to `end` over `steps`
    steps (then `end`); `steps=0` is the constant `start`."""
    if steps <= 0:
        return float(start)
    frac = min(max(step, 0), steps) / steps
    return float(start + (end - start) * frac)
