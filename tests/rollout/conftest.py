"""Shared fixtures: the real tiny preset policy and a counting wrapper around its backend."""

import pytest

from arborl.generation.hf import HFBackend
from arborl.models import load_policy


class CountingBackend:
    """Forwards to a real backend and records how many prompts each call carried, and
    every (prompt ids, completion) pair it served (what was sent, what was sampled)."""

    def __init__(self, inner):
        self.inner = inner
        self.prompts_per_call: list[int] = []
        self.params: list = []
        self.served: list[tuple[list[int], object]] = []
        self.max_length = getattr(inner, "max_length", None)
        self.eos_token_ids = getattr(inner, "eos_token_ids", None)

    def generate(self, prompts, params):
        self.prompts_per_call.append(len(prompts))
        self.params.append(params)
        out = self.inner.generate(prompts, params)
        self.served += [(list(p), c) for p, c in zip(prompts, out)]
        return out


@pytest.fixture(scope="session")
def policy():
    """(model, tokenizer) of `tiny-0.1m`, seeded weights."""
    model, tok = load_policy("tiny-0.1m", seed=0)
    model.eval()
    return model, tok


@pytest.fixture
def backend(policy):
    model, tok = policy
    return CountingBackend(HFBackend(model, tok, seed=0))
