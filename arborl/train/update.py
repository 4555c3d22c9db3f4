"""The PPO-family update over a step-view Batch: minibatches, token-budget micro-batches,
gradient accumulation and clipping, NaN guards — written once for 1 process or N ranks.
The policy loss is `algo.loss`'s record (`arborl.algos.policy_loss`): this module calls
its function and knows no loss by name.

The actor and critic loops (`actor_update`, `critic_fit`) take a list of minibatches (this
rank's rows of each; `info["num_seqs"]`/`info["num_tokens"]` hold the counts of the whole
minibatch) and a communication object `comm` (`Comm`). `LOCAL` is the 1-process one: every
call is a no-op and `world_size` is 1. On Ray train ranks `arborl.distributed.comm.FSDPComm`
gathers FSDP2 parameters for a minibatch, reduce-scatters gradients once per optimizer step
and all-reduces the stats and the skip decision, so N ranks take the 1-process step (up to
float summation order; `tests/distributed/test_fsdp_equivalence.py`).

`minibatch_schedule` is the one minibatch order: per epoch one permutation drawn from the
trainer's generator, split into `algo.minibatch_size` rows. In one process the update is
that schedule and a loop with `LOCAL`:
`actor_update(model, opt, mbs := minibatch_schedule(batch, algo, gen), mbs[0][:1], ...)`.

Rows are (prompt, response) pairs with the layout of `arborl.rollout.batching`: the
response of every row starts at column P, so `token_logprobs(...)[:, P-1:]` scores it.
`response_logp` gets those numbers from `arborl.models.scoring.response_logits`, which runs
the LM head on response positions only and encodes a prompt shared by several rows once.
Each micro-batch is cut to its own longest prompt and response, so short rows do not pay
for the batch's longest one.

Rows of scored choices (`agent.action_mode=score`, the `CHOICE_KEYS` of
`arborl.rollout.batching`, declared by the batch: `holds_choices`) go through the same loss code: `response_logp` gives each such
row one "token", the chosen candidate's log-probability under the categorical recomputed
from its candidates, and the entropy of that categorical, so the ratio, clipping, KL
(`score_rows` for the reference) and entropy are the categorical's. Generated rows never
reach that branch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from arborl import algos
from arborl.data import Batch
from arborl.models.candidates import candidate_token_logp, choice_entropy, choice_logp
from arborl.models.scoring import distinct_rows, response_logits
from arborl.rollout.batching import holds_choices
from arborl.train import memory
from arborl.train.distill import distill_term


@dataclass
class UpdateResult:
    stats: dict[str, float]
    skipped: int
    """Optimizer steps skipped because the loss or gradients were not finite."""


def micro_batches(
    batch: Batch, max_tokens: int, prompt_groups: list[int] | None = None
) -> list[Batch]:
    """Consecutive slices of `batch` whose trimmed size fits `max_tokens` (a single row
    longer than that gets a slice of its own).

    A slice is cut to (its longest prompt + its longest response) columns by `_trim`, so
    that width times the rows is what a forward pass costs, not the longest row alone.
    `prompt_groups` (one id per row, equal ids adjacent: `group_prompts`) says which rows
    share a prompt; a slice in which `response_logits` encodes each distinct prompt once
    (at least a quarter of its rows repeat one) then costs distinct prompts x prompt width
    + rows x response width."""
    attn = batch.tensors["attention_mask"]
    if "prompt_length" in batch.info and "response_mask" in batch.tensors:
        p_len = int(batch.info["prompt_length"])
        prompts = attn[:, :p_len].sum(-1).tolist()
        responses = batch.tensors["response_mask"].sum(-1).long().tolist()
        if holds_choices(batch):  # scored choices: every candidate's tokens run
            responses = batch.tensors["cand_mask"].sum((1, 2)).long().tolist()
    else:
        prompts, responses = attn.sum(-1).tolist(), [0] * len(batch)
    out, start, max_p, max_r, distinct = [], 0, 0, 0, 0
    for i, (p, r) in enumerate(zip(prompts, responses)):
        new_p, new_r = max(max_p, p), max(max_r, r)
        new_d = distinct + (
            prompt_groups is None or i == start or prompt_groups[i] != prompt_groups[i - 1]
        )
        if i > start and _cost(new_p, new_r, i - start + 1, new_d) > max_tokens:
            out.append(batch[start:i])
            start, new_p, new_r, new_d = i, p, r, 1
        max_p, max_r, distinct = new_p, new_r, new_d
    out.append(batch[start:])
    return out


def _cost(prompt_width: int, response_width: int, rows: int, distinct: int) -> int:
    """Tokens a micro-batch's forward runs (`response_logits` shares prompts when at least a
    quarter of the rows repeat one, and needs more than one response column for it)."""
    shared = 4 * (rows - distinct) >= rows and response_width > 1
    return prompt_width * (distinct if shared else rows) + response_width * rows


def group_prompts(batch: Batch) -> tuple[Batch, list[int]]:
    """`batch` with rows of the same prompt made adjacent (prompts shortest first, ties in
    first occurrence order; rows stable within a prompt), and each row's prompt id, for
    `micro_batches`: a GRPO step repeats few distinct prompts (the demo: ~110 among ~1,500
    rows), and `response_logits` encodes each once per micro-batch, which is cut to its
    longest prompt (shortest first: a 35-token BabyAI view is not padded to a 130-token
    one). The rows of one optimizer step are summed, so their order changes the gradient
    by float rounding only."""
    p_len = int(batch.info["prompt_length"])
    ids, attn = batch.tensors["input_ids"][:, :p_len], batch.tensors["attention_mask"][:, :p_len]
    first, inverse = distinct_rows(ids, attn)  # (U,), (B,)
    length = attn[first].sum(-1).long()  # (U,) each distinct prompt's real tokens
    key = length * (len(batch) + 1) + first  # shortest first, then first occurrence
    rank = torch.empty_like(first)
    rank[torch.argsort(key)] = torch.arange(len(first))  # prompt ids in that order
    group = rank[inverse]  # (B,)
    order = torch.argsort(group, stable=True)
    return batch.reorder(order), group[order].tolist()


def _trim(mb: Batch, prompt_len: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Cut the left padding of prompts and the right padding of responses of a micro-batch."""
    attn = mb.tensors["attention_mask"]
    resp_len = int(mb.tensors["response_mask"].sum(-1).max())
    first_real = int((attn[:, :prompt_len].cumsum(-1) == 0).sum(-1).min())
    ids = mb.tensors["input_ids"][:, first_real : prompt_len + resp_len]
    attn = attn[:, first_real : prompt_len + resp_len]
    return ids, attn, prompt_len - first_real, resp_len


