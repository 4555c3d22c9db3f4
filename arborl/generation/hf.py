"""Batched sampling from an HF causal LM with our own KV-cache loop.

Why not `model.generate`: rollouts need the exact log-probability of every sampled token
(the same number `arborl.models.token_logprobs` recomputes in training), stop strings that
end a row as soon as its text contains them, and rows that finish early dropped from the
batch *and* the cache so the remaining rows run faster. The loop is prefill once, then one
token per step for the rows still running. Prompts that repeat (a GRPO group) are prefilled
once and their cache copied to each row; keys, values and the attention mask live in
buffers sized for the whole generation, so a step writes one column instead of copying all.

Left padding is invisible to the model: position ids count real tokens only (pads sit at
position 0 and are masked), so a prompt gives the same tokens and logprobs alone or inside
a padded batch. Randomness is per prompt too: prompt i draws from its own stream keyed by
(seed, i), so outputs do not depend on `max_batch_size` or on which rows finish first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from arborl.generation.base import Completion, SamplingParams, eos_token_ids, row_seeds_for
from arborl.generation.lean import LeanDecoder, weights_key
from arborl.models.scoring import cache_kwarg, position_ids_from_mask
from arborl.serving.cancel import cancel_point


def check_params(params: SamplingParams) -> None:
    """Reject bad sampling parameters before any work, naming the field and the fix."""
    if params.max_new_tokens < 1:
        raise ValueError(f"SamplingParams.max_new_tokens={params.max_new_tokens} must be >= 1")
    if params.temperature < 0:
        raise ValueError(
            f"SamplingParams.temperature={params.temperature} must be >= 0 (0 = greedy)"
        )
    if not 0 < params.top_p <= 1:
        raise ValueError(f"SamplingParams.top_p={params.top_p} must be in (0, 1] (1 disables)")
    if params.top_k < 0:
        raise ValueError(f"SamplingParams.top_k={params.top_k} must be >= 0 (0 disables)")
    if any(not s for s in params.stop):
        raise ValueError(f"SamplingParams.stop={params.stop!r} contains an empty string")
    if any(not isinstance(t, int) or t < 0 for t in params.banned_first_tokens):
        raise ValueError(
            f"SamplingParams.banned_first_tokens={params.banned_first_tokens!r} must be "
            "non-negative token ids"
        )


def refuse_banned_first_tokens(params: SamplingParams, backend: str) -> None:
    """Backends that cannot restrict only the first token say so instead of ignoring it."""
    if params.banned_first_tokens:
        raise ValueError(
            f"SamplingParams.banned_first_tokens is not supported by the {backend} backend "
            "(it cannot restrict only the first token); use the in-process HF backend, or "
            "a proposer without distinct=True"
        )


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    uniforms: torch.Tensor | None = None,
    banned: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) logits and (B,) uniforms in [0, 1) -> (B,) chosen ids and (B,) logprobs.
    `banned` ids are never chosen (their logprob stays in the full distribution's).

    Sampling is by inverse CDF with one uniform per row, so a row's draw never depends on
    which other rows share its batch. The logprob is log_softmax(logits / temperature) at
    the chosen id (raw logits when greedy), taken *before* top-k/top-p truncation: it is the
    number training recomputes from the full distribution, not the renormalised one.
    """
    logits = logits.float()
    if banned and len(banned) >= logits.shape[-1]:
        raise ValueError(f"all {logits.shape[-1]} token ids are banned; nothing to sample")
    if params.temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        allowed = logits.index_fill(-1, _ids(banned, logits), float("-inf")) if banned else logits
        chosen = allowed.argmax(dim=-1)  # (B,)
        return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)
    if uniforms is None:
        raise ValueError("sample_next needs uniforms when temperature > 0")
    scaled = logits / params.temperature if params.temperature != 1.0 else logits  # (B, V)
    logp = torch.log_softmax(scaled, dim=-1)
    filtered = scaled.index_fill(-1, _ids(banned, scaled), float("-inf")) if banned else scaled
    if 0 < params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k, dim=-1).values[:, -1:]  # (B, 1)
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass before it already reaches top_p (the top one stays).
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    # Untruncated: the softmax is exp(logp), already at hand.
    probs = logp.exp() if filtered is scaled else torch.softmax(filtered, dim=-1)
    cdf = probs.cumsum(dim=-1)  # (B, V)
    # side="right": the first id whose CDF exceeds u, which never lands on a zero-prob id.
    target = (uniforms.to(cdf) * cdf[:, -1]).unsqueeze(-1)  # (B, 1)
    chosen = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
    return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)


