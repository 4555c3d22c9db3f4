"""How many tokens one forward/backward of the update may hold (`algo.micro_batch_tokens`).

A micro-batch's activations, kept by autograd for the backward pass, grow with its tokens,
and how fast depends on the model: about 0.013 MiB a token for the 0.1M preset, 0.9 MiB for
SmolLM2-135M (float32, measured with `activation_bytes_per_token`). A fixed budget of
16,384 tokens is nothing for the first and ~15 GiB of saved activations (~23 GiB at peak)
for the second, which on a 24 GiB machine the kernel answers by killing the run in its first
update. So when `algo.micro_batch_tokens` is
None (the default) the budget is sized once, before training: the activation bytes a token
costs are measured on a short forward pass, and the budget is the largest power of two whose
micro-batch (twice its saved activations: the backward's transients) takes at most half the
memory free then, capped at `CAP`. Tiny models always get `CAP`, so their runs are what they
were with the old fixed default; a power of two keeps the budget the same when free memory
moves a little between runs. A value the config sets is used as given, with a warning when it
looks too big for the memory free.

    budget = resolve_micro_batch_tokens(model, cfg.algo.micro_batch_tokens)
"""

from __future__ import annotations

import contextlib
import logging

import psutil
import torch

log = logging.getLogger("arborl")

CAP = 16384
"""The largest automatic budget (the fixed default before the budget was sized)."""
FLOOR = 64
"""The smallest budget (`algo.micro_batch_tokens`' minimum); a longer row runs alone."""
SHARE_OF_FREE = 0.5
"""Fraction of the free memory one micro-batch may take (the rest: rollouts, optimizer
state, env workers, and what the probe cannot see)."""
PEAK_OVER_SAVED = 2.0
"""A micro-batch's peak memory over its saved activations. Measured on SmolLM2-135M with
LoRA on CPU: peak RSS ~1.45 MiB a token against 0.91 MiB saved (1.6x)."""
MIB = 2**20


def activation_bytes_per_token(
    model: torch.nn.Module, rows: int = 2, length: int = 128, dtype_ctx=None
) -> float:
    """Bytes autograd keeps for the backward pass per token of a forward of `model`,
    measured on `rows` x `length` random token ids (tensors saved for backward, each
    storage counted once, the model's own parameters left out). The global RNGs and the
    model's train/eval mode are left as they were."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in params and key not in seen:
            seen.add(key)
            saved += storage.nbytes()
        return t

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=gen).to(device)  # (R, L)
    was_training = model.training
    model.train()  # dropout saves its masks: measure what the update keeps
    devices = [device.index or 0] if device.type == "cuda" else []
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    try:
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            with dtype_ctx or contextlib.nullcontext(), hooks:
                try:  # the LM head on one position: the update runs it on few
                    out = model(input_ids=ids, logits_to_keep=1)
                except TypeError:  # a model without `logits_to_keep`
                    seen.clear()
                    saved = 0
                    out = model(input_ids=ids)
            del out
    finally:
        model.train(was_training)
    return saved / (rows * length)


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for new tensors on `device`: the GPU's free memory, else the host's
    available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return int(psutil.virtual_memory().available)


def budget_for(per_token: float, free: int, share: int = 1) -> int:
    """The largest power of two of tokens in [FLOOR, CAP] whose peak (`PEAK_OVER_SAVED` x
    `per_token` bytes a token) fits in `SHARE_OF_FREE` of `free` bytes split `share` ways
    (processes sizing their micro-batches from the same memory); FLOOR when none fits."""
    fits = SHARE_OF_FREE * free / max(share, 1) / max(PEAK_OVER_SAVED * per_token, 1.0)
    budget = CAP
    while budget > FLOOR and budget > fits:
        budget //= 2
    return budget


def resolve_micro_batch_tokens(
    model: torch.nn.Module,
    requested: int | None,
    share: int = 1,
    dtype_ctx=None,
    device: torch.device | None = None,
) -> int:
    """`requested` (algo.micro_batch_tokens) when set, else the budget sized from `model`'s
    measured activation memory and the memory free now on `device` (default: the model's)
    split `share` ways (`budget_for`); logs which and why."""
    per_token = activation_bytes_per_token(model, dtype_ctx=dtype_ctx)
    free = free_memory_bytes(device or next(model.parameters()).device)
    auto = budget_for(per_token, free, share)
    facts = (
        f"activations ~{per_token / MIB:.3f} MiB a token (measured), "
        f"{free / 2**30:.1f} GiB free" + (f" for {share} processes" if share > 1 else "")
    )
    if requested is None:
        log.info("update micro-batches: up to %d tokens (%s; algo.micro_batch_tokens sets it)",
                 auto, facts)  # fmt: skip
        return auto
    if PEAK_OVER_SAVED * per_token * requested > free / max(share, 1):
        log.warning(
            "algo.micro_batch_tokens=%d may not fit in memory (%s: a full micro-batch would "
            "peak near %.1f GiB); if the run is killed, set algo.micro_batch_tokens=%d or "
            "leave it unset to size it automatically",
            requested, facts, PEAK_OVER_SAVED * per_token * requested / 2**30, auto,
        )  # fmt: skip
    return requested