def response_logp(
    model, mb: Batch, prompt_len: int, temperature: float, with_entropy: bool,
    entropy_grad: bool = True, choices: dict | None = None,
):  # fmt: skip
    """(B, A') logprobs of the response tokens (and entropies) of micro-batch `mb`.

    `entropy_grad=False` computes the entropies outside the autograd graph (a diagnostic
    only: one softmax over the response logits, no extra memory kept for backward).
    Rows of scored choices: `choice_response_logp` (which fills `choices`, if given)."""
    if holds_choices(mb):
        return choice_response_logp(
            model, mb, prompt_len, temperature, with_entropy, entropy_grad, choices
        )
    ids, attn, p, a = _trim(mb, prompt_len)
    logits = response_logits(model, ids, attn, p, a).float()  # (B, A', V); no copy if fp32
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = ids[:, p : p + a]  # (B, A')
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = algos.entropy_from_logits(logits if entropy_grad else logits.detach())
    return logp, entropy, a


def choice_response_logp(
    model, mb: Batch, prompt_len: int, temperature: float, with_entropy: bool,
    entropy_grad: bool = True, choices: dict | None = None,
):  # fmt: skip
    """`response_logp` of rows of scored choices: (B, 1) log-probability of each row's
    chosen candidate under its categorical at `temperature`, (B, 1) the categorical's
    entropy (or None), and A' = 1. The candidates are scored with
    `arborl.models.candidates.candidate_token_logp`, the rollout's own function.
    `choices`, if given, receives the whole categorical: `logp` (B, K) and `valid`
    (B, K) (the teacher's term reads it: `arborl.train.distill.distill_term`)."""
    ids, attn, p, _ = _trim(mb, prompt_len)
    cand_mask = mb.tensors["cand_mask"]
    length = int(cand_mask.sum(-1).max())  # (B, K, L) -> longest candidate of mb
    cand_ids, cand_mask = mb.tensors["cand_ids"][..., :length], cand_mask[..., :length]
    token_logp = candidate_token_logp(model, ids[:, :p], attn[:, :p], cand_ids, cand_mask)
    valid = cand_mask.bool().any(-1)  # (B, K)
    logp_all = choice_logp(token_logp, mb.tensors["cand_norm"], valid, temperature)  # (B, K)
    logp = logp_all.gather(-1, mb.tensors["chosen"][:, None])  # (B, 1)
    if choices is not None:
        choices.update(logp=logp_all, valid=valid)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            src = logp_all if entropy_grad else logp_all.detach()
            entropy = choice_entropy(src, valid)[:, None]  # (B, 1)
    return logp, entropy, 1


