"""Reward-model training and evaluation: outcome RMs on preference pairs, process RMs on
Monte-Carlo step labels.

    cfg = RMTrainConfig(kind="orm", data="pairs.jsonl", out="runs/orm")
    summary = train_reward_model(cfg)          # writes runs/orm/model (HF format)

Both trainers are the same loop: AdamW with warm-up and cosine decay, random batches
drawn with a `torch.Generator` seeded by `cfg.seed`, every record tokenized once up
front; the two kinds differ in four functions (read, evaluate, encode, batch), kept per
kind in the `RM_KINDS` registry. The ORM step scores the last token of chosen and rejected trajectories in one
forward pass over 2B rows and applies the Bradley-Terry loss (with an optional margin
proportional to the return gap); the PRM step scores every step end of B trajectories
against their success rates with soft binary cross-entropy.

Evaluation reports pairwise accuracy (ties count one half), per-step accuracy (sigmoid
score and label on the same side of 0.5), the Brier score, and reliability bins for a
calibration plot.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from arborl.config import dump_yaml
from arborl.registry import Registry
from arborl.rewards.reward_model import (
    RewardModel,
    bradley_terry_loss,
    collate,
    step_label_loss,
    step_prefixes,
)
from arborl.rewards.rm_data import PreferencePair, StepLabels, read_pairs, read_step_labels
from arborl.train.build import lr_lambda
from arborl.train.rm_config import RMTrainConfig

log = logging.getLogger("arborl")


# --- metrics --------------------------------------------------------------------------------
def pairwise_accuracy(chosen: Sequence[float], rejected: Sequence[float]) -> float:
    """Fraction of pairs whose chosen score is higher; a tie counts 0.5."""
    if len(chosen) != len(rejected) or not chosen:
        raise ValueError(
            f"need equally many scores, at least one; got {len(chosen)}, {len(rejected)}"
        )
    wins = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected))
    return wins / len(chosen)


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Probability that a random positive outscores a random negative (ties 0.5), from
    ranks in O(n log n); None when one class is empty."""
    n_pos = sum(1 for y in positive if y)
    n_neg = len(positive) - n_pos
    if not n_pos or not n_neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):  # average ranks (1-based) over runs of equal scores
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos_rank_sum = sum(r for r, y in zip(ranks, positive) if y)
    return (pos_rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def reliability_bins(
    probs: Sequence[float], targets: Sequence[float], num_bins: int = 10
) -> list[dict[str, float]]:
    """Equal-width bins of predicted probability: count, mean prediction, mean target."""
    bins = [{"lo": i / num_bins, "hi": (i + 1) / num_bins, "n": 0, "pred": 0.0, "target": 0.0}
            for i in range(num_bins)]  # fmt: skip
    for p, y in zip(probs, targets):
        b = bins[min(num_bins - 1, int(p * num_bins))]
        b["n"] += 1
        b["pred"] += p
        b["target"] += y
    for b in bins:
        if b["n"]:
            b["pred"] /= b["n"]
            b["target"] /= b["n"]
    return bins


def evaluate_pairs(model: RewardModel, pairs: Sequence[PreferencePair], batch_size: int = 32):
    """Pairwise accuracy on `pairs` and (probability, won) points of their trajectories."""
    trajs = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    scores = model.score(trajs, batch_size)
    n = len(pairs)
    acc = pairwise_accuracy(scores[:n], scores[n:])
    points = [(sigmoid(s), float(t.won)) for s, t in zip(scores, trajs) if not math.isnan(s)]
    return {"pairwise_accuracy": acc, "num_pairs": n}, points


def evaluate_steps(model: RewardModel, records: Sequence[StepLabels], batch_size: int = 32):
    """Per-step accuracy, Brier score, mean absolute error and ROC AUC (label >= 0.5 as the
    positive class; None if all labels fall on one side) against the MC labels, and the
    (probability, label) points."""
    steps = model.score_steps([r.trajectory for r in records], batch_size)
    points = [
        (sigmoid(s), y)
        for rec, ss in zip(records, steps)
        for s, y in zip(ss, rec.labels)
        if not math.isnan(s) and not math.isnan(y)
    ]
    if not points:
        raise ValueError("no scorable steps in the step-label records")
    n = len(points)
    acc = sum((p >= 0.5) == (y >= 0.5) for p, y in points) / n
    brier = sum((p - y) ** 2 for p, y in points) / n
    mae = sum(abs(p - y) for p, y in points) / n
    auc = roc_auc([p for p, _ in points], [y >= 0.5 for _, y in points])
    metrics = {"step_accuracy": acc, "step_brier": brier, "step_mae": mae, "step_auc": auc}
    return {**metrics, "num_steps": n}, points


def plot_calibration(curves: dict[str, list[tuple[float, float]]], path: str | Path) -> Path:
    """A reliability diagram (mean target against mean prediction per bin) per curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    for name, points in curves.items():
        bins = [b for b in reliability_bins(*zip(*points)) if b["n"]] if points else []
        ax.plot([b["pred"] for b in bins], [b["target"] for b in bins], "o-",
                label=f"{name} (n={len(points)})")  # fmt: skip
    ax.set_xlabel("predicted P(success) = sigmoid(score)")
    ax.set_ylabel("observed success (won / MC label)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def evaluate_file(model: RewardModel, kind: str, path: str, batch_size: int = 32):
    """`evaluate_pairs` or `evaluate_steps` on the records of `kind` in `path` (one file
    or several, comma-separated)."""
    return RM_KINDS.get(kind).evaluate(model, _load_records(kind, path), batch_size)


# --- training -------------------------------------------------------------------------------
def _orm_batch(model: RewardModel, enc: list, idx: list[int], cfg: RMTrainConfig):
    """enc[i] = (chosen EncodedTrajectory, rejected EncodedTrajectory, return gap)."""
    rows = [enc[i][0] for i in idx] + [enc[i][1] for i in idx]
    ids, mask, _ = collate(rows, model.tokenizer.pad_token_id)
    final = model(ids, mask)[:, -1]  # (2B,) left padding: the last column is every last token
    b = len(idx)
    margin = None
    if cfg.margin_coef > 0:
        margin = torch.tensor([enc[i][2] * cfg.margin_coef for i in idx])
    loss = bradley_terry_loss(final[:b], final[b:], margin)
    acc = float((final[:b] > final[b:]).float().mean())
    return loss, {"rm/loss": float(loss.detach()), "rm/batch_accuracy": acc}


def _prm_batch(model: RewardModel, enc: list, idx: list[int], cfg: RMTrainConfig):
    """enc[i] = (EncodedTrajectory, its per-step labels)."""
    batch = collate([enc[i][0] for i in idx], model.tokenizer.pad_token_id)
    scores, valid = model.step_scores(batch)  # (B, S)
    labels = torch.full_like(scores, math.nan)
    for r, i in enumerate(idx):
        n = len(enc[i][1])
        labels[r, :n] = torch.tensor(enc[i][1][: scores.shape[1]])
    valid = valid & ~labels.isnan()  # context-only steps (NaN labels) carry no loss
    labels = labels.nan_to_num(0.0)
    loss = step_label_loss(scores, labels, valid)
    hit = ((scores >= 0) == (labels >= 0.5)) & valid
    acc = float(hit.sum()) / max(1, int(valid.sum()))
    return loss, {"rm/loss": float(loss.detach()), "rm/batch_step_accuracy": acc}


def _encode_pairs(model: RewardModel, records: list) -> list:
    """Token ids of every pair once up front: (chosen, rejected, margin)."""
    chosen = model.encode([p.chosen for p in records])
    rejected = model.encode([p.rejected for p in records])
    return [(c, r, p.margin) for c, r, p in zip(chosen, rejected, records)]


def _encode_steps(model: RewardModel, records: list) -> list:
    """Token ids once up front. A PRM with `max_history_steps` learns each step from its own
    prefix (as it will score it), so its trajectories expand to one sequence per step."""
    if not model.max_history_steps:
        return list(zip(model.encode([r.trajectory for r in records]), [r.labels for r in records]))
    prefixes = [(q, r.labels[: t + 1]) for r in records
                for t, q in enumerate(step_prefixes(r.trajectory))
                if not math.isnan(r.labels[t])]  # fmt: skip
    return list(zip(model.encode([q for q, _ in prefixes]), [lab for _, lab in prefixes]))


@dataclass(frozen=True)
class RMKind:
    """What differs between an outcome (`orm`) and a process (`prm`) reward model."""

    read: Callable[[str], list]
    """Records of one file: preference pairs or step labels."""
    evaluate: Callable[..., dict]
    """`(model, records, batch_size) -> metrics`."""
    encode: Callable[[RewardModel, list], list]
    """Token ids of the records, once before training."""
    batch: Callable[..., tuple]
    """`(model, encoded, indices, cfg) -> (loss, stats)` of one training batch."""


RM_KINDS: Registry[RMKind] = Registry("kind", error=ValueError)
"""Reward-model kinds by name (`RMTrainConfig.kind`)."""
RM_KINDS.register("orm", RMKind(read_pairs, evaluate_pairs, _encode_pairs, _orm_batch))
RM_KINDS.register("prm", RMKind(read_step_labels, evaluate_steps, _encode_steps, _prm_batch))


def _load_records(kind: str, paths: str) -> list:
    """Records of every file in `paths` (comma-separated)."""
    read = RM_KINDS.get(kind).read
    records = []
    for path in [p.strip() for p in paths.split(",") if p.strip()]:
        got = read(path)
        if not got:
            raise ValueError(f"{path} holds no records; make some with `arborl rm data`")
        records += got
    if not records:
        raise ValueError(f"data={paths!r} names no file; pass --data FILE[,FILE...]")
    return records


def fit_reward_model(model: RewardModel, records: list, cfg: RMTrainConfig, on_step=None):
    """Train `model` in place on `records` (pairs or step labels per `cfg.kind`) for
    `cfg.steps` steps; `on_step(step, stats)` is called after each. Returns final stats."""
    if model.kind != cfg.kind:
        raise ValueError(
            f"the model is a {model.kind!r} reward model but kind={cfg.kind!r}; start a "
            f"{cfg.kind} from a preset or causal-LM checkpoint instead"
        )
    if not records:
        raise ValueError(f"no {cfg.kind} training records; make some with `arborl rm data`")
    rm_kind = RM_KINDS.get(cfg.kind)
    enc, step_fn = rm_kind.encode(model, records), rm_kind.batch
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, cfg.steps))
    gen = torch.Generator().manual_seed(cfg.seed)
    stats: dict[str, float] = {}
    model.train()
    for step in range(cfg.steps):
        idx = torch.randint(len(enc), (min(cfg.batch_size, len(enc)),), generator=gen)
        loss, stats = step_fn(model, enc, idx.tolist(), cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            stats["rm/grad_norm"] = float(norm)
        opt.step()
        sched.step()
        stats["rm/lr"] = sched.get_last_lr()[0]
        if on_step is not None:
            on_step(step + 1, stats)
    model.eval()
    return stats


def train_reward_model(cfg: RMTrainConfig) -> dict:
    """Build the model of `cfg`, train it, evaluate on `cfg.eval_data`, save everything
    under `cfg.out`; return the summary (also written to `summary.json`)."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, out / "config.yaml")
    records = _load_records(cfg.kind, cfg.data)
    model = RewardModel.from_spec(
        cfg.model, cfg.kind, cfg.max_length, cfg.include_instruction, seed=cfg.seed,
        max_history_steps=cfg.max_history_steps,
        score_after_observation=cfg.score_after_observation,
    )  # fmt: skip
    t0 = time.perf_counter()
    with open(out / "metrics.jsonl", "w") as metrics:

        def on_step(step: int, stats: dict[str, float]) -> None:
            row = {"step": step, **stats}
            if cfg.eval_data and cfg.eval_every and step % cfg.eval_every == 0:
                row.update(evaluate_file(model, cfg.kind, cfg.eval_data)[0])
                model.train()
            metrics.write(json.dumps(row) + "\n")
            metrics.flush()
            if step % 50 == 0 or step == cfg.steps:
                log.info("rm step %d/%d loss %.4f", step, cfg.steps, stats["rm/loss"])

        final = fit_reward_model(model, records, cfg, on_step)
    train_s = time.perf_counter() - t0
    model_dir = model.save_pretrained(
        out / "model", extra={"trained_on": ",".join(Path(x).name for x in cfg.data.split(","))}
    )
    summary = {"kind": cfg.kind, "num_records": len(records), "steps": cfg.steps,
               "train_s": round(train_s, 1), "final": final, "model": str(model_dir)}  # fmt: skip
    if cfg.eval_data:
        summary["eval"] = evaluate_file(model, cfg.kind, cfg.eval_data)[0]
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
