"""Per-token log-probabilities of a sequence: the scoring function training uses.

Rollout backends report logprobs of the tokens they sampled; PPO-style losses re-score
the same tokens with `token_logprobs`. Both use the same position ids (derived from the
attention mask, so left padding is invisible to the model) and the same temperature, so
the two agree to float precision when the weights are equal.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
from transformers import DynamicCache

from arborl.models.loading import resolve_dtype


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) mask -> (B, T) positions counting only real tokens (pads get position 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument of `model.forward`.

    transformers 5.x renamed `past_key_values` to `cache` (the old name warns until 5.40);
    peft wrappers take `**kwargs`, so their base model's signature decides.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def distinct_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids and mask -> (U,) first row of each distinct (ids, mask) row and (B,) the
    index of each row's copy among those U, so that `ids[first][inverse]` equals `ids`."""
    key = torch.cat([ids, mask.to(ids.dtype)], dim=1)  # (B, 2T)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    num_rows = len(key)
    first = torch.full((int(inverse.max()) + 1,), num_rows, dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(num_rows), reduce="amin")
    return first, inverse


def checkpointing(model: torch.nn.Module) -> bool:
    """Activation checkpointing on? (transformers turns the KV cache off under it.)"""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new, old name
        if hasattr(type(base), name):  # looked up on the class: the old name warns when read
            return bool(getattr(base, name))
    return False


def response_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    response_len: int,
    share_prompts: bool = True,
) -> torch.Tensor:
    """(B, A, V) logits whose position j predicts `input_ids[:, P + j]`, differentiable.

    input_ids, attention_mask: (B, P + A), prompts left-padded in columns [0, P), responses
    from column P. Only what those logits need is computed: the last token is not fed (it
    predicts nothing) and the LM head runs on the A positions only (`logits_to_keep`).
    When at least a quarter of the rows repeat another row's prompt (GRPO groups), each
    distinct prompt is encoded once, its KV cache is indexed out to the rows that share it
    (indexing is differentiable, so gradients from all rows sum into the prompt) and the
    responses run on top of it: the same numbers as one pass over every row, to float
    rounding, for fewer prompt tokens. Where the model takes a ready-made 4D mask and the
    rows' prompts outweigh their responses (short actions after long observations), the
    rows are packed behind their prompts instead (`packed_response_logits`), which copies
    no per-row keys and values.
    """
    p, a = prompt_len, response_len
    if a == 0:
        return model(
            input_ids=input_ids[:, :p],
            attention_mask=attention_mask[:, :p],
            position_ids=position_ids_from_mask(attention_mask[:, :p]),
            use_cache=False,
            logits_to_keep=1,
        ).logits[:, :0]
    ids, mask = input_ids[:, : p + a - 1], attention_mask[:, : p + a - 1]  # (B, P+A-1)
    positions = position_ids_from_mask(mask)
    # Packing pays where rows' prompts outweigh their responses (the KV path copies every
    # row's prompt keys and values); with long responses the KV path is faster (measured:
    # 32 rows of 12 prompt + 32 response tokens, 0.13 s against 0.15 s for the update).
    if share_prompts and takes_4d_mask(model) and mask[:, :p].sum() >= 2 * mask[:, p:].sum():
        first, inverse = distinct_rows(ids[:, :p], mask[:, :p])
        if 4 * (len(ids) - len(first)) >= len(ids):
            out = packed_response_logits(model, ids, mask, p, a, first, inverse)
            if out is not None:
                return out
    if share_prompts and a > 1 and not checkpointing(model):
        first, inverse = distinct_rows(ids[:, :p], mask[:, :p])
        if 4 * (len(ids) - len(first)) >= len(ids):
            kwarg = cache_kwarg(model)
            cache = DynamicCache(config=model.config)
            head = model(
                input_ids=ids[first, :p],
                attention_mask=mask[first, :p],
                position_ids=positions[first, :p],
                use_cache=True,
                logits_to_keep=1,
                **{kwarg: cache},
            ).logits  # (U, 1, V)
            if cache.get_seq_length() == p:  # else the model did not fill the cache
                cache.batch_select_indices(inverse)  # (U, H, P, D) -> (B, H, P, D) per layer
                tail = model(
                    input_ids=ids[:, p:],
                    attention_mask=mask,
                    position_ids=positions[:, p:],
                    use_cache=True,
                    **{kwarg: cache},
                ).logits  # (B, A-1, V)
                return torch.cat([head[inverse], tail], dim=1)
    return model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
        logits_to_keep=a,
    ).logits  # fmt: skip


def takes_4d_mask(model: torch.nn.Module) -> bool:
    """Does `model` run sdpa attention with full attention in every layer, so that a
    ready-made (B, 1, T, T) boolean mask is used as given?"""
    cfg = model.config
    types = getattr(cfg, "layer_types", None)
    full_only = all(t == "full_attention" for t in types) if types else True
    full_only = full_only and not (types is None and getattr(cfg, "sliding_window", None))
    return getattr(cfg, "_attn_implementation", None) == "sdpa" and full_only


