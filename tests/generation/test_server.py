"""arborl serve's app driven by the official `openai` client over real HTTP."""

import httpx
import openai
import pytest
import torch
from fastapi.testclient import TestClient

from arborl.generation import HFBackend, SamplingParams
from arborl.generation.base import Completion
from arborl.generation.server import create_app

from .conftest import API_KEY, MODEL_NAME


@pytest.fixture(scope="module")
def client(server_url):
    return openai.OpenAI(base_url=server_url, api_key=API_KEY, max_retries=0)


def test_models_and_health(client, server_url):
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]
    health = httpx.get(server_url.removesuffix("/v1") + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_wrong_key_is_401(server_url):
    bad = openai.OpenAI(base_url=server_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2)


def test_completion_matches_local_backend(client, served_policy):
    model, tok = served_policy
    resp = client.completions.create(
        model=MODEL_NAME, prompt=["hello", "go"], max_tokens=6, temperature=0, logprobs=1
    )
    assert [c.index for c in resp.choices] == [0, 1]
    local = HFBackend(model, tok).generate(
        [tok.encode(p, add_special_tokens=False) for p in ("hello", "go")],
        SamplingParams(max_new_tokens=6, temperature=0),
    )
    for choice, ref in zip(resp.choices, local):
        assert choice.text == tok.decode(ref.token_ids, skip_special_tokens=True)
        torch.testing.assert_close(
            torch.tensor(choice.logprobs.token_logprobs), torch.tensor(ref.logprobs)
        )
        assert choice.finish_reason == ref.finish_reason
    assert resp.usage.completion_tokens == 12 and resp.usage.prompt_tokens == 7


def test_seed_n_and_stop(client):
    kwargs = dict(model=MODEL_NAME, prompt="hello", max_tokens=20, temperature=1.0, seed=4, n=3)
    a = client.completions.create(**kwargs)
    b = client.completions.create(**kwargs)
    texts = [c.text for c in a.choices]
    assert len(texts) == 3 and texts == [c.text for c in b.choices]
    stop = texts[0][5] if len(texts[0]) > 5 else texts[0][-1]
    cut = client.completions.create(**{**kwargs, "n": 1}, stop=[stop])
    # OpenAI semantics: the stop string itself is not returned
    assert cut.choices[0].text == texts[0][: texts[0].index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_streaming_completion_equals_non_streaming(client):
    kwargs = dict(model=MODEL_NAME, prompt="abc", max_tokens=10, temperature=0)
    full = client.completions.create(**kwargs).choices[0]
    chunks = list(client.completions.create(**kwargs, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == full.text
    assert chunks[-1].choices[0].finish_reason == full.finish_reason


def test_chat_and_chat_streaming(client):
    messages = [{"role": "user", "content": "Which way?"}]
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=12, temperature=0, logprobs=True
    )
    msg = resp.choices[0].message
    assert msg.role == "assistant" and "<|end|>" not in msg.content
    assert len(resp.choices[0].logprobs.content) == resp.usage.completion_tokens
    # <|user|>Which way?<|end|><|assistant|>: one token per char, one per special
    assert resp.usage.prompt_tokens == len("Which way?") + 3
    stream = client.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=12, temperature=0, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == msg.content
    assert chunks[-1].choices[0].finish_reason == resp.choices[0].finish_reason


def test_bad_requests(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="chat template"):
        client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "robot", "content": "x"}], max_tokens=2
        )


def test_concurrent_requests_are_served_correctly(client):
    from concurrent.futures import ThreadPoolExecutor

    kwargs = dict(model=MODEL_NAME, max_tokens=8, temperature=0)
    prompts = ["north", "south", "east", "west"] * 2
    serial = [client.completions.create(prompt=p, **kwargs).choices[0].text for p in prompts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(client.completions.create, prompt=p, **kwargs) for p in prompts]
        parallel = [f.result().choices[0].text for f in futures]
    assert parallel == serial


class _Fixed:
    """A backend that always 'samples' the given ids (to pin what the server reports)."""

    def __init__(self, ids):
        self.ids = ids

    def generate(self, prompts, params):
        lps = [-0.5] * len(self.ids)
        return [Completion(list(self.ids), lps, "", "stop") for _ in prompts]


