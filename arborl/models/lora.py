"""LoRA adapters through peft: train a few rank-r matrices instead of the whole model.

Optional: full fine-tuning of tiny presets is cheap, LoRA matters for real checkpoints.
`save_policy` merges adapters before saving, so checkpoints stay plain HF causal LMs.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch


def apply_lora(
    model: torch.nn.Module,
    r: int = 8,
    alpha: int = 16,
    target_modules: Sequence[str] = ("q_proj", "v_proj"),
    dropout: float = 0.0,
    seed: int = 0,
) -> torch.nn.Module:
    """Wrap `model` with LoRA adapters on `target_modules`; only the adapters train.

    Adapter B matrices start at zero (peft's default), so the wrapped model initially
    computes exactly what `model` did. peft draws the A matrices from torch's global RNG;
    they are drawn here from `seed` (the global RNG is left as it was), so two runs of the
    same config start from the same adapters and a resumed run replays an uninterrupted one.
    """
    from peft import LoraConfig, get_peft_model

    if r <= 0:
        raise ValueError(f"LoRA rank r={r} must be a positive integer (try 8)")
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        target_modules=list(target_modules),
        lora_dropout=dropout,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing`, whose FutureWarning
        # names an attribute the user never touched; only that warning is silenced.
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def merge_lora(model: torch.nn.Module) -> torch.nn.Module:
    """Fold LoRA adapters into the base weights and return the plain base model."""
    if not hasattr(model, "merge_and_unload"):
        raise TypeError(f"merge_lora expects a peft model, got {type(model).__name__}")
    return model.merge_and_unload()
