"""Rollout correction: importance weights and masks for a sampler that is not the trainer.

The sampler (vLLM, a bf16 backend, or last step's weights under async) scores the tokens it
drew as pi_rollout; the trainer's weights before the update score them as pi_old. arborl
implements the *decoupled* form (Hilton et al. 2021, verl's "decoupled mode"): the PPO
ratio is pi_theta / pi_old (the trainer recomputes `old_logp` before the update), and the
per-token loss is multiplied by a correction weight w of pi_old / pi_rollout (the update
multiplies each token's advantage by it, the same for any policy loss), computed once
a step from

    log_ratio = old_logp - rollout_logp     (B, T), trainer minus sampler, valid on `mask`

Each mode is a `Correction` record in `CORRECTIONS` (an outside package registers its own
with `register_correction`); `weigh(log_ratio, mask, params)` returns a `CorrectionOutput`
whose `weights` (B, T) are 0 on padding and on masked tokens. `params` is anything with
`cap` and `veto_threshold` (the `algo.correction` config section):

- "none": no correction (bypass: the PPO ratio stays pi_theta / pi_rollout, as before).
- "token_tis": w_t = min(rho_t, cap), rho_t = exp(log_ratio_t) (truncated IS, per token).
- "seq_tis": w = min(rho, cap) for every token of a sequence, rho = prod_t rho_t (the
  sequence's IS weight: the sum of its log-ratios, not their mean; TRL's form).
- "seq_mis": masked IS: w = rho where rho <= cap, and the whole sequence is masked (w = 0)
  where rho > cap (TRL's `sequence_mask`, IcePop's one-sided mask).
- "geo_veto": no weights (w = 1); a sequence whose geometric-mean ratio
  exp(mean_t log_ratio_t) lies outside [1 / veto_threshold, veto_threshold] is vetoed
  (w = 0), verl's geometric rejection. Its threshold is tight (1.001 to 1.01): a
  geometric mean of 1.01 is a product of 2.7 over 100 tokens.

Log-ratios are clamped to +-20 before `exp` (verl's safety bound), so one token cannot
overflow a weight. Masked tokens keep their place in the loss denominators (TRL's form:
their loss is multiplied by 0), so a step's loss scale does not jump with the masked share.
`mismatch_metrics` summarises the sampler-trainer gap and what the weights did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from arborl.algos.masked import masked_mean
from arborl.registry import Registry

LOG_RATIO_BOUND = 20.0
"""|log_ratio| is clamped to this before `exp` (exp(20) ~ 5e8)."""


@dataclass(frozen=True)
class CorrectionOutput:
    """What a correction mode does to a batch of (B, T) tokens."""

    weights: torch.Tensor
    """(B, T) float multiplier of each token's loss: 0 on padding and masked tokens."""
    truncated: torch.Tensor
    """(B, T) bool: valid tokens whose weight was capped."""
    masked: torch.Tensor
    """(B, T) bool: valid tokens whose weight was set to 0 (masked or vetoed)."""


WeighFn = Callable[[torch.Tensor, torch.Tensor, Any], CorrectionOutput]


@dataclass(frozen=True)
class Correction:
    """One `algo.correction.mode`: what it computes and what it needs."""

    name: str
    """The mode's one name, in configs, metrics, docs and `CORRECTIONS`."""
    weigh: WeighFn | None
    """`(log_ratio (B, T), mask (B, T), params) -> CorrectionOutput`; None for the bypass,
    which needs no trainer-side `old_logp` and leaves the loss as it is."""
    level: Literal["none", "token", "sequence"]
    """What one weight covers: nothing (bypass), a token, or a whole sequence (row)."""
    summary: str = ""
    """One line for docs and the run log."""

    @property
    def corrects(self) -> bool:
        """Does this mode weigh the loss (and so need the trainer's `old_logp`)?"""
        return self.weigh is not None


CORRECTIONS: Registry[Correction] = Registry(
    "algo.correction.mode", allow_entry_points=True, entry_point_group="arborl.corrections"
)
"""`algo.correction.mode` -> `Correction` (or a `"module:attr"` naming one)."""


def register_correction(record: Correction) -> Correction:
    """Add `record` under `record.name` (a name already taken is replaced)."""
    if record.level not in ("none", "token", "sequence"):
        raise ValueError(
            f"correction {record.name!r}: level={record.level!r} is not one of none, token, "
            "sequence"
        )
    CORRECTIONS.register(record.name, record)
    return record


def get_correction(name: str) -> Correction:
    """The record of `algo.correction.mode` (a registered name or a `"module:attr"`)."""
    fix = "register one with `register_correction`"
    return CORRECTIONS.get_record(name, Correction, "algo.correction.mode", fix)


