"""Learn from a teacher on the student's own states (the `teacher` section): DAgger and
on-policy distillation, beside or instead of the policy-gradient loss.

Three pieces, each where its work is:

- `TeacherRollout` (the engine's side): one RL step's episodes with the student acting
  (`agent.action_mode=score`), every state labelled by the teacher (`arborl.train.teacher`:
  one batched call per turn for the states not in its cache) and the teacher's action
  executed with probability β (`arborl.rollout.dagger.DaggerPolicy`). The step-view batch
  gains `teacher_p` (R, K); the step logs `teacher/*` (β, the share of teacher actions,
  calls, states labelled, cache hits, seconds).
- `Distillation` (the trainer's side): the term's weight this step (`teacher.coef` ->
  `teacher.coef_end` over `teacher.coef_steps`), written on each labelled row as
  `teacher_w`; rows the policy-gradient filter dropped (zero advantage) stay for the
  teacher's term with no response tokens, so they add nothing to the PG loss; and with
  `teacher.buffer_size` the labelled states of earlier steps (classic DAgger's aggregated
  set, oldest dropped first) join every update the same way.
- `distill_term`: what the update adds to the loss of a micro-batch, `sum_rows teacher_w
  * KL(teacher || student) / labelled rows of the minibatch` (`arborl.algos.choice_kl`).

`algo=distill` turns the policy gradient off (every advantage 0), so the update is the
teacher's term alone; any other `algo` trains both. The buffer is not saved in
checkpoints: a resumed run starts it empty.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import torch
import torch.nn.functional as F

from arborl import algos
from arborl.data import Batch

log = logging.getLogger("arborl")

LABEL_KEYS = (
    "input_ids",
    "attention_mask",
    "response_mask",
    "old_logp",
    "cand_ids",
    "cand_mask",
    "cand_norm",
    "chosen",
    "teacher_p",
)
"""What a labelled state keeps in the buffer (a score-mode row and its label)."""
TEACHER_KEYS = ("teacher_p", "teacher_w")
"""The columns the actor update reads for the teacher's term."""


def distill_term(student_logp: torch.Tensor, valid: torch.Tensor, mb: Batch, num_labels: float):
    """The teacher's term of a micro-batch: () `sum_b teacher_w[b] * KL_b / num_labels`.

    student_logp, valid: (B, K) the student's categorical (`choice_response_logp`);
    `mb` holds `teacher_p` (B, K) and `teacher_w` (B,) (0: not labelled); num_labels: the
    labelled rows of the whole minibatch, so micro-batch terms add up to its mean."""
    kl = algos.choice_kl(student_logp, mb.tensors["teacher_p"], valid)  # (B,)
    w = mb.tensors["teacher_w"].to(kl.dtype)
    return (w * kl).sum() / max(num_labels, 1.0)


class TeacherRollout:
    """The engine's side: rollouts labelled and mixed by the teacher (module docstring)."""

    def __init__(self, cfg) -> None:
        from arborl.train.teacher import build_teacher_labels

        self.cfg = cfg
        self.labels = build_teacher_labels(cfg)

    def beta(self, step: int) -> float:
        t = self.cfg.teacher
        return algos.linear_schedule(t.beta, t.beta_end, t.beta_steps, step)

    def rollout(self, backend, tokenizer, pool, plan):
        """`(RolloutResult, metrics)` of RL step `plan.step`."""
        from arborl.rollout import build_batch, make_lm_policy, run_episodes_with_policy
        from arborl.rollout.dagger import DaggerPolicy

        c, r = self.cfg, plan.rollout
        beta = self.beta(plan.step)
        student = make_lm_policy(backend, tokenizer, r, c.agent)
        seed = None if r.seed is None else r.seed + 7919  # not the student's own stream
        policy = DaggerPolicy(student, self.labels, beta, seed)
        before = replace(self.labels.cost)
        res = run_episodes_with_policy(policy, pool, plan.seeds, r, split=c.env.train_split)
        res.batch = build_batch(res.episodes, r.view, tokenizer.pad_token_id)
        res.batch.info["temperature"] = r.temperature
        cost = self.labels.cost
        metrics = {
            "teacher/beta": beta,
            "teacher/acted": policy.num_teacher_actions / max(policy.num_decisions, 1),
            "teacher/calls": float(cost.calls - before.calls),
            "teacher/states": float(cost.states - before.states),
            "teacher/cache_hits": float(cost.cache_hits - before.cache_hits),
            "teacher/seconds": cost.seconds - before.seconds,
        }
        log.info(
            "step %d teacher: %d calls labelled %d states (%d cache hits) in %.3f s; beta "
            "%.3f, teacher acted %.3f; run so far: %d calls, %d states, %d hits, %.2f s",
            plan.step + 1,
            metrics["teacher/calls"],
            metrics["teacher/states"],
            metrics["teacher/cache_hits"],
            metrics["teacher/seconds"],
            beta,
            metrics["teacher/acted"],
            cost.calls,
            cost.states,
            cost.cache_hits,
            cost.seconds,
        )
        return res, metrics


