"""OpenAIBackend against a real `arborl serve` app on 127.0.0.1, and its retry logic."""

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from arborl.generation import HFBackend, OpenAIBackend, SamplingParams, make_backend

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
        want = HFBackend(model, tok).generate(prompts, params)
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids  # special tokens and stops survive the trip
            assert g.text == w.text and g.finish_reason == w.finish_reason
            assert g.logprobs_from_server
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs))
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
