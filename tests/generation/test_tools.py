"""Tool calling in `arborl serve` (issue 32 req 2): `tools` reach the chat template, generated
`<tool_call>` blocks come back as OpenAI `tool_calls`, `tool` messages go back into the
template, and output that does not parse is text, never a 5xx. Driven by the official
`openai` client over real HTTP; the "model" is a scripted backend (a random tiny model never
calls a tool) or the real tiny model (for the never-5xx half)."""

from __future__ import annotations

import json

import openai
import pytest

from arborl.generation import HFBackend
from arborl.generation.server import create_app
from arborl.generation.tools import (
    MessageError,
    parse_tool_calls,
    render_chat,
    supports_tools,
)
from arborl.models.tokenizer import build_char_tokenizer
from tests.generation._scripted import ScriptedBackend
from tests.serving._openapi_fuzz import serve_in_thread

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def test_hermes_parse_valid_invalid_and_plain():
    ok = parse_tool_calls(f"let me add\n{CALL}", [ADD])
    assert ok.error is None and ok.content == "let me add"
    assert [c["function"]["name"] for c in ok.calls] == ["add"]
    assert json.loads(ok.calls[0]["function"]["arguments"]) == {"a": 2, "b": 3}
    # a block left open at the end counts when its JSON is whole (the eos came first)
    assert parse_tool_calls('<tool_call>{"name": "add", "arguments": {}}', [ADD]).calls
    for bad, why in [
        ("<tool_call>{not json</tool_call>", "not JSON"),
        ('<tool_call>{"name": "mul", "arguments": {}}</tool_call>', "not offered"),
        ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', "JSON object"),
        ("<tool_call>[1, 2]</tool_call>", '"name"'),
    ]:
        p = parse_tool_calls(bad, [ADD])
        assert p.calls == [] and p.content == bad and why in p.error, (bad, p.error)
    plain = parse_tool_calls("the answer is 5", [ADD])
    assert plain.calls == [] and plain.error is None and plain.content == "the answer is 5"
    assert parse_tool_calls(CALL, None).calls == []  # no tools offered: never a call


def test_fallback_rendering_puts_tools_calls_and_results_in_the_prompt():
    tok = build_char_tokenizer()
    assert not supports_tools(tok.chat_template)
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "add 2 and 3"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]  # fmt: skip
    text = render_chat(tok, messages, [ADD])
    assert text.startswith("<|system|>You can call these tools:") and '"name": "add"' in text
    assert '<|assistant|><tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}' in text
    assert "<|user|><tool_response>\n5\n</tool_response><|end|><|assistant|>" in text
    # no tools, no tool messages: exactly what the template gave before
    plain = [{"role": "user", "content": "hi"}]
    assert render_chat(tok, plain, None) == tok.apply_chat_template(
        plain, tokenize=False, add_generation_prompt=True
    )
    for bad in ([{"function": 5}], [{"type": "function", "function": {"name": ""}}], [3]):
        with pytest.raises(MessageError, match=r"tools\[0\]"):
            render_chat(tok, plain, bad)
    with pytest.raises(MessageError, match="image_url"):
        render_chat(tok, [{"role": "user", "content": [{"type": "image_url"}]}], None)


def test_native_template_gets_tools_and_dict_arguments():
    tok = build_char_tokenizer()
    tok.chat_template = (
        "{% for t in tools %}[{{ t.function.name }}]{% endfor %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}({{ c.function.name }} a={{ c.function.arguments.a }})"
        "{% endfor %};{% endfor %}"
    )
    msgs = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 7}'}}]},
    ]  # fmt: skip
    assert render_chat(tok, msgs, [ADD]) == "[add]user:x;assistant:(add a=7);"


@pytest.fixture(scope="module")
def scripted():
    """A served scripted model: a tool call while no tool result is in the prompt, then
    'the sum is 5'; a prompt asking for 'broken' gets a tool call that does not parse."""
    tok = build_char_tokenizer()

    def script(prompt: str, _i: int) -> str:
        if "broken" in prompt:
            return '<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>'
        return "the sum is 5" if "<tool_response>" in prompt else CALL

    backend = ScriptedBackend(tok, script)
    app = create_app(backend, tok, "scripted", api_key="k")
    with serve_in_thread(app) as url:
        yield backend, openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)


def test_openai_client_tool_round_trip(scripted):
    backend, client = scripted
    messages = [{"role": "user", "content": "add 2 and 3"}]
    r = client.chat.completions.create(model="scripted", messages=messages, tools=[ADD])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    assert call.id.startswith("call_") and '"name": "add"' in backend.prompts[-1]
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    r2 = client.chat.completions.create(model="scripted", messages=messages, tools=[ADD])
    assert r2.choices[0].message.content == "the sum is 5" and not r2.choices[0].message.tool_calls
    assert r2.choices[0].finish_reason == "stop"
    assert "<tool_response>\n5\n</tool_response>" in backend.prompts[-1]


def test_unparsable_tool_call_is_text_not_5xx(scripted):
    _, client = scripted
    r = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "broken"}], tools=[ADD]
    )
    assert r.choices[0].message.content.startswith("<tool_call>")
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason == "stop"


def test_streamed_tool_call(scripted):
    _, client = scripted
    stream = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "add"}], tools=[ADD], stream=True
    )
    chunks = list(stream)
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["add"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_returns_text(scripted):
    _, client = scripted
    r = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "x"}], tools=[ADD],
        tool_choice="none",
    )  # fmt: skip
    assert r.choices[0].message.content == CALL and not r.choices[0].message.tool_calls


def test_real_tiny_model_with_tools_never_5xx(served_policy):
    model, tok = served_policy
    app = create_app(HFBackend(model, tok), tok, "tiny", api_key="k")
    with serve_in_thread(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        for seed in range(3):
            r = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], tools=[ADD],
                max_tokens=12, seed=seed,
            )  # fmt: skip
            assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
