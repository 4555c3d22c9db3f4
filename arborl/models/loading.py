"""Load a policy: a tiny preset built from config (no download) or any local HF causal LM.

Presets are the default everywhere in arborl (tests, laptop runs): a `ModelPreset` is a
handful of sizes turned into a Llama/Qwen2 config around one of two offline tokenizers,
arborl's character tokenizer (`tiny-*`) or GPT-2's byte-level BPE with a ChatML template
(`bpe-tiny-*`: real BPE behaviour, where decoded text does not re-encode to the sampled
ids), or a small BPE learned from the env packages' text (`envbpe-tiny-*`: short prompts). Weight init is seeded inside `torch.random.fork_rng`, so the same seed gives the same
weights without touching the caller's global RNG state.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from arborl.models.pretrained import PRETRAINED, resolve_checkpoint
from arborl.registry import Registry

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

PRESET_TOKENIZERS: Registry = Registry("ModelPreset.tokenizer", error=ValueError)
"""Tokenizer kinds a preset is built around: `build(extra_tokens=...) -> tokenizer`."""
PRESET_TOKENIZERS.register("char", "arborl.models.tokenizer:build_char_tokenizer")
PRESET_TOKENIZERS.register("gpt2-bpe", "arborl.models.bpe:build_gpt2_bpe_tokenizer")
PRESET_TOKENIZERS.register("env-bpe", "arborl.models.env_bpe:build_env_bpe_tokenizer")


@dataclass(frozen=True)
class ModelPreset:
    """Sizes of a tiny causal LM built from config around an offline tokenizer."""

    model_type: str
    """Hugging Face `model_type` ("llama" or "qwen2")."""
    hidden_size: int
    """Width of the residual stream."""
    num_layers: int
    """Number of transformer blocks."""
    num_heads: int
    """Attention heads (query)."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention)."""
    ffn_size: int
    """Width of the MLP's hidden layer."""
    tie_embeddings: bool = True
    """Share the input embedding and the LM head."""
    max_position_embeddings: int = 1024
    """Longest sequence (prompt + generation) the model accepts."""
    tokenizer: str = "char"
    """The tokenizer, a name of `PRESET_TOKENIZERS`: "char" (arborl's character tokenizer,
    ~110 ids, `<|user|>...<|end|>` turns), "gpt2-bpe" (GPT-2's byte-level BPE, 50,259 ids
    with the ChatML specials, `<|im_start|>user...<|im_end|>` turns; `arborl.models.bpe`) or
    "env-bpe" (a 1,585-id byte-level BPE learned from the env packages' text, the char
    tokenizer's turns; `arborl.models.env_bpe`)."""

    def __post_init__(self) -> None:
        PRESET_TOKENIZERS.get(self.tokenizer)  # an unknown kind fails here, listing the known

    def build_tokenizer(self, extra_tokens: tuple[str, ...] = ()) -> PreTrainedTokenizerBase:
        """A fresh tokenizer of this preset's kind, its vocabulary extended by `extra_tokens`."""
        return PRESET_TOKENIZERS.get(self.tokenizer)(extra_tokens=extra_tokens)

    def to_config(self, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        """The HF config for this preset with vocabulary and special ids from `tokenizer`."""
        return AutoConfig.for_model(
            self.model_type,
            vocab_size=len(tokenizer),
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            intermediate_size=self.ffn_size,
            tie_word_embeddings=self.tie_embeddings,
            max_position_embeddings=self.max_position_embeddings,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )


MODEL_PRESETS: dict[str, ModelPreset] = {
    "tiny-0.1m": ModelPreset("llama", 64, 2, 4, 2, 256),
    "tiny-1m": ModelPreset("llama", 128, 4, 4, 2, 512),
    "qwen-tiny-1m": ModelPreset("qwen2", 128, 4, 4, 2, 512),
    "tiny-20m": ModelPreset("llama", 512, 6, 8, 4, 1536, tie_embeddings=False),
    # The same bodies over GPT-2's BPE: the 50,259-row (tied) embedding adds 3.2M / 6.4M.
    "bpe-tiny-0.1m": ModelPreset("llama", 64, 2, 4, 2, 256, tokenizer="gpt2-bpe"),
    "bpe-tiny-1m": ModelPreset("llama", 128, 4, 4, 2, 512, tokenizer="gpt2-bpe"),
    # For the real-benchmark packages: their words are single tokens, a BabyAI view is
    # ~40-60 tokens instead of ~250 characters, and the embedding stays small (+0.1M / 0.2M).
    "envbpe-tiny-0.1m": ModelPreset("llama", 64, 2, 4, 2, 256, tokenizer="env-bpe"),
    "envbpe-tiny-1m": ModelPreset("llama", 128, 4, 4, 2, 512, tokenizer="env-bpe"),
}
"""Preset name -> sizes and tokenizer. The name gives the body's size (attention and MLP
weights); `tiny-*` use the char tokenizer, `bpe-tiny-*` GPT-2's BPE, `envbpe-tiny-*` the
env packages' BPE."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Map "float32"/"bfloat16"/"float16" (or a torch.dtype) to a torch.dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block under `torch.manual_seed(seed)` and restore the global CPU RNG after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _unknown_spec(name_or_path: str) -> ValueError:
    return ValueError(
        f"model {name_or_path!r} is neither a preset, a pretrained name nor a directory; "
        f"presets: {sorted(MODEL_PRESETS)}, pretrained: {sorted(PRETRAINED)}, or pass the "
        "path of a Hugging Face checkpoint directory or of a .gguf file"
    )


def load_tokenizer(
    name_or_path: str, extra_tokens: tuple[str, ...] = ()
) -> PreTrainedTokenizerBase:
    """The tokenizer of a preset (its `ModelPreset.tokenizer` kind) or of a checkpoint dir.

    Checkpoint tokenizers are switched to left padding (what batched generation needs) and
    get `pad = eos` when they define no pad token.
    """
    if name_or_path in MODEL_PRESETS:
        return MODEL_PRESETS[name_or_path].build_tokenizer(tuple(extra_tokens))
    name_or_path = resolve_checkpoint(name_or_path)
    if not Path(name_or_path).is_dir():
        raise _unknown_spec(name_or_path)
    tok = _load_saved_tokenizer(Path(name_or_path))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


# Saved by a generic fast tokenizer (arborl's char and BPE tokenizers, most exports): reload
# it as exactly that. AutoTokenizer would, for some model types (`qwen2` in transformers 5),
# ignore tokenizer.json and build the model family's own class with its own regex and
# normalizer, silently changing the ids (a char tokenizer then drops every space).
GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _load_saved_tokenizer(directory: Path) -> PreTrainedTokenizerBase:
    config_path = directory / "tokenizer_config.json"
    saved_class = ""
    if config_path.is_file() and (directory / "tokenizer.json").is_file():
        saved_class = json.loads(config_path.read_text()).get("tokenizer_class") or ""
    if saved_class in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(directory)
    return AutoTokenizer.from_pretrained(directory)


def build_preset_model(
    name: str, tokenizer: PreTrainedTokenizerBase, dtype: str = "float32", seed: int = 0
) -> PreTrainedModel:
    """A freshly initialised preset model whose weights depend only on `seed`."""
    if name not in MODEL_PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {sorted(MODEL_PRESETS)}")
    config = MODEL_PRESETS[name].to_config(tokenizer)
    with seeded(seed):
        model = AutoModelForCausalLM.from_config(
            config, dtype=resolve_dtype(dtype), attn_implementation="sdpa"
        )
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def load_policy(
    name_or_path: str,
    dtype: str = "float32",
    seed: int = 0,
    extra_tokens: tuple[str, ...] = (),
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Return `(model, tokenizer)` for a preset name or a local HF causal-LM directory.

    A preset is built from config with weights seeded by `seed` (and a vocabulary extended
    by `extra_tokens`); a directory is loaded with `AutoModelForCausalLM`/`AutoTokenizer`
    (`seed` and `extra_tokens` are then ignored). `dtype` is the weights' dtype; for mixed
    precision keep float32 weights and wrap compute in `autocast_ctx("bfloat16")`.
    """
    tokenizer = load_tokenizer(name_or_path, extra_tokens)
    if name_or_path in MODEL_PRESETS:
        return build_preset_model(name_or_path, tokenizer, dtype, seed), tokenizer
    name_or_path = resolve_checkpoint(name_or_path)  # a PRETRAINED name or a .gguf file
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=resolve_dtype(dtype))
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


@contextlib.contextmanager
def quiet_saves() -> Iterator[None]:
    """No Hugging Face "Writing model shards" bar while arborl saves a model (a checkpoint
    every `trainer.save_every` steps would print one under the run's own bar each time)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def save_policy(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, directory: str | Path
) -> Path:
    """Save model and tokenizer in HF format so `load_policy(directory)` reloads them.

    A LoRA (peft) model is merged into a copy of its base model first, so the directory is
    a plain causal LM that any HF tool (or vLLM) can load without peft.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):  # peft.PeftModel
        model = copy.deepcopy(model).merge_and_unload()
    with quiet_saves():
        model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
