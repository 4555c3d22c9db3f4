"""A lean decode step for Llama-family models: the HF module's own weights, fewer ops.

On a small model a decode step's cost is not the matmuls but the forward's Python: dozens
of module calls, keyword plumbing, mask and cache bookkeeping per layer and token. This
step computes exactly what `LlamaForCausalLM` / `Qwen2ForCausalLM` compute for one new
token per row, as a flat sequence of tensor ops over the module's parameters: q, k and v
in one matmul (their weights concatenated, cached per weights version), gate and up in
one, rotary tables built once per call by the model's own rotary module, keys and values
written into the backend's preallocated buffers, sdpa called directly (grouped-query heads
packed as transformers packs them for one query token). Numbers equal the HF forward's
to float rounding (`tests/generation/test_lean.py`).

Only configurations it reproduces are taken (`LeanDecoder.supports`); anything else (other
architectures, peft wrappers, sliding windows, QK norms, dynamic RoPE, eager attention)
decodes through the HF forward, as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED_CLASSES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
"""Model classes (exact type names; subclasses may change the forward) the lean step runs."""

STATIC_ROPE_TYPES = ("default", "linear", "llama3")
"""RoPE types whose frequencies do not depend on the sequence length, so one table serves
every position of a call."""


def weights_key(model: torch.nn.Module) -> tuple:
    """Changes whenever a parameter is written in place (an optimizer step, a
    `load_state_dict`) or replaced: anything derived from the weights is then stale."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why the lean step cannot stand in for `model`'s forward (None when it can)."""
    name = type(model).__name__
    if name not in SUPPORTED_CLASSES:
        return f"model class {name} (lean step: {SUPPORTED_CLASSES})"
    cfg = model.config
    if getattr(cfg, "_attn_implementation", None) != "sdpa":
        return f"attention implementation {getattr(cfg, '_attn_implementation', None)!r}"
    if getattr(cfg, "attention_dropout", 0.0):
        return "attention dropout"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"activation {getattr(cfg, 'hidden_act', None)!r}"
    types = getattr(cfg, "layer_types", None) or ["full_attention"]
    if any(t != "full_attention" for t in types) or getattr(cfg, "use_sliding_window", False):
        return "sliding-window layers"
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in STATIC_ROPE_TYPES:
        return f"rope type {rope!r}"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    for layer in model.model.layers:
        known = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
        if set(dict(layer.named_children())) != known:
            return f"decoder layer parts {sorted(dict(layer.named_children()))}"
        attn_parts = set(dict(layer.self_attn.named_children()))
        if attn_parts != {"q_proj", "k_proj", "v_proj", "o_proj"}:
            return f"attention parts {sorted(attn_parts)}"
    return None


class LeanDecoder:
    """One-token-per-row decode steps over a supported HF causal LM's weights.

    `refresh()` (cheap when nothing changed) re-reads the weights after an optimizer step
    or a `load_state_dict`; `rotary` builds a call's cos/sin tables; `step`
    runs one decode step against `_BufferLayer`-style caches (attributes `_keys`, `_values`
    of shape (B, Hkv, capacity, D) and `length`).
    """

    def __init__(self, model: torch.nn.Module):
        reason = _unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}; use its forward")
        self.model = model
        cfg = model.config
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.scale = self.head_dim**-0.5
        self._key: tuple = ()
        self._layers: list[tuple] = []

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        """Whether the lean step reproduces `model`'s forward."""
        return _unsupported_reason(model) is None

    def refresh(self) -> None:
        """Rebuild the concatenated weights if any parameter changed since the last call."""
        key = weights_key(self.model)
        if key == self._key:
            return
        self._layers = [self._layer_weights(layer) for layer in self.model.model.layers]
        self._key = key

    @staticmethod
    def _layer_weights(layer: torch.nn.Module) -> tuple:
        attn, mlp = layer.self_attn, layer.mlp
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        qkv_w = torch.cat([p.weight.detach() for p in projections])  # (Hq D + 2 Hkv D, C)
        qkv_b = None
        if attn.q_proj.bias is not None:
            qkv_b = torch.cat([p.bias.detach() for p in projections])
        gate_up_w = torch.cat([mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()])
        gate_up_b = None
        if mlp.gate_proj.bias is not None:
            gate_up_b = torch.cat([mlp.gate_proj.bias.detach(), mlp.up_proj.bias.detach()])
        return (
            layer.input_layernorm,
            qkv_w,
            qkv_b,
            attn.o_proj,
            layer.post_attention_layernorm,
            gate_up_w,
            gate_up_b,
            mlp.down_proj,
        )

    def rotary(self, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(capacity, D) cos and sin of positions 0..capacity-1, from the model's own
        rotary module (elementwise in the position, so a table equals per-step calls), in
        the dtype of the model's hidden states, as the HF forward makes them."""
        like = self.model.model.embed_tokens.weight  # the rotary module reads dtype and device
        positions = torch.arange(capacity, device=like.device)[None]  # (1, capacity)
        cos, sin = self.model.model.rotary_emb(like, position_ids=positions)
        return cos[0], sin[0]

    def step(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        layers: list,
        rope: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """(b,) next ids at (b,) positions -> (b, V) logits, appending their keys and values.

        mask: (b, 1, 1, L) bool over the cache after this token (L = length + 1);
        layers: one cache layer per decoder layer, each holding `length` positions.
        """
        m = self.model.model
        h = m.embed_tokens(input_ids)[:, None]  # (b, 1, C)
        cos, sin = rope[0][positions][:, None, None], rope[1][positions][:, None, None]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        b = h.shape[0]
        for (norm1, qkv_w, qkv_b, o_proj, norm2, gu_w, gu_b, down), cache in zip(
            self._layers, layers
        ):
            qkv = F.linear(norm1(h), qkv_w, qkv_b).view(b, 1, hq + 2 * hkv, d).transpose(1, 2)
            qk = qkv[:, : hq + hkv]  # (b, Hq + Hkv, 1, D): rotated together
            half = d // 2
            rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
            qk = qk * cos + rotated * sin
            t = cache.length
            cache._keys[:, :, t] = qk[:, hq:, 0]
            cache._values[:, :, t] = qkv[:, hq + hkv :, 0]
            cache.length = t + 1
            keys, values = cache._keys[:, :, : t + 1], cache._values[:, :, : t + 1]
            cache.keys, cache.values = keys, values
            # Grouped heads: each kv head's query heads act as its query positions.
            q = qk[:, :hq].reshape(b, hkv, hq // hkv, d)  # (b, Hkv, G, D)
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale)
            h = h + o_proj(attn.reshape(b, 1, hq * d))
            gate, up = F.linear(norm2(h), gu_w, gu_b).chunk(2, dim=-1)
            h = h + down(F.silu(gate) * up)
        return self.model.lm_head(m.norm(h))[:, 0]  # (b, V)
