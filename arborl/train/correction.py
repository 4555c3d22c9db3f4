"""The rollout correction of an RL run: `algo.correction` resolved against the engine, and
applied to a step's rows before the update (the math: `arborl.algos.correction`).

`resolve_correction(cfg, engine_cls)` turns mode "auto" into a registered mode by asking
the engine class: an engine may declare `sampler_mismatch(cfg) -> str | None`, the reason
its sampler can differ from its trainer (another kernel stack, a dtype, an older weight
version), or None where they are one model in one dtype at one version. An engine that
declares nothing gets "none" with a warning (a plug-in engine written before corrections
existed has no `policy_logp` to rescore with, and must keep running). A correcting mode also
needs the engine's `policy_logp(batch, temperature)` (the trainer's weights scoring the
rows before the update), checked here so a run fails before any work.

`correct_rows(train, trainer_logp, resolved)` then sets `old_logp` to the trainer's
log-probs and `is_weight` (R, A) to the mode's weights (the decoupled form), and returns
the `mismatch/*` metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch

from arborl.algos.correction import Correction, get_correction, mismatch_metrics
from arborl.config import ConfigError
from arborl.data import Batch
from arborl.train.config import TrainConfig

log = logging.getLogger("arborl")

AUTO_MODE = "token_tis"
"""What "auto" picks where the sampler can differ from the trainer."""


@dataclass(frozen=True)
class ResolvedCorrection:
    """The run's correction: the record, its settings and whether old_logp is rescored."""

    record: Correction
    params: object
    """The `algo.correction` section (`cap`, `veto_threshold`)."""
    recompute: bool
    """Score the rows with the trainer's weights before the update."""
    reason: str
    """Why this mode (for the run log)."""


def sampler_mismatch(engine_cls: type, cfg: TrainConfig) -> str | None:
    """Why `engine_cls`'s sampler can differ from its trainer, or None if it cannot."""
    declared = getattr(engine_cls, "sampler_mismatch", None)
    if declared is None:
        log.warning(
            "engine %s does not declare sampler_mismatch(cfg): algo.correction.mode=auto "
            "treats its sampler as the trainer (no correction); set algo.correction.mode "
            "if it samples with other weights, kernels or dtype",
            engine_cls.__name__,
        )
        return None
    return declared(cfg)


def resolve_correction(
    cfg: TrainConfig, engine_cls: type
) -> tuple[TrainConfig, ResolvedCorrection]:
    """`cfg` with `algo.correction.mode` "auto" replaced by the mode it stands for, and the
    resolved correction; raises `ConfigError` if the engine cannot rescore old_logp."""
    c = cfg.algo.correction
    why = sampler_mismatch(engine_cls, cfg)
    if c.mode == "auto":
        mode = AUTO_MODE if why else "none"
        reason = (
            f"auto: {why}" if why else "auto: sampler and trainer are one model, dtype, version"
        )
    else:
        mode, reason = c.mode, f"set by algo.correction.mode ({why or 'sampler = trainer'})"
    record = get_correction(mode)
    recompute = record.corrects if c.recompute_old_logp is None else c.recompute_old_logp
    if recompute and not callable(getattr(engine_cls, "policy_logp", None)):
        raise ConfigError(
            f"algo.correction.mode={mode!r} needs the trainer's old_logp, but engine "
            f"{engine_cls.__name__} has no policy_logp(batch, temperature): set "
            "algo.correction.mode=none, or give the engine a policy_logp"
        )
    new = replace(c, mode=mode, recompute_old_logp=recompute)
    cfg = replace(cfg, algo=replace(cfg.algo, correction=new))
    log.info(
        "rollout correction: %s (%s)%s; %s",
        mode,
        record.summary,
        ", old_logp rescored by the trainer" if recompute else "",
        reason,
    )
    return cfg, ResolvedCorrection(record, new, recompute, reason)


def correct_rows(
    train: Batch, trainer_logp: torch.Tensor, resolved: ResolvedCorrection
) -> tuple[Batch, dict[str, float]]:
    """`train` with `old_logp` = `trainer_logp` (R, A) and, for a correcting mode,
    `is_weight` (R, A); and the `mismatch/*` metrics of the sampler's `old_logp` against
    the trainer's. `train` is changed in place and returned."""
    rollout_logp = train.tensors["old_logp"]
    mask = train.tensors["response_mask"]
    width = rollout_logp.shape[1]
    trainer_logp = trainer_logp[:, :width].to(rollout_logp.dtype)
    log_ratio = trainer_logp - rollout_logp  # (R, A) log pi_old - log pi_rollout
    out = None
    if resolved.record.corrects:
        out = resolved.record.weigh(log_ratio, mask, resolved.params)
        train["is_weight"] = out.weights
    train["old_logp"] = trainer_logp
    stats = mismatch_metrics(log_ratio, mask, out)
    return train, {f"mismatch/{k}": v for k, v in stats.items()}
