"""One interface for every generation backend: token ids in, token ids and logprobs out.

The rollout engine works in token ids so that what the model generated is exactly what
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


SEED_STRIDE = 100_003
MAX_SEED = 2**62
"""Per-request seeds stay below this (vLLM's generator takes a signed 64-bit seed)."""


def row_seed(seed: int, row: int) -> int:
    """The seed of row `row` of a call seeded `seed`, for backends that seed each request
    (vLLM, HTTP): one seed for every row would give a whole group the same sample."""
    return (seed * SEED_STRIDE + row) % MAX_SEED


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
