"""Generate through any OpenAI-compatible `/v1/completions` endpoint (arborl serve, vLLM).

The rollout loop works in token ids, and so does this backend on the wire: prompts are
sent as token-id lists (`"prompt": [[ids...], ...]`, accepted by vLLM and `arborl serve`)
and the request asks for `return_token_ids=true`, so the ids stored are exactly the ids
the server sampled and its logprobs belong to them. Decoding and re-encoding text is not
exact with a BPE tokenizer (a sampled sequence is often not the canonical tokenization of
its text: 0/16 rows matched against `vllm serve`), so it is only the fallback for servers
that return no `token_ids`; `skip_special_tokens=false` and `include_stop_str_in_output=
true` keep that fallback as close as text allows.

Seeds: vLLM seeds each request with its `seed`, so one seeded list request gives every row
the same random stream (a GRPO group of identical samples). A seeded call therefore sends
one request per row, row i seeded `row_seed(seed, i)`, a few at a time.

Logprobs: `logprobs=1` is requested; when the server returns one logprob per token they
are used, otherwise the completion carries zeros and `logprobs_from_server=False`, so
training must recompute them (`token_logprobs`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from transformers import PreTrainedTokenizerBase

from arborl.generation.base import Completion, SamplingParams, row_seeds_for
from arborl.generation.hf import check_params, refuse_banned_first_tokens


@dataclass
class HTTPCompletion(Completion):
    """A `Completion` that also says where its logprobs came from."""

    logprobs_from_server: bool = True
    """False when the server sent no usable logprobs and `logprobs` are placeholder zeros."""


class OpenAIBackend:
    """`GenerationBackend` over HTTP: one `/v1/completions` request per batch of prompts."""

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: PreTrainedTokenizerBase,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_batch_size: int = 64,
        max_concurrency: int = 8,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={base_url!r} must start with http:// or https://")
        base_url = base_url.rstrip("/")
        if not base_url.endswith("/v1"):
            base_url += "/v1"
        self.base_url = base_url
        self.model = model
        self.tokenizer = tokenizer
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_batch_size = max_batch_size
        self.max_concurrency = max_concurrency
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        check_params(params)
        refuse_banned_first_tokens(params, "OpenAI-compatible HTTP")
        seeds = row_seeds_for(params, len(prompts))
        if seeds is not None:  # one request per row, each with its own seed
            with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
                rows = pool.map(
                    lambda p, s: self._generate_chunk([p], params, s)[0], prompts, seeds
                )
                return list(rows)
        out: list[Completion] = []
        for start in range(0, len(prompts), self.max_batch_size):
            out.extend(
                self._generate_chunk(prompts[start : start + self.max_batch_size], params, None)
            )
        return out

    def _generate_chunk(
        self, prompts: list[list[int]], params: SamplingParams, seed: int | None
    ) -> list[HTTPCompletion]:
        body = {
            "model": self.model,
            "prompt": [list(p) for p in prompts],
            "return_token_ids": True,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 1,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k  # vLLM / arborl extension
        if params.stop:
            body["stop"] = list(params.stop)
        if seed is not None:
            body["seed"] = seed
        data = self._post("/completions", body)
        choices = sorted(data["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts):
            raise RuntimeError(
                f"{self.base_url}/completions returned {len(choices)} choices for "
                f"{len(prompts)} prompts; the server must support list prompts"
            )
        return [self._to_completion(c) for c in choices]

    def _to_completion(self, choice: dict) -> HTTPCompletion:
        text = choice.get("text") or ""
        ids = choice.get("token_ids")
        if ids is None:  # a server without return_token_ids: re-encoding is the best left
            ids = self.tokenizer.encode(text, add_special_tokens=False)
        lp = (choice.get("logprobs") or {}).get("token_logprobs")
        from_server = lp is not None and len(lp) == len(ids) and None not in lp
        reason = choice.get("finish_reason") or "length"
        return HTTPCompletion(
            token_ids=ids,
            logprobs=[float(x) for x in lp] if from_server else [0.0] * len(ids),
            text=text,
            finish_reason="length" if reason == "length" else "stop",
            logprobs_from_server=from_server,
        )

    def _post(self, path: str, body: dict) -> dict:
        """POST with exponential backoff on 5xx, timeouts and refused connections."""
        last_error: Exception | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = self._client.post(path, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as e:
                last_error = e
                continue
            if resp.status_code >= 500:
                last_error = RuntimeError(f"HTTP {resp.status_code}: {resp.text[:500]}")
                continue
            if resp.status_code >= 400:
                raise RuntimeError(
                    f"{self.base_url}{path} rejected the request with HTTP {resp.status_code}: "
                    f"{resp.text[:500]} (check the model name, api key and sampling params)"
                )
            return resp.json()
        raise RuntimeError(
            f"{self.base_url}{path} failed after {self.max_retries + 1} attempts: {last_error}"
        ) from last_error