def _valid(log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) bool mask and the log-ratio clamped and zeroed outside it."""
    if log_ratio.shape != mask.shape:
        raise ValueError(
            f"log_ratio {tuple(log_ratio.shape)} and mask {tuple(mask.shape)} must match"
        )
    valid = mask.bool()
    lr = torch.clamp(log_ratio.float(), -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return valid, torch.where(valid, lr, torch.zeros_like(lr))


def seq_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, 1) log of each sequence's IS weight: the sum of its valid tokens' log-ratios,
    clamped to +-LOG_RATIO_BOUND."""
    valid, lr = _valid(log_ratio, mask)
    return torch.clamp(lr.sum(-1, keepdim=True), -LOG_RATIO_BOUND, LOG_RATIO_BOUND)


def _out(weights, truncated, masked, valid) -> CorrectionOutput:
    zero = torch.zeros_like(weights)
    return CorrectionOutput(torch.where(valid, weights, zero), truncated & valid, masked & valid)


def token_tis(log_ratio: torch.Tensor, mask: torch.Tensor, params) -> CorrectionOutput:
    """w_t = min(exp(log_ratio_t), cap)."""
    valid, lr = _valid(log_ratio, mask)
    rho = torch.exp(lr)
    return _out(rho.clamp(max=params.cap), rho > params.cap, torch.zeros_like(valid), valid)


def seq_tis(log_ratio: torch.Tensor, mask: torch.Tensor, params) -> CorrectionOutput:
    """w = min(prod_t rho_t, cap) on every token of the sequence."""
    valid = mask.bool()
    rho = torch.exp(seq_log_ratio(log_ratio, mask)).expand_as(log_ratio)  # (B, T)
    return _out(rho.clamp(max=params.cap), rho > params.cap, torch.zeros_like(valid), valid)


def seq_mis(log_ratio: torch.Tensor, mask: torch.Tensor, params) -> CorrectionOutput:
    """w = prod_t rho_t, or 0 for the whole sequence where that exceeds cap."""
    valid = mask.bool()
    rho = torch.exp(seq_log_ratio(log_ratio, mask)).expand_as(log_ratio)  # (B, T)
    over = rho > params.cap
    return _out(torch.where(over, 0.0, rho), torch.zeros_like(valid), over, valid)


def geo_veto(log_ratio: torch.Tensor, mask: torch.Tensor, params) -> CorrectionOutput:
    """w = 1, or 0 for a sequence whose geometric-mean ratio is outside
    [1 / veto_threshold, veto_threshold]."""
    valid, lr = _valid(log_ratio, mask)
    n = valid.sum(-1, keepdim=True).clamp(min=1)
    geo_log = lr.sum(-1, keepdim=True) / n  # (B, 1) log of the geometric mean
    bound = torch.log(torch.tensor(float(params.veto_threshold)))
    out = (geo_log.abs() > bound).expand_as(lr)  # (B, T)
    ones = torch.ones_like(lr)
    return _out(torch.where(out, 0.0, ones), torch.zeros_like(valid), out, valid)


for _record in (
    Correction("none", None, "none", "no correction: the PPO ratio is pi_theta / pi_rollout"),
    Correction("token_tis", token_tis, "token", "per-token IS weight, capped at cap"),
    Correction("seq_tis", seq_tis, "sequence", "sequence IS weight, capped at cap"),
    Correction("seq_mis", seq_mis, "sequence", "sequence IS weight; sequences over cap masked"),
    Correction(
        "geo_veto",
        geo_veto,
        "sequence",
        "sequences whose geometric-mean ratio leaves [1/veto_threshold, veto_threshold] vetoed",
    ),
):
    register_correction(_record)


def _seq_share(flags: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Share of sequences (rows with a valid token) with any flagged token."""
    rows = valid.any(-1)
    return (flags & valid).any(-1)[rows].float().mean() if rows.any() else torch.tensor(0.0)


def mismatch_metrics(
    log_ratio: torch.Tensor, mask: torch.Tensor, out: CorrectionOutput | None = None
) -> dict[str, float]:
    """The sampler-trainer gap over valid tokens, and what a correction did:

    kl: mean of rho - 1 - log rho (k3 estimate of KL(pi_rollout || pi_old), >= 0);
    log_ratio_mean, log_ratio_abs_max: of old_logp - rollout_logp; with `out`:
    tokens_truncated, tokens_masked (shares of valid tokens), seqs_truncated, seqs_masked
    (shares of sequences with any such token) and weight_mean (mean weight of valid
    tokens). Keys carry no prefix."""
    valid, lr = _valid(log_ratio, mask)
    m = valid.float()
    stats = {
        "kl": masked_mean(torch.exp(lr) - 1.0 - lr, m),
        "log_ratio_mean": masked_mean(lr, m),
        "log_ratio_abs_max": lr.abs().max() if valid.any() else torch.tensor(0.0),
    }
    if out is not None:
        stats.update(
            tokens_truncated=masked_mean(out.truncated.float(), m),
            tokens_masked=masked_mean(out.masked.float(), m),
            seqs_truncated=_seq_share(out.truncated, valid),
            seqs_masked=_seq_share(out.masked, valid),
            weight_mean=masked_mean(out.weights, m),
        )
    return {k: float(v) for k, v in stats.items()}
