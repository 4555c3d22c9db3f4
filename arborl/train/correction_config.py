"""The `algo.correction` section: which rollout correction a run applies (docs/training.md,
"Off-policy and mismatch"). Kept apart from the runtime (`arborl.train.correction`) so a
bad key fails at config load, before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass, field

from arborl.config import ConfigError


@dataclass
class CorrectionConfig:
    """Rollout correction for a sampler that is not the trainer (vLLM, async, dtype)."""

    mode: str = field(
        default="auto",
        metadata={"registry": "arborl.algos.correction:CORRECTIONS", "also": ("auto",)},
    )
    """A name of `arborl.algos.correction.CORRECTIONS` (none, token_tis, seq_tis, seq_mis,
    geo_veto; plug-ins: an `arborl.corrections` entry point or `pkg.module:record`), or
    "auto": token_tis where the engine's sampler can differ from the trainer (the vLLM
    engine; `ray.one_step_off`), none where sampler and trainer are the same model, dtype
    and weight version (the local engine). The run log says which and why."""
    cap: float = field(default=2.0, metadata={"min": 1.0})
    """Upper bound of an IS weight: token_tis and seq_tis truncate at it, seq_mis masks the
    sequences above it (verl's default threshold 2.0; TRL's cap 3.0)."""
    veto_threshold: float = field(default=1.01, metadata={"min": 1.0})
    """geo_veto: a sequence whose geometric-mean ratio pi_old / pi_rollout lies outside
    [1 / veto_threshold, veto_threshold] is left out of the loss (verl: 1.0002 to 1.001)."""
    recompute_old_logp: bool | None = None
    """Score the step's rows with the trainer's weights before the update and use that as
    `old_logp` (the decoupled form: PPO ratio pi_theta / pi_old, correction pi_old /
    pi_rollout; one extra forward a step), logging the mismatch. None: when the mode
    corrects. True with mode none measures the mismatch but anchors PPO on the trainer
    without weights (biased under a real mismatch: for measuring only). False with a
    correcting mode is an error (its weights need pi_old)."""

    def validate(self, prefix: str = "algo.correction") -> None:
        if self.recompute_old_logp is False and self.mode not in ("none", "auto"):
            raise ConfigError(
                f"{prefix}.recompute_old_logp=false but {prefix}.mode={self.mode!r} weighs "
                "the loss by pi_old / pi_rollout, which needs the trainer's old_logp: drop "
                f"{prefix}.recompute_old_logp (or set it true), or set {prefix}.mode=none"
            )
