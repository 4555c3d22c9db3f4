"""Per-token log-probabilities of a sequence: the scoring function training uses.

Rollout backends report logprobs of the tokens they sampled; PPO-style losses re-score
the same tokens with `token_logprobs`. Both use the same position ids (derived from the
attention mask, so left padding is invisible to the model) and the same temperature, so
the two agree to float precision when the weights are equal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from arborl.models.loading import resolve_dtype


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) mask -> (B, T) positions counting only real tokens (pads get position 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = 256,
) -> torch.Tensor:
    """Log-probability of each next token: `out[b, t] = log p(input_ids[b, t+1] | <= t)`.

    input_ids, attention_mask: (B, T). Returns (B, T-1) in float32, differentiable.
    Logits are divided by `temperature` (pass the rollout's temperature; 0 means greedy
    and scores raw logits). Instead of a full (B, T, V) log_softmax, each position uses
    `logit[target] - logsumexp(logits)`, computed over chunks of `chunk_size` positions so
    only one chunk's float32 copy of the logits exists at a time. Positions whose target is
    padding get meaningless values; mask them with `attention_mask[:, 1:]`.
    """
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    ).logits[:, :-1]  # (B, T-1, V)
    targets = input_ids[:, 1:]  # (B, T-1)
    scale = 1.0 / temperature if temperature > 0 else 1.0
    pieces = []
    for start in range(0, targets.shape[1], chunk_size):
        chunk = logits[:, start : start + chunk_size].float() * scale  # (B, C, V)
        tgt = targets[:, start : start + chunk_size]  # (B, C)
        picked = chunk.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)  # (B, C)
        pieces.append(picked - torch.logsumexp(chunk, dim=-1))
    if not pieces:
        return logits.new_zeros(input_ids.shape[0], 0, dtype=torch.float32)
    return torch.cat(pieces, dim=1)


@contextlib.contextmanager
def autocast_ctx(dtype: str | torch.dtype = "float32", device_type: str = "cpu") -> Iterator[None]:
    """Mixed precision for a block: a no-op for float32, `torch.autocast` otherwise.

    Keep the weights in float32 and run forward passes under `autocast_ctx("bfloat16")`:
    on CPUs with AMX that is ~1.5x faster for 20M+ models while the optimizer stays fp32.
    """
    torch_dtype = resolve_dtype(dtype)
    if torch_dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=device_type, dtype=torch_dtype):
        yield