class Comm(Protocol):
    """What the update loops need from the ranks they run on (see the module docstring)."""

    world_size: int

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        """`values` summed ("sum") or maxed ("max") over ranks."""
        ...

    def gathered(self, model) -> contextlib.AbstractContextManager:
        """A block in which `model`'s full parameters are present and no forward or
        backward communicates."""
        ...

    def sync_gradients(self, model, zero_pass: Callable[[], None]) -> None:
        """Reduce the gradients accumulated on every rank (one collective pass)."""
        ...

    def norm_value(self, norm) -> float:
        """A gradient norm from `clip_grad_norm_` as a float of the whole model."""
        ...


class LocalComm:
    """The 1-process `Comm`: nothing to gather, reduce or synchronise."""

    world_size = 1

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        return list(values)

    def gathered(self, model) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def sync_gradients(self, model, zero_pass: Callable[[], None]) -> None:
        return None

    def norm_value(self, norm) -> float:
        return float(norm)


LOCAL = LocalComm()

# Stats of `_micro_loss` computed with the minibatch's global denominators: they add up
# over micro-batches and ranks. MEANS are token-weighted means; ratio_max is a max.
ADDITIVE = ("actor/pg_loss", "actor/kl", "actor/entropy", "actor/distill")
MEANS = (
    "actor/clipfrac",
    "actor/clipfrac_dual",
    "actor/approx_kl",
    "actor/approx_kl_k3",
    "actor/ratio_mean",
)
UNBOUNDED = 10**9  # a token budget that keeps a micro-batch in one forward


def minibatch_schedule(batch: Batch, algo, generator: torch.Generator) -> list[Batch]:
    """The minibatches of `algo.ppo_epochs` passes: per epoch one permutation of the rows
    (from `generator`), split into `algo.minibatch_size` rows, each with its own counts."""
    out = []
    for _ in range(algo.ppo_epochs):
        perm = torch.randperm(len(batch), generator=generator)
        for mb in batch.reorder(perm).split(algo.minibatch_size):
            mb.info.update(minibatch_counts(mb))
            out.append(mb)
    return out


def minibatch_counts(mb: Batch) -> dict[str, float]:
    """`num_seqs` and `num_tokens` (response tokens) of a whole minibatch."""
    if "response_mask" not in mb.tensors:
        return {"num_seqs": float(len(mb)), "num_tokens": 0.0}
    mask = mb.tensors["response_mask"]
    # Rows a teacher labelled for its term only carry no response tokens (`teacher_w`
    # rows, `arborl.train.distill`): the policy-gradient denominators leave them out.
    labelled = "teacher_w" in mb.tensors
    seqs = max(float((mask.sum(-1) > 0).sum()), 1.0) if labelled else float(len(mb))
    out = {
        "num_seqs": seqs,
        "num_tokens": max(float(mask.sum()), 1.0) if labelled else float(mask.sum()),
    }
    if labelled:  # rows a teacher labelled (`arborl.train.distill`)
        out["num_labels"] = float((mb.tensors["teacher_w"] > 0).sum())
    return out


def _grouped_micro_batches(shard: Batch | None, max_tokens: int | None) -> list[Batch]:
    """A shard's micro-batches, rows of one prompt together (`group_prompts`), so each
    distinct prompt is encoded about once per optimizer step (policy loss and critic fit).
    `max_tokens` None (an `algo.micro_batch_tokens` the engine did not size): `memory.CAP`."""
    if shard is None or not len(shard):
        return []
    grouped, groups = group_prompts(shard)
    return micro_batches(grouped, max_tokens or memory.CAP, groups)


