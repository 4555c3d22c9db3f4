"""The PPO and critic updates of `arborl.train.update`, run data-parallel on one rank.

Each rank gets its chunk of every minibatch (see the `dp_minibatches` dispatch mode) plus
the minibatch's global row and token counts, and calls the local trainer's own
`_micro_loss` with those global denominators, so the per-rank losses *sum* to the
1-process loss. FSDP2 averages gradients over ranks when it reduces them, hence the
backward of `world_size * loss`: the reduced gradient is then the 1-process gradient (up
to float summation order).

The ranks' collectives must match one for one, while their rows differ (count, lengths,
whether prompts repeat, which decides one or two forwards in `response_logits`). So no
forward or backward communicates: each minibatch starts by all-gathering every parameter
group (`gathered`), gradients accumulate locally over the rank's micro-batches, and one
zero-weighted pass on a single template row with `sync_gradients` reduce-scatters them
(every rank runs exactly that one pass). The skip decision for a non-finite loss or
gradient is all-reduced, so either every rank steps the optimizer or none does.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from arborl import algos
from arborl.data import Batch
from arborl.distributed.sharding import gathered, sync_gradients
from arborl.train.update import (
    UpdateResult,
    _micro_loss,
    critic_values,
    micro_batches,
    response_logp,
    score_rows,
)

# Stats of `_micro_loss` computed with the minibatch's global denominators: they add up
# over micro-batches and ranks. MEANS are token-weighted means; ratio_max is a max.
ADDITIVE = ("actor/pg_loss", "actor/kl", "actor/entropy")
MEANS = ("actor/clipfrac", "actor/clipfrac_dual", "actor/approx_kl", "actor/ratio_mean")
UNBOUNDED = 10**9  # a token budget that keeps a micro-batch in one forward


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _all_reduce(values: list[float], op=None) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    if dist.is_initialized():
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t.cpu().tolist()


def _mbs(shard: Batch | None, max_tokens: int) -> list[Batch]:
    return micro_batches(shard, max_tokens) if shard is not None and len(shard) else []


def _norm_value(norm) -> float:
    norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    return float(norm)


def dp_ppo_update(model, optimizer, shards, template: Batch, algo, temperature, kl_coef):
    """One optimizer step per entry of `shards` (this rank's chunk of each minibatch, in
    the controller's order; None where the minibatch had no row for this rank). Returns
    the stats of `ppo_update`, each over the whole minibatch."""
    prompt_len = int(template.info["prompt_length"])
    world = _world()
    sums: dict[str, float] = {}
    count = skipped = 0
    for shard in shards:
        optimizer.zero_grad(set_to_none=True)
        info = (shard if shard is not None else template).info
        num_seqs, num_tokens = float(info.get("num_seqs", 1)), float(info.get("num_tokens", 1))
        acc = {**dict.fromkeys(ADDITIVE, 0.0), **dict.fromkeys(MEANS, 0.0)}
        tokens, ratio_max, finite = 0.0, 0.0, 1.0
        with gathered(model):
            for mb in _mbs(shard, algo.micro_batch_tokens):
                loss, st = _micro_loss(
                    model, mb, algo, prompt_len, temperature, kl_coef, num_seqs, num_tokens
                )
                finite = finite if torch.isfinite(loss) else 0.0
                (world * loss).backward()
                w = float(mb.tensors["response_mask"].sum())
                tokens += w
                for k in acc:  # sums for ADDITIVE, token-weighted sums for MEANS
                    acc[k] += st.get(k, 0.0) * (1.0 if k in ADDITIVE else w)
                ratio_max = max(ratio_max, st.get("actor/ratio_max", 0.0))
            with sync_gradients(model):  # the one reduce-scatter of this optimizer step
                logp, _, _ = response_logp(model, template[:1], prompt_len, temperature, False)
                (0.0 * logp.sum()).backward()
        clip = algo.grad_clip if algo.grad_clip > 0 else float("inf")
        grad_norm = _norm_value(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        red = _all_reduce([finite, tokens, *acc.values()])
        (red_max,) = _all_reduce([ratio_max], dist.ReduceOp.MAX)
        if red[0] < world or not math.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        totals = dict(zip(ADDITIVE, red[2 : 2 + len(ADDITIVE)]))
        mstats = {k: v for k, v in totals.items() if _had(k, kl_coef, algo)}
        for k, v in zip(MEANS, red[2 + len(ADDITIVE) :]):
            mstats[k] = v / max(red[1], 1e-12)
        mstats["actor/ratio_max"] = red_max
        mstats["actor/grad_norm"] = grad_norm
        for k, v in mstats.items():
            sums[k] = sums.get(k, 0.0) + v
        count += 1
    stats = {k: v / max(count, 1) for k, v in sums.items()}
    stats["actor/optimizer_steps"] = float(count)
    return UpdateResult(stats, skipped)


def _had(key: str, kl_coef: float, algo) -> bool:
    """Did `_micro_loss` produce this optional stat (KL term, entropy bonus)?"""
    if key == "actor/kl":
        return kl_coef > 0 and not algo.kl_in_reward
    if key == "actor/entropy":
        return algo.entropy_coef > 0
    return True


def dp_critic_update(critic, optimizer, shards, template: Batch, algo) -> UpdateResult:
    """`critic_update` over this rank's chunks: each micro-batch's loss is weighted by its
    share of the *global* minibatch, so the ranks' sum is the 1-process loss."""
    world = _world()
    sums, count, skipped = {}, 0, 0
    for shard in shards:
        optimizer.zero_grad(set_to_none=True)
        num_rows = float((shard if shard is not None else template).info.get("num_seqs", 1))
        mb_loss = 0.0
        with gathered(critic):
            for mb in _mbs(shard, algo.micro_batch_tokens):
                values = critic_values(critic, mb, algo.micro_batch_tokens)
                loss, _ = algos.value_loss(
                    values[:, None], mb.tensors["old_values"][:, None],
                    mb.tensors["returns"][:, None], torch.ones(len(mb), 1),
                    clip=algo.value_clip, agg="token-mean",
                )  # fmt: skip
                share = len(mb) / num_rows
                (world * algo.vf_coef * loss * share).backward()
                mb_loss += float(loss.detach()) * share
            with sync_gradients(critic):
                (0.0 * critic_values(critic, template[:1], UNBOUNDED).sum()).backward()
        gn = _norm_value(
            torch.nn.utils.clip_grad_norm_(critic.parameters(), algo.grad_clip or float("inf"))
        )
        (total,) = _all_reduce([mb_loss])
        if not math.isfinite(gn) or not math.isfinite(total):
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        sums["critic/value_loss"] = sums.get("critic/value_loss", 0.0) + total
        count += 1
    return UpdateResult({k: v / max(count, 1) for k, v in sums.items()}, skipped)


@torch.no_grad()
def dp_score_rows(model, shard: Batch, temperature: float, max_tokens: int) -> torch.Tensor:
    """`score_rows` of this rank's chunk (parameters gathered once, no other collective)."""
    with gathered(model):
        return score_rows(model, shard, temperature, max_tokens)


@torch.no_grad()
def dp_critic_values(critic, shard: Batch, max_tokens: int) -> torch.Tensor:
    """`critic_values` of this rank's chunk (parameters gathered once)."""
    with gathered(critic):
        return critic_values(critic, shard, max_tokens)
