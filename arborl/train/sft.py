"""Supervised fine-tuning on trajectories: the warm start of RL.

Each step of a trajectory becomes one (prompt, response) pair, with the prompt built by
the same agent code the rollout's `step` view uses, so SFT trains exactly the inputs RL
will later see. The loss covers the response tokens only (the action and the end-of-turn
token), never the prompt or the observation.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from arborl.agent import AgentConfig, build_prompt, encode_text, instruction_text, make_memory
from arborl.data import Trajectory
from arborl.models.scoring import position_ids_from_mask
from arborl.rollout import OraclePolicy, draw_seeds, run_episodes_with_policy
from arborl.train.build import lr_lambda, pool_options

log = logging.getLogger("arborl")


@dataclass
class SFTExample:
    """One training pair, as token ids."""

    prompt_ids: list[int]
    """Prompt tokens, ending in the generation prompt."""
    response_ids: list[int]
    """Target tokens: the response followed by the end-of-turn token."""


def build_sft_examples(
    trajectories: Iterable[Trajectory],
    tokenizer,
    agent_cfg: AgentConfig,
    max_prompt_tokens: int | None = None,
) -> list[SFTExample]:
    """(prompt, response) pairs of every step, with prompts rebuilt from each episode's
    memory and, as the rollout's step view does, left-cut to `max_prompt_tokens` (the
    run's `rollout.max_prompt_tokens`; None: no limit). A step whose `meta["turn_loss"]`
    entry is False (a demo's deliberate mistake, `arborl env demos --epsilon`) stays in
    the later prompts' history but is not a training pair."""
    eos = tokenizer.eos_token_id
    limit = max_prompt_tokens or None
    out = []
    for traj in trajectories:
        memory = make_memory(agent_cfg)
        # As LMPolicy does: agent.system_prompt, when set, replaces the env's instruction.
        instruction = instruction_text(traj.instruction, agent_cfg)
        losses = traj.meta.get("turn_loss") or [None] * len(traj.steps)
        if len(losses) != len(traj.steps):
            raise ValueError(
                f"trajectory {traj.task_id!r}: meta.turn_loss has {len(losses)} entries for "
                f"{len(traj.steps)} steps; give one per step (or drop it)"
            )
        for step, loss in zip(traj.steps, losses):
            response = step.response if step.response is not None else step.action
            if loss is not False:
                prompt = build_prompt(tokenizer, step.observation, memory, instruction, agent_cfg)
                if limit is not None:
                    prompt = prompt[-limit:]
                out.append(SFTExample(prompt, encode_text(tokenizer, response) + [eos]))
            memory.add(step.observation, response)
    if not out:
        raise ValueError("no SFT examples: the trajectories have no steps")
    return out


def collate(examples: list[SFTExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) input_ids / attention_mask and a (B, T-1) loss mask that is 1
    where the *target* token (position t+1) is a response token."""
    lengths = [len(e.prompt_ids) + len(e.response_ids) for e in examples]
    T = max(lengths)
    ids = torch.full((len(examples), T), pad_id, dtype=torch.long)
    attn = torch.zeros((len(examples), T), dtype=torch.long)
    loss_mask = torch.zeros((len(examples), T - 1), dtype=torch.float32)
    for i, e in enumerate(examples):
        seq = e.prompt_ids + e.response_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        p = len(e.prompt_ids)
        loss_mask[i, p - 1 : len(seq) - 1] = 1.0
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": loss_mask}


def sft_loss(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean negative log-likelihood over response tokens, and token accuracy-free stats."""
    logp, mask = response_logprobs(model, batch)  # (B, R), (B, R)
    n = mask.sum().clamp(min=1.0)
    loss = -(logp * mask).sum() / n
    return loss, {"sft/loss": float(loss.detach()), "sft/tokens": float(n)}


def response_logprobs(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, R) log-probabilities of the last R target positions and their (B, R) loss mask,
    R being the longest response. The LM head runs on those R positions only: with a
    small body and a BPE vocabulary the head over every prompt position was ~40% of an SFT
    step, for targets that are masked out. `collate`'s rows are right-padded; each is
    rolled to end at the last column first (left padding: positions and attention are
    those of the real tokens, so the numbers are the same up to float rounding)."""
    ids, attn, loss_mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    num_cols = ids.shape[1]
    shifts = (num_cols - attn.sum(-1)).tolist()  # (B,) pads at each row's end
    ids = torch.stack([row.roll(s) for row, s in zip(ids, shifts)])  # (B, T) left-padded
    attn = torch.stack([row.roll(s) for row, s in zip(attn, shifts)])
    # loss_mask[t] marks target t+1; real targets never wrap (t + s <= T - 2)
    loss_mask = torch.stack([row.roll(s) for row, s in zip(loss_mask, shifts)])  # (B, T-1)
    width = int(batch["loss_mask"].sum(-1).max().clamp(min=1))  # R
    out = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=position_ids_from_mask(attn),
        use_cache=False,
        logits_to_keep=width + 1,
    )
    logits = out.logits[:, :-1].float()  # (B, R, V): the positions predicting the last R tokens
    targets = ids[:, num_cols - width :]  # (B, R)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1), loss_mask[:, num_cols - 1 - width :]


SFT_CHUNK_TOKENS = 2048
"""Padded tokens per forward of an SFT batch: its examples go shortest first, in chunks, so
short examples are not padded to the batch's longest (BabyAI demos: 50-150 tokens)."""


def _length(e: SFTExample) -> int:
    return len(e.prompt_ids) + len(e.response_ids)


def sft_backward(model, examples: list[SFTExample], pad_id: int) -> dict[str, float]:
    """Accumulate the gradient of `sft_loss` over `examples` (the mean NLL of every
    response token of the batch) in length-ordered chunks of at most `SFT_CHUNK_TOKENS`
    padded tokens, each chunk's sum divided by the whole batch's token count: the
    gradient of one padded forward, up to float rounding, without its padding."""
    ordered = sorted(examples, key=_length)
    num_tokens = float(sum(len(e.response_ids) for e in ordered))
    chunks: list[list[SFTExample]] = [[]]
    for e in ordered:  # sorted: e is the longest of its chunk so far
        if chunks[-1] and (len(chunks[-1]) + 1) * _length(e) > SFT_CHUNK_TOKENS:
            chunks.append([])
        chunks[-1].append(e)
    total = 0.0
    for chunk in chunks:
        logp, mask = response_logprobs(model, collate(chunk, pad_id))
        loss = -(logp * mask).sum() / max(num_tokens, 1.0)
        loss.backward()
        total += float(loss.detach())
    return {"sft/loss": total, "sft/tokens": num_tokens}


def run_sft(
    model,
    tokenizer,
    examples: list[SFTExample],
    cfg,
    logger=None,
    step_offset: int = 0,
    progress: bool = True,
):
    """Train `model` in place for `cfg.steps` AdamW steps on random batches of `examples`.

    `cfg` is an `SFTConfig`. Batches are drawn with a `torch.Generator` seeded by
    `cfg.seed`, so two runs with the same seed see the same batches. Returns the final
    step's stats and `sft/first_loss`, the loss of the first batch (before any update).
    `progress=False` hides the bar it shows when no `logger` advances one.
    """
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, cfg.steps))
    gen = torch.Generator().manual_seed(cfg.seed)
    stats: dict[str, float] = {}
    first_loss = None
    # A bar of its own when no logger advances one (the RL trainer logs SFT as one record).
    from arborl.progress import progress as progress_bar

    hide = logger is not None or not progress
    bar = progress_bar(cfg.steps, "SFT", disable=hide, dynamic_ncols=True)
    for step in range(cfg.steps):
        idx = torch.randint(len(examples), (min(cfg.batch_size, len(examples)),), generator=gen)
        opt.zero_grad(set_to_none=True)
        stats = sft_backward(model, [examples[i] for i in idx.tolist()], tokenizer.pad_token_id)
        first_loss = stats["sft/loss"] if first_loss is None else first_loss
        stats["sft/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        sched.step()
        stats["sft/lr"] = sched.get_last_lr()[0]
        if logger is not None:
            logger.log(step_offset + step, stats, advance=1)
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{stats['sft/loss']:.3f}")
    bar.close()
    model.eval()
    if first_loss is not None:
        stats["sft/first_loss"] = first_loss
    return stats


def load_demos(cfg, pools=None) -> list[Trajectory]:
    """The SFT demos of a `TrainConfig`: `sft.demos` read from file, or `sft.num_demos`
    oracle episodes of `env.train_split` (tasks drawn from `sft.seed`). The oracle's envs
    run in `env.pool_mode` with the run's pool options, as training and evaluation do: a
    packaged env imports only in its own venv, so in-process demos would fail on it.
    `pools`: the run's `PoolSet` (its workers; else a pool built for this call)."""
    from dataclasses import replace

    from arborl.data import read_trajectories

    if cfg.sft.demos:
        return read_trajectories(cfg.sft.demos)
    seeds = draw_seeds(cfg.sft.num_demos, cfg.sft.seed)
    res = run_episodes_with_policy(
        OraclePolicy(), pools or cfg.env.id, seeds, replace(cfg.rollout, group_size=1),
        split=cfg.env.train_split, env_kwargs=cfg.env.kwargs, pool_mode=cfg.env.pool_mode,
        pool_options=pool_options(cfg),
    )  # fmt: skip
    return res.trajectories


def warm_start(
    model, tokenizer, cfg, logger=None, log_steps: bool = False, pools=None
) -> dict[str, float]:
    """SFT `model` in place on the demos of `cfg` (a `TrainConfig`); the final stats.

    With `log_steps`, every optimizer step's stats go to `logger` (`arborl sft`);
    otherwise only the final stats are logged, as step 0 (`arborl train`). `pools`: the
    run's `PoolSet`, for the demos' envs."""
    demos = load_demos(cfg, pools)
    examples = build_sft_examples(demos, tokenizer, cfg.agent, cfg.rollout.max_prompt_tokens)
    log.info(
        "SFT on %d demos (%d steps) for %d optimizer steps",
        len(demos),
        len(examples),
        cfg.sft.steps,
    )
    stats = run_sft(
        model, tokenizer, examples, cfg.sft, logger=logger if log_steps else None,
        progress=cfg.trainer.progress,
    )  # fmt: skip
    if logger is not None and not log_steps:
        logger.log(0, {"phase": "sft", **stats, "sft/examples": len(examples)})
    return {**stats, "sft/examples": float(len(examples)), "sft/demos": float(len(demos)),
            "sft/demos_won": float(sum(t.won for t in demos))}  # fmt: skip


def sft_job(cfg) -> dict:
    """`arborl sft`: the warm start of `arborl train` as its own run. Writes the run folder
    (config.yaml, metrics.jsonl with every SFT step, the policy in HF format under
    `checkpoints/sft/policy` with its agent settings, summary.json with the held-out
    success after SFT) and returns the summary."""
    from arborl.agent.settings import save_agent_settings
    from arborl.config import to_dict
    from arborl.generation.hf import HFBackend
    from arborl.models import save_policy
    from arborl.train.build import build_policy, build_pool_set, compute_dtype, set_threads
    from arborl.train.evaluate import evaluate_policy, record_evaluation
    from arborl.train.runlog import MetricsLogger, RunDir

    set_threads(cfg)
    run = RunDir.create(cfg.trainer.output_dir, cfg.trainer.name, cfg)
    logger = MetricsLogger(
        run, total=cfg.sft.steps, desc="SFT", keys=("sft/loss",),
        disable_bar=not cfg.trainer.progress, loggers=cfg.trainer.loggers, config=to_dict(cfg),
    )  # fmt: skip
    pools = None
    try:
        pools = build_pool_set(cfg)  # the demos' and the evaluation's envs: one set of workers
        model, tokenizer = build_policy(cfg)
        with compute_dtype(cfg, model):
            stats = warm_start(model, tokenizer, cfg, logger, log_steps=True, pools=pools)
        policy_dir = save_policy(model, tokenizer, run.path / "checkpoints" / "sft" / "policy")
        save_agent_settings(policy_dir, cfg.agent)
        model.eval()
        backend = HFBackend(model, tokenizer, max_batch_size=128)
        with compute_dtype(cfg, model):
            result = evaluate_policy(backend, tokenizer, cfg, pools=pools)
        after, _ = record_evaluation(run.path, cfg.sft.steps, result)
        logger.log(cfg.sft.steps, {f"eval/final_{k}": v for k, v in after.items()})
        summary = {
            "sft": stats,
            "after": after,
            "policy": str(policy_dir),
            "run_dir": str(run.path),
        }
        (run.path / "summary.json").write_text(json.dumps(summary, indent=2))
    finally:
        if pools is not None:
            pools.close()
        logger.close()
        run.close()
    if cfg.trainer.report:
        from arborl.report import write_report

        write_report([run.path])
    return summary
