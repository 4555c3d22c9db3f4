"""The categorical over K candidate actions of a prompt (GLAM / TWOSOME action scoring).

A candidate is the token sequence of one valid action's response (its text and the
end-of-turn token). Its score is the log-probability the LM gives those tokens after the
prompt, summed, then divided by a normaliser (1, its number of tokens or of words); the
policy is the softmax of the scores divided by the temperature. The rollout samples from
it and the PPO update recomputes it with gradients through the same two functions,
`candidate_token_logp` and `choice_logp`, so both agree to float rounding for equal
weights, and the ratio, entropy and KL are those of the categorical.

Token log-probabilities are taken from the raw logits (temperature 1); the temperature
acts on the categorical only, as TWOSOME does. Temperature 0 is greedy: the argmax, with
log-probabilities of the untempered scores (as `token_logprobs` treats 0).

Cost: `response_logits` encodes each distinct prompt once (packed behind its prompt, or a
KV cache indexed out to its K candidates) and runs the candidates of all prompts in one
batch on top, so K candidates cost one prompt encoding plus K short continuations.
"""

from __future__ import annotations

import torch

from arborl.models.scoring import response_logits

NORMS = ("sum", "token", "word")
"""Normalisations of a candidate's summed log-probability (`AgentConfig.score_norm`)."""


def norm_divisor(norm: str, num_tokens: int, num_words: int) -> float:
    """What a candidate's summed token log-probability is divided by under `norm`."""
    if norm == "sum":
        return 1.0
    if norm == "token":
        return float(max(num_tokens, 1))
    if norm == "word":
        return float(max(num_words, 1))
    raise ValueError(f"score norm {norm!r} is not one of {list(NORMS)}")


def candidate_token_logp(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    cand_ids: torch.Tensor,
    cand_mask: torch.Tensor,
) -> torch.Tensor:
    """(B, K, L) `log p(cand_ids[b, k, j] | prompt b, cand_ids[b, k, :j])` at temperature
    1 in float32 (float64 for a float64 model), differentiable, 0 where `cand_mask` is 0.

    prompt_ids, prompt_mask: (B, P), left-padded; cand_ids, cand_mask: (B, K, L),
    right-padded. A candidate slot with no tokens (prompts with fewer than K candidates)
    is not run at all."""
    num_rows, k, length = cand_ids.shape
    p = prompt_ids.shape[1]
    flat_ids, flat_mask = cand_ids.reshape(-1, length), cand_mask.reshape(-1, length)  # (BK, L)
    real = flat_mask.bool().any(-1).nonzero().squeeze(-1)  # (N,) candidates with tokens
    rows = torch.div(real, k, rounding_mode="floor")  # (N,) their prompt
    ids = torch.cat([prompt_ids[rows], flat_ids[real]], dim=1)  # (N, P + L)
    mask = torch.cat([prompt_mask[rows], flat_mask[real]], dim=1).long()
    width = int(flat_mask[real].sum(-1).max()) if len(real) else 0
    ids, mask = ids[:, : p + width], mask[:, : p + width]  # no all-padding columns
    logits = response_logits(model, ids, mask, p, width)  # (N, W, V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 up, fp64 kept
    targets = ids[:, p:]  # (N, W)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    logp = logp * mask[:, p:]  # (N, W), 0 on padding
    out = logp.new_zeros(num_rows * k, length)
    out = out.index_copy(0, real, torch.nn.functional.pad(logp, (0, length - width)))
    return out.view(num_rows, k, length)


def choice_logp(
    token_logp: torch.Tensor, cand_norm: torch.Tensor, valid: torch.Tensor, temperature: float
) -> torch.Tensor:
    """(B, K) log-probabilities of the categorical over candidates, -inf on invalid slots.

    token_logp: (B, K, L) from `candidate_token_logp`; cand_norm: (B, K) divisors
    (`norm_divisor`); valid: (B, K) bool, the slots that hold a candidate."""
    scores = token_logp.sum(-1) / cand_norm  # (B, K)
    if temperature > 0 and temperature != 1.0:
        scores = scores / temperature
    scores = scores.masked_fill(~valid, float("-inf"))
    return torch.log_softmax(scores, dim=-1)


def choice_entropy(logp: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B,) entropy of each categorical of `choice_logp` (invalid slots add nothing)."""
    safe = logp.masked_fill(~valid, 0.0)  # -inf * 0 would be NaN
    return -(safe.exp() * safe).masked_fill(~valid, 0.0).sum(-1)


def sample_choice(logp: torch.Tensor, uniforms: torch.Tensor, greedy: bool) -> torch.Tensor:
    """(B,) chosen slot of each categorical: the argmax when `greedy`, else by inverse CDF
    with one uniform in [0, 1) per row (`uniforms`: (B,)), as `sample_next` draws tokens, so
    a row's choice never depends on the other rows."""
    if greedy:
        return logp.argmax(-1)
    cdf = logp.double().exp().cumsum(-1)  # (B, K); invalid slots add 0
    target = (uniforms.double() * cdf[:, -1]).unsqueeze(-1)  # (B, 1)
    chosen = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return chosen.clamp(max=logp.shape[-1] - 1)