class Distillation:
    """The trainer's side: the term's weight, the rows it trains and the buffer."""

    def __init__(self, teacher_cfg) -> None:
        self.t = teacher_cfg
        self.buffer: list[Batch] = []
        """Labelled states of earlier steps, oldest first (at most `buffer_size` rows)."""

    @property
    def buffered(self) -> int:
        return sum(len(b) for b in self.buffer)

    def coef(self, step: int) -> float:
        t = self.t
        return algos.linear_schedule(t.coef, t.coef_end, t.coef_steps, step)

    def rows(self, batch: Batch, train: Batch, step: int, drop_zero_adv: bool):
        """`(rows, metrics)`: the actor's rows of this step, `train` (the PG rows) with
        `teacher_w`, then the step's other labelled rows and the buffer's, which carry no
        response tokens (the PG loss skips them); then this step's states join the buffer."""
        if "teacher_p" not in batch.tensors:
            raise ValueError(
                "the teacher's term needs rows labelled by the teacher (batch column "
                "teacher_p); the rollout did not label them: is teacher.kind set and "
                "agent.action_mode=score?"
            )
        coef = self.coef(step)
        parts = [_with_weight(train, coef)]
        if drop_zero_adv and len(train) < len(batch):  # the rows the PG filter dropped
            parts.append(_label_only(batch[batch.tensors["adv"].abs() <= 1e-8], coef))
        parts += [_label_only(b, coef) for b in self.buffer]
        rows = _merge(parts, template=train)
        if self.t.buffer_size:
            self.add(batch.select(*LABEL_KEYS))
        metrics = {"teacher/coef": coef, "teacher/label_rows": float(len(rows))}
        metrics["teacher/buffer_states"] = float(self.buffered)
        return rows, metrics

    def add(self, labelled: Batch) -> None:
        """Append a step's labelled states, dropping the oldest beyond `buffer_size`."""
        self.buffer.append(labelled)
        excess = self.buffered - self.t.buffer_size
        while excess > 0:
            first = self.buffer[0]
            if len(first) <= excess:
                self.buffer.pop(0)
                excess -= len(first)
            else:
                self.buffer[0] = first[excess:]
                excess = 0


def _with_weight(rows: Batch, coef: float) -> Batch:
    out = rows.select(*rows.tensors)
    out["teacher_w"] = torch.full((len(rows),), float(coef))
    return out


def _label_only(rows: Batch, coef: float) -> Batch:
    """`rows` for the teacher's term only: no response tokens, advantage and weight 0."""
    out = _with_weight(rows, coef)
    out["response_mask"] = torch.zeros_like(out.tensors["response_mask"])
    for key in ("adv", "weight"):
        out[key] = torch.zeros(len(rows))
    return out


def _merge(parts: list[Batch], template: Batch) -> Batch:
    """One batch of score-mode rows of several layouts: prompts left-padded to the longest,
    candidates padded to the most and longest; a column some part lacks (e.g. `ref_logp`
    of buffer rows, whose response mask is 0) is zero there."""
    from arborl.rollout.batching import pad_choices

    parts = [p for p in parts if len(p)]
    if len(parts) == 1:
        return parts[0]
    keys = (*template.tensors, "teacher_w")
    pad_id = int(parts[0].info.get("pad_token_id", 0))
    p_len = max(int(p.info["prompt_length"]) for p in parts)
    k = max(p.tensors["cand_ids"].shape[1] for p in parts)
    length = max(p.tensors["cand_ids"].shape[2] for p in parts)
    out = []
    for p in parts:
        p0 = int(p.info["prompt_length"])
        t = dict(p.tensors)
        for name, fill in (("input_ids", pad_id), ("attention_mask", 0)):
            t[name] = F.pad(t[name], (p_len - p0, 0), value=fill)  # (R, P + 1)
        for name in keys:
            if name not in t:
                like = template.tensors[name]
                t[name] = torch.zeros((len(p), *like.shape[1:]), dtype=like.dtype)
        b = Batch({n: t[n] for n in keys}, {}, {**p.info, "prompt_length": p_len})
        out.append(pad_choices(b, k, length, pad_id))
    return Batch.concat(out)
