"""The training gateway (issue 32 req 1 and 6): sessions as episodes, token-exact records,
weight versions, the trainer's sampling, and its safety limits, over real HTTP on 127.0.0.1
with the official `openai` client."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
import torch

from arborl.generation import HFBackend, SamplingParams
from arborl.generation.gateway import Gateway, GatewayLimits, SamplingOverride
from arborl.generation.tools import render_chat
from arborl.models.tokenizer import build_char_tokenizer
from tests.generation._scripted import LOGP, ScriptedBackend
from tests.generation.test_tools import ADD, CALL

HI = [{"role": "user", "content": "hi"}]


def _client(handle) -> openai.OpenAI:
    return openai.OpenAI(base_url=handle.base_url, api_key=handle.key, max_retries=0)


@pytest.fixture(scope="module")
def tiny_gateway(served_policy):
    model, tok = served_policy
    sampling = SamplingOverride(temperature=1.0, max_new_tokens=12)
    with Gateway(HFBackend(model, tok), tok, sampling=sampling) as gw:
        yield gw, model, tok


def test_records_are_token_exact(tiny_gateway):
    gw, model, tok = tiny_gateway
    s = gw.open_session(meta={"task": "t1"}, seed=7)
    client = _client(s)
    messages = [*HI]
    for _ in range(2):
        r = client.chat.completions.create(model="policy", messages=messages, temperature=0.2)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "more"}]  # fmt: skip
    calls = gw.close_session(s.id)
    assert [c.call for c in calls] == [0, 1] and calls[0].session == s.id
    for call, upto in zip(calls, (1, 3)):
        text = render_chat(tok, messages[:upto], None)
        assert call.prompt_ids == [tok.encode(text, add_special_tokens=False)]
        assert call.sampling["temperature"] == 1.0  # the trainer's, not the agent's 0.2
        assert call.sampling["max_tokens"] <= 12
        (choice,) = call.choices
        assert len(choice.response_ids) == len(choice.logprobs) <= 12
        # the same prompt ids and row seeds give the same ids and logprobs in-process
        seeds = call.sampling["row_seeds"]
        params = SamplingParams(max_new_tokens=12, temperature=1.0, row_seeds=seeds)
        again = HFBackend(model, tok).generate(call.prompt_ids, params)[0]
        assert again.token_ids == choice.response_ids
        torch.testing.assert_close(torch.tensor(again.logprobs), torch.tensor(choice.logprobs))
        assert choice.finish_reason in ("stop", "length")
    assert messages[1]["content"] == calls[0].choices[0].content


def test_weight_version_moves_with_the_weights(tiny_gateway):
    gw, model, _ = tiny_gateway
    s = gw.open_session()
    client = _client(s)
    client.chat.completions.create(model="policy", messages=HI, max_tokens=2)
    p = next(model.parameters())
    with torch.no_grad():
        p.add_(0.0)  # an in-place write, as an optimizer step makes
    client.chat.completions.create(model="policy", messages=HI, max_tokens=2)
    v0, v1 = (c.weight_version for c in gw.close_session(s.id))
    assert v1 == v0 + 1


def test_sessions_are_isolated(tiny_gateway):
    gw, *_ = tiny_gateway
    a, b = gw.open_session(), gw.open_session()
    # a's key cannot write into b's session, by path or by header
    stolen = openai.OpenAI(base_url=b.base_url, api_key=a.key, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stolen.chat.completions.create(model="policy", messages=HI, max_tokens=2)
    root = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=a.key, max_retries=0)
    root.chat.completions.create(
        model="policy", messages=HI, max_tokens=2, extra_headers={"X-Arborl-Session": b.id}
    )  # the key pins the call to a's session whatever the header says
    assert len(gw.close_session(a.id)) == 1 and gw.close_session(b.id) == []
    with pytest.raises(openai.AuthenticationError):  # a closed session's key is dead
        _client(a).chat.completions.create(model="policy", messages=HI, max_tokens=2)
    master = openai.OpenAI(base_url=f"{gw.url}/s/nope/v1", api_key=gw.api_key, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        master.chat.completions.create(model="policy", messages=HI, max_tokens=2)
    no_session = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="records episodes"):
        no_session.chat.completions.create(model="policy", messages=HI, max_tokens=2)
    assert httpx.get(f"{gw.url}/health").status_code == 200
    assert httpx.get(f"{gw.url}/v1/models").status_code == 401


def test_session_timeout_and_call_limit(served_policy):
    model, tok = served_policy
    limits = GatewayLimits(max_calls_per_session=2, max_sessions=2, idle_timeout_s=30.0)
    with Gateway(HFBackend(model, tok), tok, limits=limits) as gw:
        s = gw.open_session()
        client = _client(s)
        for _ in range(2):
            client.chat.completions.create(model="policy", messages=HI, max_tokens=2)
        with pytest.raises(openai.RateLimitError, match="max_calls_per_session=2"):
            client.chat.completions.create(model="policy", messages=HI, max_tokens=2)
        short = gw.open_session(timeout_s=0.2)
        with pytest.raises(Exception, match="max_sessions=2"):
            gw.open_session()
        time.sleep(0.5)
        with pytest.raises(openai.APIStatusError) as e:
            _client(short).chat.completions.create(model="policy", messages=HI, max_tokens=2)
        assert e.value.status_code == 410 and "timeout" in e.value.message
        assert gw.close_session(short.id) == []
        gw.session(s.id).last_used -= 60  # as if idle for a minute (no sleep in a test)
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(model="policy", messages=HI, max_tokens=2)
        assert e.value.status_code == 410 and "idle" in e.value.message
        assert len(gw.close_session(s.id)) == 2  # what it made before going idle is kept


def test_tool_calls_and_failed_parses_are_recorded():
    tok = build_char_tokenizer()
    replies = iter([CALL, '<tool_call>{"name": "add"', "5"])
    backend = ScriptedBackend(tok, lambda _p, _i: next(replies))
    with Gateway(backend, tok) as gw:
        s = gw.open_session()
        client = _client(s)
        for _ in range(3):
            client.chat.completions.create(model="policy", messages=HI, tools=[ADD])
        ok, bad, plain = (c.choices[0] for c in gw.close_session(s.id))
    assert ok.tool_calls[0]["function"]["name"] == "add" and ok.tool_call_error is None
    assert bad.tool_calls == [] and "not JSON" in bad.tool_call_error
    assert bad.content == '<tool_call>{"name": "add"'
    assert plain.tool_call_error is None and plain.logprobs == [LOGP] * 2


def test_standalone_records_to_files(tmp_path, served_policy):
    model, tok = served_policy
    gw = Gateway(HFBackend(model, tok), tok, auto_sessions=True, record_dir=tmp_path,
                 open_access=True)  # fmt: skip
    with gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        kw = {"model": "policy", "messages": HI, "max_tokens": 2}
        client.chat.completions.create(**kw, user="ep-1")
        client.chat.completions.create(**kw, extra_headers={"X-Arborl-Session": "ep-1"})
        client.chat.completions.create(**kw, metadata={"session_id": "ep/2"})
        raw = client.chat.completions.with_raw_response.create(**kw)
        own = raw.headers["x-arborl-session"]
        client.completions.create(model="policy", prompt="ab", max_tokens=2, user="ep-1")
    files = {
        p.name: [json.loads(x) for x in p.read_text().splitlines()] for p in tmp_path.iterdir()
    }
    assert [c["kind"] for c in files["ep-1.jsonl"]] == ["chat", "chat", "completion"]
    assert [c["call"] for c in files["ep-1.jsonl"]] == [0, 1, 2]
    assert len(files[f"{own}.jsonl"]) == 1
    (odd,) = [k for k in files if k.startswith("ep_2~")]  # a client id made safe as a name
    assert files[odd][0]["session"] == "ep/2"


def test_arborl_serve_record_command(tmp_path, monkeypatch):
    """`arborl serve --record DIR` builds the standalone gateway with the command's key and
    limits (its app is taken from `uvicorn.run` and served here, so no new interpreter)."""
    import uvicorn

    from arborl.cli.main import build_parser
    from tests.serving._openapi_fuzz import serve_in_thread

    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append((app, kw)))
    monkeypatch.setenv("ARBORL_API_KEY", "k")
    argv = ["serve", "tiny-0.1m", "--record", str(tmp_path / "calls"), "--max-tokens", "8"]
    args = build_parser("serve").parse_args(argv)
    assert args.func(args) == 0
    ((app, kw),) = apps
    assert kw["host"] == "127.0.0.1"
    with serve_in_thread(app) as url:
        client = openai.OpenAI(base_url=f"{url}/s/run-1/v1", api_key="k", max_retries=0)
        client.chat.completions.create(model="tiny-0.1m", messages=HI, max_tokens=3)
        with pytest.raises(openai.BadRequestError, match="limit of 8"):
            client.chat.completions.create(model="tiny-0.1m", messages=HI, max_tokens=9)
        assert httpx.get(f"{url}/v1/models").status_code == 401  # the key is required
    lines = (tmp_path / "calls" / "run-1.jsonl").read_text().splitlines()
    (record,) = [json.loads(x) for x in lines]
    assert record["session"] == "run-1" and record["prompt_ids"][0]