@pytest.mark.slow
def test_bpe_chat_logprob_bytes_and_completion_token_ids(bpe_policy):
    """D7: each of the 3 GPT-2 tokens of a tree emoji decoded alone gave U+FFFD's bytes."""
    _, tok = bpe_policy
    ids = tok.encode(" 🌲", add_special_tokens=False) + [tok.eos_token_id]
    assert len(ids) == 4
    http = TestClient(create_app(_Fixed(ids), tok, MODEL_NAME))
    body = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}
    content = http.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"]
    raw = [bytes(c["bytes"]) for c in content["content"]]
    assert b"".join(raw[:3]) == " 🌲".encode() and raw[3] == b"<|im_end|>"
    assert [len(b) for b in raw[:3]] == [3, 1, 1]  # b' \xf0\x9f', b'\x8c', b'\xb2'
    # D2, server side: return_token_ids hands back the sampled ids, not re-encodable text
    body = {"prompt": [[15496]], "max_tokens": 4, "return_token_ids": True}
    choice = http.post("/v1/completions", json=body).json()["choices"][0]
    assert choice["token_ids"] == ids


def _chat_ids(tok, content: list) -> list[int]:
    """The sampled ids behind a chat response, from each logprob entry's raw `bytes`."""
    from arborl.models.byte_level import bytes_to_unicode

    spell = bytes_to_unicode()
    return [tok.convert_tokens_to_ids("".join(spell[b] for b in bytes(c.bytes))) for c in content]


def test_bpe_chat_is_the_sampled_tokens_their_logprobs_and_a_stop_inside_a_token(
    bpe_server_url, bpe_policy
):
    """`arborl serve bpe-tiny-0.1m`'s chat route over HTTP: content, logprobs and a stop
    string that ends inside a token, all on GPT-2's BPE."""
    from arborl.models import token_logprobs

    model, tok = bpe_policy
    client = openai.OpenAI(base_url=bpe_server_url, api_key=API_KEY, max_retries=0)
    messages = [{"role": "user", "content": "Numbers: 1 2 7 8. Target: 58."}]
    kwargs = dict(model=MODEL_NAME, messages=messages, max_tokens=16, temperature=0.8, seed=5,
                  logprobs=True)  # fmt: skip
    free = client.chat.completions.create(**kwargs).choices[0]
    ids = _chat_ids(tok, free.logprobs.content)
    assert free.message.content == tok.decode(ids, skip_special_tokens=True)
    chat = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tok.encode(chat, add_special_tokens=False)
    with torch.no_grad():
        scored = token_logprobs(model, torch.tensor([prompt + ids]), temperature=0.8)
    served = torch.tensor([c.logprob for c in free.logprobs.content])
    assert float((scored[0, len(prompt) - 1 :] - served).abs().max()) < 1e-5
    # a stop string made of the text up to token k plus the first character of token k
    pieces = [tok.decode([t]) for t in ids]
    k = next(i for i, p in enumerate(pieces) if i > 0 and len(p.strip()) >= 2)
    head = tok.decode(ids[:k]) + pieces[k][: len(pieces[k]) - len(pieces[k].lstrip()) + 1]
    stop = head[-4:]
    assert not tok.decode(ids[:k]).endswith(stop) and stop not in tok.decode(ids[:k])
    cut = client.chat.completions.create(**kwargs, stop=[stop]).choices[0]
    assert _chat_ids(tok, cut.logprobs.content) == ids[: k + 1]  # token k is kept whole
    assert cut.finish_reason == "stop" and cut.message.content == head[: -len(stop)]


@pytest.mark.slow
def test_arborl_serve_takes_a_bpe_preset_by_name(wait_for_health, bpe_policy):
    """The real `arborl serve bpe-tiny-0.1m` process serves the preset's sampled ids."""
    import os
    import subprocess
    import sys

    from tests.serving._openapi_fuzz import free_port

    model, tok = bpe_policy
    port = free_port()
    cmd = [sys.executable, "-m", "arborl.cli.main", "serve", "bpe-tiny-0.1m", "--port", str(port)]
    env = {**os.environ, "ARBORL_API_KEY": API_KEY}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_health(proc, f"http://127.0.0.1:{port}", timeout_s=180)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY,
                               max_retries=0)  # fmt: skip
        prompt = tok.encode("Numbers: 1 2 7 8.", add_special_tokens=False)
        resp = client.completions.create(model="bpe-tiny-0.1m", prompt=[prompt], max_tokens=8,
                                         seed=3, logprobs=0, extra_body={"return_token_ids": True})  # fmt: skip
        (choice,) = resp.choices
        local = HFBackend(model, tok).generate([prompt], SamplingParams(max_new_tokens=8, seed=3))
        assert choice.model_extra["token_ids"] == local[0].token_ids
        torch.testing.assert_close(
            torch.tensor(choice.logprobs.token_logprobs), torch.tensor(local[0].logprobs)
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
