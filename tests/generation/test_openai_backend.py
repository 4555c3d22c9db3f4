"""OpenAIBackend against a real `arborl serve` app on 127.0.0.1, and its retry logic."""

import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from arborl.generation import HFBackend, OpenAIBackend, SamplingParams, make_backend
from arborl.generation.base import row_seed

from .conftest import API_KEY, MODEL_NAME


def test_same_ids_and_logprobs_as_in_process_backend(server_url, served_policy):
    model, tok = served_policy
    remote = OpenAIBackend(server_url, MODEL_NAME, tok, api_key=API_KEY)
    prompts = [
        tok.encode(t, add_special_tokens=False)
        for t in ("<|user|>north?<|end|><|assistant|>", "hello", "x")
    ]
    for params in (
        SamplingParams(max_new_tokens=16, temperature=0),
        SamplingParams(max_new_tokens=16, temperature=0.9, top_k=40, seed=7),
        SamplingParams(max_new_tokens=40, temperature=1.0, seed=3, stop=["a", "e"]),
    ):
        got = remote.generate(prompts, params)
        for g, w in zip(got, _per_row_reference(HFBackend(model, tok), prompts, params)):
            assert g.token_ids == w.token_ids  # special tokens and stops survive the trip
            assert g.text == w.text and g.finish_reason == w.finish_reason
            assert g.logprobs_from_server
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs))
    remote.close()


def _per_row_reference(backend, prompts, params):
    """What the server samples: a seeded call is one request per row, row i seeded s*K+i."""
    if params.seed is None:
        return backend.generate(prompts, params)
    return [
        backend.generate([p], replace(params, seed=row_seed(params.seed, i)))[0]
        for i, p in enumerate(prompts)
    ]


def test_seeded_group_gets_distinct_samples(server_url, served_policy):
    """D1: one seeded list request gave a whole GRPO group vLLM's same random stream."""
    _, tok = served_policy
    remote = OpenAIBackend(server_url, MODEL_NAME, tok, api_key=API_KEY)
    prompt = tok.encode("<|user|>go<|end|><|assistant|>", add_special_tokens=False)
    outs = remote.generate([prompt] * 4, SamplingParams(max_new_tokens=12, seed=1))
    assert len({tuple(o.token_ids) for o in outs}) == 4
    again = remote.generate([prompt] * 4, SamplingParams(max_new_tokens=12, seed=1))
    assert [o.token_ids for o in again] == [o.token_ids for o in outs]  # still reproducible
    remote.close()


@pytest.mark.slow
def test_bpe_ids_and_logprobs_are_exactly_the_servers(bpe_server_url, bpe_policy):
    """D2: re-encoding returned text is not exact with BPE; ids must be the sampled ones."""
    model, tok = bpe_policy
    remote = OpenAIBackend(bpe_server_url, MODEL_NAME, tok, api_key=API_KEY)
    chat = [{"role": "user", "content": "Numbers: 1 2 7 8. Target: 58."}]
    first = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    fresh = [tok.encode(first, add_special_tokens=False) for _ in range(6)]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5)
    got = remote.generate(fresh, params)
    # episode-style prompts: the sampled ids stay verbatim in the next turn's context
    end = tok.encode("<|im_end|>\n", add_special_tokens=False)
    episode = [p + g.token_ids + end for p, g in zip(fresh, got)]
    got += remote.generate(episode, params)
    local = HFBackend(model, tok)
    want = _per_row_reference(local, fresh, params) + _per_row_reference(local, episode, params)
    non_canonical = 0
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids and g.logprobs_from_server
        torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs))
        non_canonical += (
            tok.encode(tok.decode(g.token_ids), add_special_tokens=False) != g.token_ids
        )
    assert non_canonical >= 1  # the check has teeth: re-encoding would have drifted here
    remote.close()


def test_make_backend_from_url_finds_model_name(server_url):
    backend, tok = make_backend(server_url, tokenizer="tiny-0.1m", api_key=API_KEY)
    assert isinstance(backend, OpenAIBackend) and backend.model == MODEL_NAME
    out = backend.generate([tok.encode("hi", add_special_tokens=False)], SamplingParams(4))
    assert len(out[0].token_ids) <= 4


def test_4xx_is_a_clear_error(server_url, served_policy):
    _, tok = served_policy
    wrong_key = OpenAIBackend(server_url, MODEL_NAME, tok, api_key="nope", max_retries=3)
    with pytest.raises(RuntimeError, match="HTTP 401"):
        wrong_key.generate([[5, 6]], SamplingParams(max_new_tokens=2))


class _Flaky(BaseHTTPRequestHandler):
    """Fails the first two requests with 503, then answers like a completions server."""

    calls = 0

    def do_POST(self):  # noqa: N802 (http.server API)
        type(self).calls += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).calls <= 2:
            self.send_response(503)
            self.end_headers()
            return
        body = b'{"choices": [{"index": 0, "text": "ok", "finish_reason": "length"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_retries_5xx_then_succeeds_and_flags_missing_logprobs(served_policy):
    _, tok = served_policy
    httpd = HTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        backend = OpenAIBackend(url, "m", tok, backoff_s=0.01, max_retries=3)
        out = backend.generate([[5]], SamplingParams(max_new_tokens=2))[0]
        assert _Flaky.calls == 3
        assert out.text == "ok" and out.token_ids == tok.encode("ok", add_special_tokens=False)
        assert out.logprobs == [0.0, 0.0] and not out.logprobs_from_server
        _Flaky.calls = 0
        impatient = OpenAIBackend(url, "m", tok, backoff_s=0.01, max_retries=1)
        with pytest.raises(RuntimeError, match="after 2 attempts"):
            impatient.generate([[5]], SamplingParams(max_new_tokens=2))
    finally:
        httpd.shutdown()
