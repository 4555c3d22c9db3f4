"""A critic: the transformer body of a causal LM plus a scalar value head.

PPO with GAE needs V(s_t) for every token position. The backbone is the `AutoModel` part
of the same architecture as the policy (built from a preset or loaded from a checkpoint,
whose LM-head weights are simply not used), and the head is one linear layer H -> 1.
Saved as an HF backbone directory plus `value_head.safetensors`, so the backbone half
stays loadable by any HF tool.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedModel

from arborl.models.loading import (
    MODEL_PRESETS,
    load_tokenizer,
    resolve_dtype,
    seeded,
)
from arborl.models.scoring import position_ids_from_mask

VALUE_HEAD_FILE = "value_head.safetensors"


class ValueModel(nn.Module):
    """backbone (B, T) ids -> (B, T, H) hidden -> head -> (B, T) values."""

    def __init__(self, backbone: PreTrainedModel, head: nn.Linear | None = None, seed: int = 0):
        super().__init__()
        self.backbone = backbone
        hidden = backbone.config.hidden_size
        if head is None:
            # Small init so initial values are ~0 and early advantages are just returns.
            gen = torch.Generator().manual_seed(seed)
            head = nn.Linear(hidden, 1)
            with torch.no_grad():
                head.weight.copy_(torch.randn(1, hidden, generator=gen) * (0.01 / hidden**0.5))
                head.bias.zero_()
        self.head = head

    @property
    def config(self):
        return self.backbone.config

    @classmethod
    def from_policy_spec(
        cls, name_or_path: str, dtype: str = "float32", seed: int = 0
    ) -> ValueModel:
        """A critic for a preset (fresh, seeded) or a causal-LM / critic directory."""
        if name_or_path in MODEL_PRESETS:
            tokenizer = load_tokenizer(name_or_path)
            config = MODEL_PRESETS[name_or_path].to_config(tokenizer)
            with seeded(seed):
                backbone = AutoModel.from_config(
                    config, dtype=resolve_dtype(dtype), attn_implementation="sdpa"
                )
            return cls(backbone, seed=seed)
        if not Path(name_or_path).is_dir():
            raise ValueError(
                f"critic {name_or_path!r} is neither a preset nor a directory; presets: "
                f"{sorted(MODEL_PRESETS)}"
            )
        return cls.from_pretrained(name_or_path, dtype=dtype, seed=seed)

    @classmethod
    def from_pretrained(cls, directory: str | Path, dtype: str = "float32", seed: int = 0):
        """Load a saved critic, or start one from a causal-LM checkpoint (fresh head)."""
        directory = Path(directory)
        backbone = AutoModel.from_pretrained(directory, dtype=resolve_dtype(dtype))
        model = cls(backbone, seed=seed)
        head_file = directory / VALUE_HEAD_FILE
        if head_file.exists():
            state = load_file(str(head_file))
            model.head.load_state_dict(state)
            model.head.to(resolve_dtype(dtype))
        return model

    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(directory)
        state = {k: v.detach().contiguous() for k, v in self.head.state_dict().items()}
        save_file(state, str(directory / VALUE_HEAD_FILE))
        return directory

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, T) ids -> (B, T) value of each prefix; left padding handled via positions."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        ).last_hidden_state  # (B, T, H)
        return self.head(hidden).squeeze(-1).float()  # (B, T)
