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

Cost: rows equal in prompt and candidates (a GRPO group in one state) are scored once;
each distinct prompt is encoded once into a KV cache, the cache is indexed out to its K
candidates and every candidate's tokens but the last run in one batch on top (the
prompt's last logits score the first token). So K candidates cost one prompt encoding and
one forward of K short continuations, two forwards in all. Without a KV cache (activation
checkpointing) `response_logits` runs each candidate behind its prompt instead. Measured
against a generated one-word action on the same prompts: `bench/score_actions.py`.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from arborl.models.scoring import (
    cache_kwarg,
    checkpointing,
    distinct_rows,
    position_ids_from_mask,
    response_logits,
)

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
    is not run at all. Rows equal in prompt and candidates (a GRPO group's episodes in the
    same state) are scored once and indexed out (indexing is differentiable: their
    gradients sum into the one forward)."""
    num_rows, k, length = cand_ids.shape
    key_ids = torch.cat([prompt_ids, cand_ids.reshape(num_rows, -1)], dim=1)  # (B, P + KL)
    key_mask = torch.cat([prompt_mask, cand_mask.reshape(num_rows, -1)], dim=1)
    first, inverse = distinct_rows(key_ids, key_mask.to(key_ids.dtype))
    if len(first) < num_rows:
        args = (prompt_ids[first], prompt_mask[first], cand_ids[first], cand_mask[first])
        return _token_logp(model, *args)[inverse]
    return _token_logp(model, prompt_ids, prompt_mask, cand_ids, cand_mask)


def _token_logp(model, prompt_ids, prompt_mask, cand_ids, cand_mask) -> torch.Tensor:
    """`candidate_token_logp` of distinct rows: each prompt encoded once into a KV cache,
    the cache indexed out to its candidates, every candidate's tokens but the last on top
    (the prompt's last logits score each candidate's first token)."""
    num_rows, k, length = cand_ids.shape
    flat_ids, flat_mask = cand_ids.reshape(-1, length), cand_mask.reshape(-1, length)  # (BK, L)
    real = flat_mask.bool().any(-1).nonzero().squeeze(-1)  # (N,) candidates with tokens
    rows = torch.div(real, k, rounding_mode="floor")  # (N,) their prompt
    width = int(flat_mask[real].sum(-1).max()) if len(real) else 0
    ids, mask = flat_ids[real, :width], flat_mask[real, :width].long()  # (N, W)
    logits = _kv_logits(model, prompt_ids, prompt_mask.long(), rows, ids, mask)
    if logits is None:  # no usable KV cache: one pass per candidate behind its prompt
        p = prompt_ids.shape[1]
        full = torch.cat([prompt_ids[rows], ids], 1), torch.cat([prompt_mask[rows], mask], 1)
        logits = response_logits(model, full[0], full[1].long(), p, width)  # (N, W, V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 up, fp64 kept
    logp = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    logp = logp * mask  # (N, W), 0 on padding
    out = logp.new_zeros(num_rows * k, length)
    out = out.index_copy(0, real, torch.nn.functional.pad(logp, (0, length - width)))
    return out.view(num_rows, k, length)


def _kv_logits(model, prompt_ids, prompt_mask, rows, ids, mask) -> torch.Tensor | None:
    """(N, W, V) logits whose position j predicts `ids[:, j]` after prompt `rows[n]`, or
    None where the model keeps no KV cache (activation checkpointing) or did not fill it.

    prompt_ids, prompt_mask: (B, P) left-padded; rows: (N,); ids, mask: (N, W). Indexing
    the cache is differentiable, so a prompt's gradient sums over its candidates."""
    if checkpointing(model):
        return None
    p, width = prompt_ids.shape[1], ids.shape[1]
    kwarg = cache_kwarg(model)
    cache = DynamicCache(config=model.config)
    head = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=position_ids_from_mask(prompt_mask),
        use_cache=True,
        logits_to_keep=1,
        **{kwarg: cache},
    ).logits[rows]  # (N, 1, V): predicts each candidate's first token
    if width == 1:
        return head
    if cache.get_seq_length() != p:
        return None
    cache.batch_select_indices(rows)  # (B, H, P, D) -> (N, H, P, D) per layer
    start = prompt_mask.sum(-1)[rows, None]  # (N, 1) real prompt tokens
    tail = model(
        input_ids=ids[:, :-1],
        attention_mask=torch.cat([prompt_mask[rows], mask[:, :-1]], 1),  # (N, P + W - 1)
        position_ids=start + torch.arange(width - 1, device=ids.device),
        use_cache=True,
        **{kwarg: cache},
    ).logits  # (N, W - 1, V)
    return torch.cat([head, tail], dim=1)


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
