"""Models: tiny presets built from config, any local HF causal LM, critics, LoRA, scoring."""

from arborl.models.loading import (
    DTYPES,
    MODEL_PRESETS,
    ModelPreset,
    build_preset_model,
    load_policy,
    load_tokenizer,
    resolve_dtype,
    save_policy,
    seeded,
)
from arborl.models.lora import apply_lora, merge_lora
from arborl.models.scoring import autocast_ctx, position_ids_from_mask, token_logprobs
from arborl.models.tokenizer import EOS_TOKEN, build_char_tokenizer
from arborl.models.value import ValueModel

__all__ = [
    "DTYPES",
    "EOS_TOKEN",
    "MODEL_PRESETS",
    "ModelPreset",
    "ValueModel",
    "apply_lora",
    "autocast_ctx",
    "build_char_tokenizer",
    "build_preset_model",
    "load_policy",
    "load_tokenizer",
    "merge_lora",
    "position_ids_from_mask",
    "resolve_dtype",
    "save_policy",
    "seeded",
    "token_logprobs",
]