MAX_PACKED_TOKENS = 512
"""Widest packed sequence of `packed_response_logits` (its mask is T x T)."""
MAX_PACKED_LOGITS = 2**26
"""Most logits (sequences x width x vocab) a packed forward may hold; beyond,
`response_logits` indexes a KV cache out to the rows instead."""


def _pack(prompt_lens: list[int], fed: list[int], rows_of: list[list[int]], width: int):
    """Pieces of at most `width` tokens, each a prompt and the fed tokens of some of its
    rows (a prompt whose rows do not fit one piece is repeated in the next), placed
    next-fit into sequences of `width`: [[(prompt, start, [(row, start), ...]), ...], ...]
    (starts are columns of the sequence)."""
    pieces: list[tuple[int, int, list[tuple[int, int]]]] = []  # (prompt, length, rows)
    for u, rows in enumerate(rows_of):
        length = width + 1
        for r in rows:
            if length + fed[r] > width:
                pieces.append((u, prompt_lens[u], []))
                length = prompt_lens[u]
            pieces[-1][2].append((r, length))
            length += fed[r]
            pieces[-1] = (u, length, pieces[-1][2])
    seqs: list[list] = []
    used = width + 1
    for u, length, rows in pieces:
        if used + length > width:
            seqs.append([])
            used = 0
        seqs[-1].append((u, used, [(r, used + c) for r, c in rows]))
        used += length
    return seqs


def packed_response_logits(model, ids, mask, p, a, first, inverse) -> torch.Tensor | None:
    """`response_logits` with every distinct prompt encoded once, in one forward, or None
    when the packed logits would exceed MAX_PACKED_LOGITS.

    Each distinct prompt (its real tokens only) is followed by the fed response tokens (all
    but the last) of the rows that share it, and such pieces are packed side by side into
    sequences; a block mask lets each response see its prompt and its own earlier tokens
    only, at the positions it has in its own row, so the numbers are those of one pass per
    row, to float rounding. Unlike indexing a KV cache out to every row, no per-row copy of
    the prompt's keys and values is made (on models this small that copy, not the matmuls,
    is what costs). ids, mask: (B, P + A - 1); first (U,), inverse (B,) from
    `distinct_rows` of the prompt columns."""
    prompt_lens = mask[first, :p].sum(-1).tolist()  # (U,) real prompt tokens
    fed = mask[:, p:].sum(-1).tolist()  # (B,) response tokens fed per row (a - 1 at most)
    rows_of: list[list[int]] = [[] for _ in prompt_lens]
    for r, u in enumerate(inverse.tolist()):
        rows_of[u].append(r)
    base = max(prompt_lens) + max(fed)
    widths = sorted({max(base, min(int(base * m), MAX_PACKED_TOKENS)) for m in (1, 1.5, 2, 3)})
    width, seqs = min(
        ((w, _pack(prompt_lens, fed, rows_of, w)) for w in widths),
        key=lambda ws: len(ws[1]) * ws[0],
    )
    if len(seqs) * width * model.config.vocab_size > MAX_PACKED_LOGITS:
        return None
    num = len(seqs)
    packed = torch.zeros((num, width), dtype=ids.dtype)
    pos = torch.zeros((num, width), dtype=torch.long)
    piece = torch.full((num, width), -1, dtype=torch.long)  # -1 padding, else piece id
    owner = torch.full((num, width), -1, dtype=torch.long)  # -1 prompt, else its row
    src_row, src_col, dst_seq, dst_col = [], [], [], []  # fed tokens: (row, col) -> (seq, col)
    logit_at = torch.zeros((len(ids), a, 2), dtype=torch.long)  # (seq, col) of each logit
    k = 0
    for s, seq in enumerate(seqs):
        for u, start, members in seq:
            n = prompt_lens[u]
            packed[s, start : start + n] = ids[int(first[u]), p - n : p]
            pos[s, start : start + n] = torch.arange(n)
            end = members[-1][1] + fed[members[-1][0]]
            piece[s, start:end] = k
            k += 1
            for r, col in members:
                f = fed[r]
                src_row += [r] * f
                src_col += range(p, p + f)
                dst_seq += [s] * f
                dst_col += range(col, col + f)
                owner[s, col : col + f] = r
                pos[s, col : col + f] = torch.arange(n, n + f)
                logit_at[r, :, 0] = s
                logit_at[r, 0, 1] = start + n - 1
                logit_at[r, 1 : 1 + f, 1] = torch.arange(col, col + f)
    if src_row:
        packed[dst_seq, dst_col] = ids[src_row, src_col]
    col = torch.arange(width)
    causal = col[:, None] >= col[None, :]  # (T, T) query >= key
    qp, kp = piece[:, :, None], piece[:, None, :]  # (S, T, 1), (S, 1, T)
    qo, ko = owner[:, :, None], owner[:, None, :]
    attn = causal & (qp == kp) & (kp >= 0) & ((ko == -1) | (ko == qo))  # (S, T, T)
    attn |= torch.eye(width, dtype=torch.bool)  # a padding query sees itself: no NaN
    logits = model(
        input_ids=packed, attention_mask=attn[:, None], position_ids=pos, use_cache=False
    ).logits  # (S, T, V)
    return logits[logit_at[..., 0], logit_at[..., 1]]  # (B, A, V)


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
