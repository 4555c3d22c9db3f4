"""VLLMBackend: the missing-package error, and the argument/output mapping.

vLLM cannot run on CPU-only machines, so the second test injects a small fake `vllm`
module into `sys.modules`. It is the only fake in the suite and checks only what arborl
sends to vLLM and how it maps vLLM's outputs back to `Completion`s.
"""

import sys
import types
from dataclasses import dataclass, field

import pytest

from arborl.generation import SamplingParams, VLLMBackend, make_backend
from arborl.generation.base import SEED_STRIDE, row_seed


def test_missing_vllm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"make vllm"):
        VLLMBackend("some/model")
    with pytest.raises(ImportError, match="arborl"):
        make_backend("some/model", kind="vllm")


@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Sample:
    token_ids: list
    logprobs: list
    text: str
    finish_reason: str


@dataclass
class _RequestOutput:
    outputs: list


class _ModelConfig:
    max_model_len = 512

    def try_get_generation_config(self):
        return {"eos_token_id": [7, 9]}


@dataclass
class _FakeLLM:
    model: str
    seed: int
    kwargs: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    llm_engine: types.SimpleNamespace = field(
        default_factory=lambda: types.SimpleNamespace(model_config=_ModelConfig())
    )

    def get_tokenizer(self):
        return types.SimpleNamespace(eos_token_id=9)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params, use_tqdm))
        outs = []
        for p in prompts:
            ids = [t + 1 for t in p["prompt_token_ids"]]
            lps = [{t: _Logprob(-0.5 * t)} for t in ids]
            outs.append(_RequestOutput([_Sample(ids, lps, "txt", "length")]))
        return outs


def _fake_vllm() -> types.ModuleType:
    mod = types.ModuleType("vllm")
    mod.LLM = lambda model, seed, **kw: _FakeLLM(model, seed, kw)
    mod.SamplingParams = lambda **kw: kw
    mod.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    return mod


def test_argument_and_output_mapping(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm())
    backend = VLLMBackend("ckpt", seed=3, gpu_memory_utilization=0.5)
    assert backend.llm.model == "ckpt" and backend.llm.seed == 3
    # D4: logprobs that follow the temperature; vLLM-CPU: no chunked seeded prefill.
    assert backend.llm.kwargs == {
        "gpu_memory_utilization": 0.5,
        "logprobs_mode": "processed_logprobs",
        "max_num_batched_tokens": 65536,
    }
    # D3: vLLM stops on generation_config's eos ids too, so the rollout must strip them.
    assert backend.eos_token_ids == [9, 7] and backend.max_length == 512
    params = SamplingParams(max_new_tokens=7, temperature=0.5, stop=["\n"], seed=1)
    outs = backend.generate([[1, 2], [5]], params)
    prompts, sp, use_tqdm = backend.llm.calls[0]
    assert prompts == [{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [5]}]
    expected = dict(
        n=1,
        max_tokens=7,
        temperature=0.5,
        top_p=1.0,
        top_k=-1,
        stop=["\n"],
        seed=1 * SEED_STRIDE,
        logprobs=0,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
    )
    # D1: one SamplingParams per row, each with its own seed (vLLM seeds each request).
    assert sp == [expected, {**expected, "seed": 1 * SEED_STRIDE + 1}]
    assert not use_tqdm
    assert outs[0].token_ids == [2, 3] and outs[0].logprobs == [-1.0, -1.5]
    assert outs[1].token_ids == [6] and outs[1].finish_reason == "length"


def test_truncated_sampling_warns_that_logprobs_differ(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm())
    backend = VLLMBackend("ckpt")
    with pytest.warns(UserWarning, match="top_k=5"):
        backend.generate([[1]], SamplingParams(top_k=5))
    _, sp, _ = backend.llm.calls[0]
    assert sp[0]["seed"] is None and sp[0]["top_k"] == 5


def test_row_seeds_fit_a_signed_64_bit_generator_seed():
    """A step seed near 2**62 times the stride overflowed vLLM's manual_seed."""
    assert row_seed(2**62 - 1, 5) < 2**62 and row_seed(3, 1) == 3 * SEED_STRIDE + 1