def _ids(ids: list[int] | None, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(ids or [], dtype=torch.long, device=like.device)


def row_uniforms(base_seed: int, num_rows: int, num_steps: int) -> torch.Tensor:
    """(num_rows, num_steps) uniforms; row i depends only on (base_seed, i)."""
    # Knuth multiplicative mix keeps nearby (seed, row) pairs on unrelated streams.
    mix = [
        (base_seed * 0x9E3779B97F4A7C15 + i * 0xBF58476D1CE4E5B9) % (2**63) for i in range(num_rows)
    ]
    return seeded_uniforms(mix, num_steps)


def seeded_uniforms(seeds: list[int], num_steps: int) -> torch.Tensor:
    """(len(seeds), num_steps) uniforms, row i from a generator seeded `seeds[i]` (a row's
    first k draws are the same whatever num_steps is)."""
    out = torch.empty(len(seeds), num_steps)
    for i, seed in enumerate(seeds):
        out[i] = torch.rand(num_steps, generator=torch.Generator().manual_seed(seed))
    return out


class _BufferLayer(DynamicLayer):
    """A `DynamicLayer` that writes each step's keys and values into a buffer sized for the
    whole generation, where `DynamicLayer` concatenates (copying the layer's full cache at
    every token). `keys` / `values` are views of the filled part, so the model sees the
    same tensors as with `DynamicLayer`."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            b, h, _, _ = key_states.shape  # (B, H, T, D)
            self._keys = key_states.new_empty((b, h, self.capacity, key_states.shape[-1]))
            self._values = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))
            self.device, self.is_initialized = key_states.device, True
        end = self.length + key_states.shape[-2]
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def adopt(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Take ready buffers (B, H, capacity, D) whose first `length` positions are filled."""
        self._keys, self._values = keys, values
        self.device, self.is_initialized, self.length = keys.device, True, length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys = self._keys[:, :, : self.length]
            self.values = self._values[:, :, : self.length]


def _make_cache(model: torch.nn.Module, capacity: int) -> DynamicCache:
    """The model's own `DynamicCache` layout, with its full-attention layers buffered
    (sliding-window or other special layers stay as transformers builds them)."""
    cache = DynamicCache(config=model.config)
    if not cache.layers:  # no per-layer layout known: let the cache grow buffered layers
        cache.layer_class_to_replicate = lambda: _BufferLayer(capacity)
    cache.layers = [_BufferLayer(capacity) if type(x) is DynamicLayer else x for x in cache.layers]
    return cache


MAX_ENCODED_BYTES = 256 * 2**20
"""Remembered prompt keys and values an `HFBackend` keeps before it starts afresh."""
ENCODE_CHUNK_TOKENS = 4096
"""Padded prompt tokens per forward when prompts are encoded: they go in length order, in
chunks, so a short prompt is padded to its neighbours' length, not the batch's longest (one
forward over a BabyAI turn padded 35-token views to 110, half of it pads)."""


@dataclass
class _Row:
    """Book-keeping of one prompt while it generates."""

    budget: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = ""


class HFBackend:
    """`GenerationBackend` over an in-process HF causal LM (batched, KV cache, pruning).

    `lean_decode=False` runs every decode step through the model's HF forward, even where
    `LeanDecoder` can stand in for it (same numbers to float rounding; for comparisons).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        device: str = "cpu",
        max_batch_size: int = 64,
        seed: int = 0,
        skip_special_tokens: bool = False,
        lean_decode: bool = True,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.skip_special_tokens = skip_special_tokens
        """Decode `Completion.text` without special tokens (ids always keep them)."""
        self._generator = torch.Generator().manual_seed(seed)
        cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        # sorted: the pad fallback below takes the smallest id, as it always has
        self.eos_token_ids = sorted(eos_token_ids(tokenizer.eos_token_id, cfg_eos))
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        self.max_length = getattr(model.config, "max_position_embeddings", None) or 10**9
        self._cache_kwarg = cache_kwarg(model)
        # With sdpa and full attention only, a decode step's mask is just the padding mask
        # (the one query token is the newest key), so the loop passes it ready-made in 4D
        # and transformers skips building one per step.
        cfg = model.config
        types = getattr(cfg, "layer_types", None)
        full_only = all(t == "full_attention" for t in types) if types else True
        full_only = full_only and not (types is None and getattr(cfg, "sliding_window", None))
        self._mask_4d = getattr(cfg, "_attn_implementation", None) == "sdpa" and full_only
        # Prompt encodings are remembered across calls where every layer is a plain
        # full-attention one (its cache is then just keys and values per position).
        probe = _make_cache(model, 1)
        self._remember_prompts = full_only and all(
            isinstance(x, _BufferLayer) for x in probe.layers
        )
        self._remember_prompts = self._remember_prompts and bool(probe.layers)
        # Decode steps skip the HF module tree where `LeanDecoder` reproduces the forward
        # (it writes into the buffered cache layers, which remembered prompts guarantee,
        # and takes the ready 4D boolean mask).
        self._lean = None
        if lean_decode and self._remember_prompts and self._mask_4d and LeanDecoder.supports(model):
            self._lean = LeanDecoder(model)
        self._encoded: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
        self._encoded_key: tuple = ()
        self._encoded_bytes = 0

    def state_dict(self) -> dict:
        """The backend's random state (draws made for unseeded requests), for checkpoints."""
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        self._generator.set_state(state["generator"])

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order. Same `params.seed` -> same outputs."""
        check_params(params)
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"prompts[{i}] is empty; give at least one token (e.g. BOS)")
            if len(p) >= self.max_length:
                raise ValueError(
                    f"prompts[{i}] has {len(p)} tokens, the model's limit is {self.max_length}"
                    " (max_position_embeddings); shorten the prompt"
                )
        # Each prompt gets its own random stream, keyed by `params.row_seeds[i]` or else by
        # (seed, position in `prompts`), so outputs do not depend on batch size, batching
        # order or the other prompts.
        # Never more columns than any row can use: a huge max_new_tokens must not allocate
        # rows x max_new_tokens floats before the per-row clamp to the model length.
        width = min(params.max_new_tokens, self.max_length - min(map(len, prompts), default=0))
        if params.row_seeds is not None:  # each row its own stream, whatever its position
            uniforms = seeded_uniforms(row_seeds_for(params, len(prompts)), width)
        else:
            base_seed = params.seed
            if base_seed is None:
                base_seed = int(torch.randint(2**62, (1,), generator=self._generator))
            uniforms = row_uniforms(base_seed, len(prompts), width)
        # Similar lengths together means less padding; results go back in input order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        for start in range(0, len(order), self.max_batch_size):
            idx = order[start : start + self.max_batch_size]
            batch = self._generate_batch([prompts[i] for i in idx], params, uniforms[idx])
            for i, c in zip(idx, batch):
                results[i] = c
        return results  # type: ignore[return-value]

    @torch.inference_mode()
    def _generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, uniforms: torch.Tensor
    ) -> list[Completion]:
        num_rows, width = len(prompts), max(len(p) for p in prompts)
        rows = [_Row(min(params.max_new_tokens, self.max_length - len(p)), [], []) for p in prompts]
        max_new = max(row.budget for row in rows)
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=self.device)
        cache, logits, mask, next_pos = self._prefill(prompts, width, width + max_new)
        # The mask of every token yet to come is 1 (finished rows are dropped or skipped), so
        # it is allocated once and each step passes a longer view of it.
        mask = torch.cat([mask, mask.new_ones(num_rows, max_new)], dim=1)  # (B, T + N)
        if self._mask_4d:
            mask = mask.bool()[:, None, None, :]  # (B, 1, 1, T + N)
        rope = None
        if self._lean is not None:
            self._lean.refresh()
            rope = self._lean.rotary(width + max_new)
        active = list(range(num_rows))  # original row of each batch row
        step = 0
        while True:
            cancel_point()  # a server's request whose client left, or over its time, ends here
            u = uniforms[active, step]  # (b,)
            banned = params.banned_first_tokens if step == 0 else None
            chosen, logp = sample_next(logits, params, u, banned)  # (b,), (b,)
            step += 1
            is_eos = torch.isin(chosen, eos).tolist() if len(eos) else [False] * len(active)
            keep: list[int] = []
            for b, (r, t, lp) in enumerate(zip(active, chosen.tolist(), logp.tolist())):
                row = rows[r]
                if row.finish_reason:  # finished, waiting for the next prune
                    continue
                row.token_ids.append(t)
                row.logprobs.append(lp)
                if is_eos[b] or (params.stop and self._hit_stop(row.token_ids, params.stop)):
                    row.finish_reason = "stop"
                elif len(row.token_ids) >= row.budget:
                    row.finish_reason = "length"
                else:
                    keep.append(b)
            if not keep:
                break
            # Pruning copies the whole cache, so wait until it removes >= 1/8 of the rows.
            if len(active) - len(keep) >= max(1, len(active) // 8):
                sel = torch.tensor(keep, dtype=torch.long, device=self.device)
                cache.batch_select_indices(sel)
                mask, next_pos, chosen = mask[sel], next_pos[sel], chosen[sel]
                active = [active[b] for b in keep]
            logits = self._decode_step(chosen, next_pos, mask[..., : width + step], cache, rope)
            next_pos = next_pos + 1
        return [
            Completion(
                token_ids=row.token_ids,
                logprobs=row.logprobs,
                text=self.tokenizer.decode(
                    row.token_ids, skip_special_tokens=self.skip_special_tokens
                ),
                finish_reason=row.finish_reason,
            )
            for row in rows
        ]

    def _decode_step(self, ids, positions, mask, cache, rope) -> torch.Tensor:
        """(b,) ids at (b,) positions -> (b, V) next-token logits, extending `cache`;
        mask: (b, [1, 1,] T) over the cache after this token."""
        if self._lean is not None:
            return self._lean.step(ids, positions, mask, cache.layers, rope)
        return self.model(
            input_ids=ids[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            use_cache=True,
            **{self._cache_kwarg: cache},
        ).logits[:, -1]

    def forget_prompts(self) -> None:
        """Drop the remembered prompt encodings. Callers that want a rollout's numbers to
        depend on its own calls only (a resumed run replays bit for bit) call this first:
        an encoding made inside another batch can differ in float rounding."""
        self._encoded, self._encoded_key, self._encoded_bytes = {}, (), 0

    def _left_padded(self, prompts: list, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, attention mask) of `prompts` left-padded to `width`, on the model's device."""
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[r, width - len(p) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _encode_prompts(self, prompts: list[tuple[int, ...]]) -> None:
        """Encode `prompts` and remember each one's keys, values (real positions only) and
        last logits in `self._encoded`: in length order, in left-padded chunks of at most
        `ENCODE_CHUNK_TOKENS` padded tokens (a longer prompt gets a chunk of its own)."""
        ordered = sorted(prompts, key=len)
        start = 0
        for end in range(1, len(ordered) + 1):
            if end == len(ordered) or (end + 1 - start) * len(ordered[end]) > ENCODE_CHUNK_TOKENS:
                self._encode_chunk(ordered[start:end])
                start = end

    def _encode_chunk(self, prompts: list[tuple[int, ...]]) -> None:
        width = max(map(len, prompts))
        ids, mask = self._left_padded(prompts, width)
        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=position_ids_from_mask(mask),
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        ).logits[:, -1]  # (U, V)
        for r, p in enumerate(prompts):
            n = len(p)
            kv = torch.stack(
                [
                    torch.stack([x.keys[r, :, width - n :], x.values[r, :, width - n :]])
                    for x in cache.layers
                ]
            )  # (layers, 2, H, n, D)
            self._encoded[p] = (kv, logits[r].clone())
            self._encoded_bytes += kv.nbytes

    def _prefill_remembered(self, prompts: list[list[int]], width: int, capacity: int):
        """`_prefill` from remembered prompt encodings: within an RL step the weights stay
        put while the same states come back turn after turn, so each distinct prompt is
        encoded once (per weights) and its keys and values are copied into place."""
        key = weights_key(self.model)
        if key != self._encoded_key or self._encoded_bytes > MAX_ENCODED_BYTES:
            self._encoded, self._encoded_key, self._encoded_bytes = {}, key, 0
        rows = [tuple(p) for p in prompts]
        missing = [p for p in dict.fromkeys(rows) if p not in self._encoded]
        if missing:
            self._encode_prompts(missing)
        kv0 = self._encoded[rows[0]][0]  # (layers, 2, H, n, D)
        num_layers, _, heads, _, dim = kv0.shape
        # Each row's keys and values go straight into place in buffers sized for the whole
        # generation: one copy per row, no batch-sized intermediate. Left pads are zeroed
        # (masked, but sdpa multiplies them by 0, so they must be finite).
        buf = kv0.new_empty((num_layers, 2, len(rows), heads, capacity, dim))
        for b, p in enumerate(rows):
            start = width - len(p)
            buf[:, :, b, :, start:width] = self._encoded[p][0]
            if start:
                buf[:, :, b, :, :start] = 0
        cache = _make_cache(self.model, capacity)
        for layer_idx, layer in enumerate(cache.layers):
            layer.adopt(buf[layer_idx, 0], buf[layer_idx, 1], width)
        mask = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for b, p in enumerate(rows):
            mask[b, width - len(p) :] = 1
        logits = torch.stack([self._encoded[p][1] for p in rows])  # (B, V)
        next_pos = torch.tensor([len(p) for p in rows], device=self.device)  # (B,)
        return cache, logits, mask, next_pos

    def _prefill(self, prompts: list[list[int]], width: int, capacity: int):
        """Prefill each distinct prompt once, left-padded to `width`, then index the cache,
        last logits, mask and next positions out to every row: GRPO groups repeat each
        prompt `group_size` times, and a row's numbers do not depend on its batch."""
        if self._remember_prompts:
            return self._prefill_remembered(prompts, width, capacity)
        index: dict[tuple[int, ...], int] = {}
        inverse = [index.setdefault(tuple(p), len(index)) for p in prompts]
        ids, mask = self._left_padded(list(index), width)
        positions = position_ids_from_mask(mask)  # (U, T)
        cache = _make_cache(self.model, capacity)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        ).logits[:, -1]  # (U, V)
        next_pos = positions[:, -1] + 1  # (U,)
        if len(index) < len(prompts):
            rows = torch.tensor(inverse, dtype=torch.long, device=self.device)  # (B,)
            cache.batch_select_indices(rows)
            logits, mask, next_pos = logits[rows], mask[rows], next_pos[rows]
        return cache, logits, mask, next_pos

    def _hit_stop(self, token_ids: list[int], stop: list[str]) -> bool:
        """Whether the text of `token_ids` holds a stop string (which the newest token
        completed, since this runs after every token)."""
        # Every token holds at least one byte, but byte-level BPE splits a character into up
        # to 4 tokens (GPT-2 spells each 🌲 as 3), so the window counts the stop strings'
        # UTF-8 bytes, not their characters: a 3-emoji stop string is 9 tokens.
        window = max(len(s.encode("utf-8")) for s in stop) + 4
        tail = self.tokenizer.decode(token_ids[-window:], skip_special_tokens=False)
        return any(s in tail for s in stop)
