"""One interface for every generation backend: token ids in, token ids and logprobs out.

The rollout loop works in token ids so that what the model generated is exactly what
training scores (no re-tokenization drift). Backends that only speak text (HTTP APIs)
encode and decode with the policy's tokenizer at their boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class SamplingParams:
    """How to sample one completion per prompt."""

    max_new_tokens: int = 32
    """Largest number of tokens generated for one prompt."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 disables)."""
    stop: list[str] = field(default_factory=list)
    """Stop strings: generation of a row ends once its text contains one (kept in output)."""
    seed: int | None = None
    """Seed for this call; None draws from the backend's own generator."""
    banned_first_tokens: list[int] = field(default_factory=list)
    """Token ids the *first* generated token may not be (later tokens are unrestricted):
    sampling without replacement across calls, e.g. k distinct one-token actions for k
    samples' cost. Logprobs stay those of the full distribution (as with top-k/top-p).
    Only the in-process HF backend supports it; the others raise."""
    row_seeds: list[int] | None = None
    """One seed per prompt (None: derived from `seed` and the row's position). Row i then
    samples from its own stream, whatever its position and whichever prompts share the
    call: what lets the rollout's async mode batch episodes freely yet sample exactly as
    the lockstep mode does (each episode-turn keys its own seed)."""


SEED_STRIDE = 100_003
MAX_SEED = 2**62
"""Per-request seeds stay below this (vLLM's generator takes a signed 64-bit seed)."""


def row_seed(seed: int, row: int) -> int:
    """The seed of row `row` of a call seeded `seed`, for backends that seed each request
    (vLLM, HTTP): one seed for every row would give a whole group the same sample."""
    return (seed * SEED_STRIDE + row) % MAX_SEED


def row_seeds_for(params: SamplingParams, num_rows: int) -> list[int] | None:
    """Each row's seed: `params.row_seeds` (checked), else `row_seed(seed, i)`, else None."""
    if params.row_seeds is None:
        return None if params.seed is None else [row_seed(params.seed, i) for i in range(num_rows)]
    seeds = params.row_seeds
    if len(seeds) != num_rows:
        raise ValueError(
            f"SamplingParams.row_seeds has {len(seeds)} seeds for {num_rows} prompts; give one "
            "per prompt (or None)"
        )
    bad = [
        s for s in seeds if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s < MAX_SEED
    ]
    if bad:
        raise ValueError(f"SamplingParams.row_seeds must be ints in [0, 2**62), got {bad[:3]}")
    return list(seeds)


def eos_token_ids(tokenizer_eos: int | None, config_eos: int | list[int] | None) -> list[int]:
    """The ids that end a turn: the tokenizer's eos, then the model's
    `generation_config.eos_token_id` (an int or a list), each once, in that order."""
    extra = config_eos if isinstance(config_eos, list | tuple) else [config_eos]
    return list(dict.fromkeys(int(t) for t in [tokenizer_eos, *extra] if t is not None))


@dataclass
class Completion:
    """One generated completion."""

    token_ids: list[int]
    """Generated token ids (without the prompt), including a matched stop or EOS token."""
    logprobs: list[float]
    """Log-probability of each generated token under the sampling distribution's model
    (temperature-scaled logits), one per token id."""
    text: str
    """Decoded text of `token_ids`."""
    finish_reason: str
    """'stop' (stop string or EOS) or 'length' (max_new_tokens reached)."""


@runtime_checkable
class GenerationBackend(Protocol):
    """Generate one completion for each prompt (given as token ids)."""

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]: ...