def actor_update(
    model,
    optimizer,
    minibatches: Sequence[Batch | None],
    template: Batch,
    algo,
    temperature: float,
    kl_coef: float,
    comm: Comm = LOCAL,
) -> UpdateResult:
    """One optimizer step per entry of `minibatches` (this rank's rows of each minibatch,
    None where it has none; `template` is one row of the batch, for the row-less ranks'
    counts and the gradient-sync pass). Stats are over each whole minibatch, averaged over
    the optimizer steps taken."""
    prompt_len = int(template.info["prompt_length"])
    world = comm.world_size
    sums: dict[str, float] = {}
    count = skipped = 0
    for shard in minibatches:
        optimizer.zero_grad(set_to_none=True)
        info = (shard if shard is not None else template).info
        num_seqs, num_tokens = float(info.get("num_seqs", 1)), float(info.get("num_tokens", 1))
        acc = {**dict.fromkeys(ADDITIVE, 0.0), **dict.fromkeys(MEANS, 0.0)}
        tokens, ratio_max, finite = 0.0, 0.0, 1.0
        with comm.gathered(model):
            for mb in _grouped_micro_batches(shard, algo.micro_batch_tokens):
                loss, st = _micro_loss(
                    model,
                    mb,
                    algo,
                    prompt_len,
                    temperature,
                    kl_coef,
                    num_seqs,
                    num_tokens,
                    float(info.get("num_labels", 0.0)),
                )
                if not torch.isfinite(loss):
                    finite = 0.0
                    break  # the step is skipped: no need to score the rest
                # A sharded backward averages gradients over ranks; scale so it sums.
                (loss if world == 1 else world * loss).backward()
                w = float(mb.tensors["response_mask"].sum())
                tokens += w
                for k in acc:  # sums for ADDITIVE, token-weighted sums for MEANS
                    acc[k] += st.get(k, 0.0) * (1.0 if k in ADDITIVE else w)
                ratio_max = max(ratio_max, st.get("actor/ratio_max", 0.0))

            def zero_pass():
                logp, _, _ = response_logp(model, template[:1], prompt_len, temperature, False)
                (0.0 * logp.sum()).backward()

            comm.sync_gradients(model, zero_pass)
        clip = algo.grad_clip if algo.grad_clip > 0 else float("inf")
        grad_norm = comm.norm_value(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        red = comm.all_reduce([finite, tokens, *acc.values()])
        (red_max,) = comm.all_reduce([ratio_max], "max")
        if red[0] < world or not math.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        totals = dict(zip(ADDITIVE, red[2 : 2 + len(ADDITIVE)]))
        mstats = {k: v for k, v in totals.items() if _had(k, kl_coef, algo, info)}
        for k, v in zip(MEANS, red[2 + len(ADDITIVE) :]):
            mstats[k] = v / max(red[1], 1e-12)
        mstats["actor/ratio_max"] = red_max
        mstats["actor/grad_norm"] = grad_norm  # the total norm before clipping
        mstats["actor/tokens"] = red[1]
        for k, v in mstats.items():
            sums[k] = sums.get(k, 0.0) + v
        count += 1
    stats = {k: v / max(count, 1) for k, v in sums.items()}
    if "actor/tokens" in sums:  # response tokens of all optimizer steps (epochs included)
        stats["actor/tokens"] = sums["actor/tokens"]
    stats["actor/optimizer_steps"] = float(count)
    return UpdateResult(stats, skipped)


def _had(key: str, kl_coef: float, algo, info: dict) -> bool:
    """Did `_micro_loss` produce this optional stat (the KL or the teacher's term)?
    Entropy always is."""
    if key == "actor/kl":
        return kl_coef > 0 and not algo.kl_in_reward
    if key == "actor/distill":
        return "num_labels" in info
    return True


def _micro_loss(
    model, mb, algo, prompt_len, temperature, kl_coef, num_seqs, num_tokens, num_labels=0.0
):
    # Entropy is always measured (a diagnostic); it joins the loss, and the graph, only
    # with an entropy bonus.
    bonus = algo.entropy_coef > 0
    choices: dict = {}
    logp, entropy, a = response_logp(model, mb, prompt_len, temperature, True, bonus, choices)
    mask = mb.tensors["response_mask"][:, :a]
    old = mb.tensors["old_logp"][:, :a]
    adv = mb.tensors["adv"] * mb.tensors["weight"]  # (B,) episode weighting scales rows
    if "is_weight" in mb.tensors:  # a rollout correction's pi_old / pi_rollout, detached
        # (B, A): a policy loss is positively homogeneous in its advantage (max(-A r,
        # -A clip(r)), CISPO's -A w), so weighing A weighs each token's loss
        adv = adv[:, None] * mb.tensors["is_weight"][:, :a]
    # Denominators of the whole minibatch, so that summing micro-batch losses is exact.
    common = dict(
        max_len=int(mb.info.get("response_length", a)), num_seqs=num_seqs, num_tokens=num_tokens
    )
    policy_loss, options = algo.policy_loss()  # `algo.loss`'s record (ppo_clip, cispo, ...)
    loss, pstats = policy_loss.fn(logp, old, adv, mask, algo, options, agg=algo.loss_agg, **common)
    stats = {f"actor/{k}": float(v) for k, v in pstats.items()}
    stats["actor/pg_loss"] = float(loss.detach())
    if kl_coef > 0 and not algo.kl_in_reward:
        kl = algos.kl_penalty(logp, mb.tensors["ref_logp"][:, :a], algo.kl_estimator)
        kl_loss = algos.aggregate(kl, mask, algo.loss_agg, **common)
        loss = loss + kl_coef * kl_loss
        stats["actor/kl"] = float(kl_loss.detach())
    ent = algos.aggregate(entropy, mask, algo.loss_agg, **common)
    if bonus:
        loss = loss - algo.entropy_coef * ent
    stats["actor/entropy"] = float(ent.detach())
    if "teacher_w" in mb.tensors:  # learn from a teacher: its term beside the PG loss
        term = distill_term(choices["logp"], choices["valid"], mb, num_labels)
        loss = loss + term
        stats["actor/distill"] = float(term.detach())
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
    """(R,) value of each row's state: the critic at the last prompt token.

    Rows with the same prompt (a group's episodes in the same state, a state visited again:
    the demo's ~1,500 rows hold ~110 distinct prompts) are one state: each distinct prompt
    runs once and its value is indexed out to its rows. Indexing is differentiable, so in
    the critic fit the gradients of a state's rows sum into its one forward: the same
    numbers as a forward per row, to float rounding."""
    prompt_len = int(batch.info["prompt_length"])
    ids = batch.tensors["input_ids"][:, :prompt_len]
    first, inverse = distinct_rows(ids, batch.tensors["attention_mask"][:, :prompt_len])
    states = batch[first] if len(first) < len(batch) else batch
    out = []
    for mb in micro_batches(states, max_tokens):
        ids, attn, p, _ = _trim(mb, prompt_len)
        out.append(critic(ids[:, :p], attn[:, :p])[:, -1])
    values = torch.cat(out)
    return values if states is batch else values[inverse]


def critic_fit(
    critic, optimizer, minibatches: Sequence[Batch | None], template: Batch, algo,
    comm: Comm = LOCAL,
) -> UpdateResult:  # fmt: skip
    """One optimizer step per minibatch: the critic's state values regressed on `returns`
    (value clipping around `old_values`). Each micro-batch's loss is weighted by its share
    of the whole minibatch, so the logged value loss is the minibatch's row-weighted mean
    and the ranks' losses sum to the 1-process loss; a step with a non-finite gradient or
    loss is skipped and counted in `skipped`, like the actor's."""
    world = comm.world_size
    sums, count, skipped = {}, 0, 0
    for shard in minibatches:
        optimizer.zero_grad(set_to_none=True)
        num_rows = float((shard if shard is not None else template).info.get("num_seqs", 1))
        mb_loss = 0.0
        with comm.gathered(critic):
            # Rows of one state together, so that each micro-batch scores it once.
            for mb in _grouped_micro_batches(shard, algo.micro_batch_tokens):
                values = critic_values(critic, mb, algo.micro_batch_tokens or memory.CAP)
                loss, _ = algos.value_loss(
                    values[:, None], mb.tensors["old_values"][:, None],
                    mb.tensors["returns"][:, None], torch.ones(len(mb), 1),
                    clip=algo.value_clip, agg="token-mean",
                )  # fmt: skip
                share = len(mb) / num_rows
                (world * algo.vf_coef * loss * share).backward()
                mb_loss += float(loss.detach()) * share

            def zero_pass():
                (0.0 * critic_values(critic, template[:1], UNBOUNDED).sum()).backward()

            comm.sync_gradients(critic, zero_pass)
        gn = comm.norm_value(
            torch.nn.utils.clip_grad_norm_(critic.parameters(), algo.grad_clip or float("inf"))
        )
        (total,) = comm.all_reduce([mb_loss])
        if not math.isfinite(gn) or not math.isfinite(total):
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        sums["critic/value_loss"] = sums.get("critic/value_loss", 0.0) + total
        count += 1
    return UpdateResult({k: v / max(count, 1) for k, v in sums.items()}, skipped)
