"""`RMTrainConfig`: the settings of `arborl rm train`, importable without torch.

Kept apart from the trainer (`arborl.train.rm`) so that the CLI can build one flag per
field, documented by the field's docstring, without loading torch to print `--help`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RMTrainConfig:
    """Everything `arborl rm train` needs."""

    kind: str = field(default="orm", metadata={"registry": "arborl.train.rm:RM_KINDS"})
    """orm: outcome RM on preference pairs (Bradley-Terry); prm: process RM on step labels."""
    data: str = ""
    """Training records from `arborl rm data`: pairs (.jsonl) for orm, step labels for prm;
    several files joined with commas (`steps.jsonl,siblings.jsonl`)."""
    eval_data: str | None = None
    """Held-out records of the same kind, evaluated at the end (and every `eval_every`)."""
    model: str = "tiny-0.1m"
    """Where the weights start: a tiny preset, any causal-LM checkpoint directory (e.g. the
    SFT policy: its body is kept, a scalar head added) or a saved reward model."""
    out: str = "runs/rm"
    """Output folder: `model/` (the reward model), `metrics.jsonl`, `config.yaml`, `summary.json`."""
    steps: int = field(default=200, metadata={"min": 0})
    """Optimizer steps."""
    batch_size: int = field(default=16, metadata={"min": 1})
    """Pairs (orm) or trajectories (prm) per step."""
    lr: float = field(default=1e-3, metadata={"min": 0.0})
    """Peak learning rate (linear warm-up, then cosine decay to a tenth)."""
    weight_decay: float = field(default=0.0, metadata={"min": 0.0})
    """AdamW weight decay."""
    warmup_steps: int = field(default=10, metadata={"min": 0})
    """Linear warm-up steps."""
    grad_clip: float = field(default=1.0, metadata={"min": 0.0})
    """Max global gradient norm (0 disables)."""
    margin_coef: float = field(default=0.0, metadata={"min": 0.0})
    """orm: Bradley-Terry margin = margin_coef x (return gap of the pair); 0: plain BT."""
    max_length: int = field(default=512, metadata={"min": 8})
    """Context of the reward model in tokens; longer trajectories keep their last tokens."""
    include_instruction: bool = True
    """Show the env's instruction (as a system message) before the first step."""
    max_history_steps: int | None = field(default=None, metadata={"min": 1})
    """Show only the last this many steps (None: all). For Markov envs (Maze) the state is in
    the observation, so a short window loses nothing and trains much faster; a PRM then
    learns and scores every step from its own prefix."""
    score_after_observation: bool = True
    """Read a step's score after the observation that follows it (the state it led to)."""
    eval_every: int = field(default=0, metadata={"min": 0})
    """Evaluate on `eval_data` every this many steps (0: only at the end)."""
    seed: int = 0
    """Seed of the head's initial weights (and a preset's) and of the batch order."""
    num_threads: int | None = field(default=1, metadata={"min": 1})
    """torch intra-op threads (None: torch's default); 1 suits tiny models."""

    def validate(self, prefix: str = "config") -> None:
        if not self.data:
            raise ValueError(
                f"{prefix}.data is empty; pass the {'pairs' if self.kind == 'orm' else 'step-label'}"
                " file written by `arborl rm data`"
            )
