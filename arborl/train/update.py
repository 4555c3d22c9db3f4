"""The PPO-family update over a step-view Batch: minibatches, token-budget micro-batches,
gradient accumulation and clipping, NaN guards.

Rows are (prompt, response) pairs with the layout of `arborl.rollout.batching`: the
response of every row starts at column P, so `token_logprobs(...)[:, P-1:]` scores it.
`response_logp` gets those numbers from `arborl.models.scoring.response_logits`, which runs
the LM head on response positions only and encodes a prompt shared by several rows once.
Each micro-batch is cut to its own longest prompt and response, so short rows do not pay
for the batch's longest one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arborl import algos
from arborl.data import Batch
from arborl.models.scoring import response_logits


@dataclass
class UpdateResult:
    stats: dict[str, float]
    skipped: int
    """Optimizer steps skipped because the loss or gradients were not finite."""


def micro_batches(batch: Batch, max_tokens: int) -> list[Batch]:
    """Consecutive slices of `batch` whose trimmed size fits `max_tokens` (a single row
    longer than that gets a slice of its own).

    A slice is cut to (its longest prompt + its longest response) columns by `_trim`, so
    that width times the rows is what a forward pass costs, not the longest row alone."""
    attn = batch.tensors["attention_mask"]
    if "prompt_length" in batch.info and "response_mask" in batch.tensors:
        p_len = int(batch.info["prompt_length"])
        prompts = attn[:, :p_len].sum(-1).tolist()
        responses = batch.tensors["response_mask"].sum(-1).long().tolist()
    else:
        prompts, responses = attn.sum(-1).tolist(), [0] * len(batch)
    out, start, max_p, max_r = [], 0, 0, 0
    for i, (p, r) in enumerate(zip(prompts, responses)):
        new_p, new_r = max(max_p, p), max(max_r, r)
        if i > start and (new_p + new_r) * (i - start + 1) > max_tokens:
            out.append(batch[start:i])
            start, new_p, new_r = i, p, r
        max_p, max_r = new_p, new_r
    out.append(batch[start:])
    return out


def _trim(mb: Batch, prompt_len: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Cut the left padding of prompts and the right padding of responses of a micro-batch."""
    attn = mb.tensors["attention_mask"]
    resp_len = int(mb.tensors["response_mask"].sum(-1).max())
    first_real = int((attn[:, :prompt_len].cumsum(-1) == 0).sum(-1).min())
    ids = mb.tensors["input_ids"][:, first_real : prompt_len + resp_len]
    attn = attn[:, first_real : prompt_len + resp_len]
    return ids, attn, prompt_len - first_real, resp_len


def response_logp(model, mb: Batch, prompt_len: int, temperature: float, with_entropy: bool):
    """(B, A') logprobs of the response tokens (and entropies) of micro-batch `mb`."""
    ids, attn, p, a = _trim(mb, prompt_len)
    logits = response_logits(model, ids, attn, p, a).float()  # (B, A', V); no copy if fp32
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = ids[:, p : p + a]  # (B, A')
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    entropy = algos.entropy_from_logits(logits) if with_entropy else None
    return logp, entropy, a


def ppo_update(model, optimizer, batch: Batch, algo, temperature: float, generator, kl_coef: float):
    """`algo.ppo_epochs` passes of minibatch PPO over `batch` (which must hold `adv`,
    `old_logp`, `response_mask`, `weight`, and `ref_logp` when kl_coef > 0)."""
    prompt_len = int(batch.info["prompt_length"])
    sums: dict[str, float] = {}
    count, skipped = 0, 0
    for _ in range(algo.ppo_epochs):
        perm = torch.randperm(len(batch), generator=generator)
        for mb_rows in batch.reorder(perm).split(algo.minibatch_size):
            optimizer.zero_grad(set_to_none=True)
            num_seqs = float(len(mb_rows))
            num_tokens = float(mb_rows.tensors["response_mask"].sum())
            ok, mstats = True, {}
            for mb in micro_batches(mb_rows, algo.micro_batch_tokens):
                loss, mstats = _micro_loss(
                    model, mb, algo, prompt_len, temperature, kl_coef, num_seqs, num_tokens
                )
                if not torch.isfinite(loss):
                    ok = False
                    break
                loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), algo.grad_clip if algo.grad_clip > 0 else float("inf")
            )
            if not ok or not math.isfinite(float(grad_norm)):
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            optimizer.step()
            mstats["actor/grad_norm"] = float(grad_norm)
            for k, v in mstats.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
    stats = {k: v / max(count, 1) for k, v in sums.items()}
    stats["actor/optimizer_steps"] = float(count)
    return UpdateResult(stats, skipped)


