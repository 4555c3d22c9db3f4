"""vLLM as a generation backend, for machines with a GPU and `pip install 'arborl[vllm]'`.

vLLM cannot run on this project's CPU-only machines, so this module is exercised by a test
that injects a small fake `vllm` module (checking the argument and output mapping only).
Prompts go in as token ids (`TokensPrompt`), so no re-tokenization happens.

Logprobs caveat: by default vLLM reports logprobs of the *raw* logits (before temperature).
For logprobs that match `token_logprobs(..., temperature=T)` pass
`logprobs_mode="processed_logprobs"` (vLLM >= 0.10.2) through `**llm_kwargs`; note that
"processed" also applies top-k/top-p, or recompute logprobs in training.
"""

from __future__ import annotations

import importlib
from typing import Any

from arborl.generation.base import Completion, SamplingParams
from arborl.generation.hf import check_params, refuse_banned_first_tokens

INSTALL_HINT = "vLLM is not installed; install it with `pip install 'arborl[vllm]'` (needs a GPU)"


def import_vllm() -> Any:
    """Import vllm lazily, turning a missing package into an actionable error."""
    try:
        return importlib.import_module("vllm")
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e


class VLLMBackend:
    """`GenerationBackend` over an in-process `vllm.LLM` engine."""

    def __init__(self, model: str, seed: int = 0, **llm_kwargs: Any):
        self._vllm = import_vllm()
        self.llm = self._vllm.LLM(model=model, seed=seed, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def _sampling_params(self, params: SamplingParams) -> Any:
        refuse_banned_first_tokens(params, "vLLM")
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,  # vLLM: -1 disables
            stop=list(params.stop) or None,
            seed=params.seed,
            logprobs=0,  # only the sampled token's logprob
            include_stop_str_in_output=True,
            skip_special_tokens=False,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        check_params(params)
        requests = [self._vllm.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(requests, self._sampling_params(params), use_tqdm=False)
        completions = []
        for out in outputs:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            # sample.logprobs: one {token_id: Logprob} dict per generated token.
            logprobs = [float(step[t].logprob) for step, t in zip(sample.logprobs or [], ids)]
            if len(logprobs) != len(ids):
                logprobs = [0.0] * len(ids)
            completions.append(
                Completion(
                    token_ids=ids,
                    logprobs=logprobs,
                    text=sample.text,
                    finish_reason="length" if sample.finish_reason == "length" else "stop",
                )
            )
        return completions