def _micro_loss(model, mb, algo, prompt_len, temperature, kl_coef, num_seqs, num_tokens):
    logp, entropy, a = response_logp(model, mb, prompt_len, temperature, algo.entropy_coef > 0)
    mask = mb.tensors["response_mask"][:, :a]
    old = mb.tensors["old_logp"][:, :a]
    adv = mb.tensors["adv"] * mb.tensors["weight"]  # (B,) episode weighting scales rows
    # Denominators of the whole minibatch, so that summing micro-batch losses is exact.
    common = dict(
        max_len=int(mb.info.get("response_length", a)), num_seqs=num_seqs, num_tokens=num_tokens
    )
    loss, pstats = algos.ppo_policy_loss(
        logp, old, adv, mask, algo.clip_low, algo.clip_high, algo.dual_clip, agg=algo.loss_agg,
        **common,
    )  # fmt: skip
    stats = {f"actor/{k}": float(v) for k, v in pstats.items()}
    stats["actor/pg_loss"] = float(loss.detach())
    if kl_coef > 0 and not algo.kl_in_reward:
        kl = algos.kl_penalty(logp, mb.tensors["ref_logp"][:, :a], algo.kl_estimator)
        kl_loss = algos.aggregate(kl, mask, algo.loss_agg, **common)
        loss = loss + kl_coef * kl_loss
        stats["actor/kl"] = float(kl_loss.detach())
    if entropy is not None:
        ent = algos.aggregate(entropy, mask, algo.loss_agg, **common)
        loss = loss - algo.entropy_coef * ent
        stats["actor/entropy"] = float(ent.detach())
    return loss, stats


@torch.no_grad()
def score_rows(model, batch: Batch, temperature: float, max_tokens: int) -> torch.Tensor:
    """(R, A) logprobs of every row's response under `model` (e.g. the reference)."""
    prompt_len = int(batch.info["prompt_length"])
    width = batch.tensors["response_mask"].shape[1]
    out = []
    for mb in micro_batches(batch, max_tokens):
        logp, _, a = response_logp(model, mb, prompt_len, temperature, False)
        out.append(torch.nn.functional.pad(logp, (0, width - a)))
    return torch.cat(out)


def critic_values(critic, batch: Batch, max_tokens: int) -> torch.Tensor:
    """(R,) value of each row's state: the critic at the last prompt token."""
    prompt_len = int(batch.info["prompt_length"])
    out = []
    for mb in micro_batches(batch, max_tokens):
        ids, attn, p, _ = _trim(mb, prompt_len)
        out.append(critic(ids[:, :p], attn[:, :p])[:, -1])
    return torch.cat(out)


def critic_update(critic, optimizer, batch: Batch, algo, generator) -> UpdateResult:
    """Fit the critic's state values to `returns` (value clipping around `old_values`).
    The logged value loss is the row-weighted mean over each whole minibatch; a step with a
    non-finite gradient is skipped and counted in `skipped`, like the actor's."""
    sums, count, skipped = {}, 0, 0
    for _ in range(algo.ppo_epochs):
        perm = torch.randperm(len(batch), generator=generator)
        for mb_rows in batch.reorder(perm).split(algo.minibatch_size):
            optimizer.zero_grad(set_to_none=True)
            mb_loss = 0.0
            for mb in micro_batches(mb_rows, algo.micro_batch_tokens):
                values = critic_values(critic, mb, algo.micro_batch_tokens)
                loss, vstats = algos.value_loss(
                    values[:, None], mb.tensors["old_values"][:, None],
                    mb.tensors["returns"][:, None], torch.ones(len(mb), 1),
                    clip=algo.value_clip, agg="token-mean",
                )  # fmt: skip
                share = len(mb) / len(mb_rows)
                (algo.vf_coef * loss * share).backward()
                mb_loss = mb_loss + float(loss.detach()) * share
            gn = torch.nn.utils.clip_grad_norm_(critic.parameters(), algo.grad_clip or float("inf"))
            if not math.isfinite(float(gn)) or not math.isfinite(mb_loss):
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            optimizer.step()
            sums["critic/value_loss"] = sums.get("critic/value_loss", 0.0) + mb_loss
            count += 1
    return UpdateResult({k: v / max(count, 1) for k, v in sums.items()}, skipped)
