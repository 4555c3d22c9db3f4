"""SFT demos recorded through the gateway (`bench/agent_sft.py`): a real OpenAI-client
agent with a tool, a scripted model, and the rows it yields are the gateway's own prompts."""

from __future__ import annotations

import json

import pytest

from arborl.generation.tools import render_chat
from arborl.models import load_policy
from arborl.train.config import SFTConfig
from arborl.train.sft import run_sft

from ._scripts import load_script

record_agent_demos = load_script("agent_sft").record_agent_demos

TOOLS = [{"type": "function", "function": {
    "name": "echo", "description": "Echo a word.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}]  # fmt: skip


def agent(task: dict, base_url: str, api_key: str) -> str:
    """Two calls: the model calls `echo`, gets its result back as a tool message, answers."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": task["observation"]}]
    first = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    word = json.loads(call.function.arguments)["word"]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": word.upper()}]  # fmt: skip
    second = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
    return second.choices[0].message.content


def respond(prompt: str) -> str:
    """The demonstrator: call echo with the prompt's word, then repeat the tool's answer."""
    if "<tool_response>" in prompt:
        return prompt.rsplit("<tool_response>\n", 1)[1].split("\n", 1)[0]
    word = prompt.rsplit("say ", 1)[1].split("<", 1)[0]
    return f'<tool_call>{{"name": "echo", "arguments": {{"word": "{word}"}}}}</tool_call>'


def test_recorded_rows_are_the_gateway_prompts_and_the_script_answers():
    _, tok = load_policy("tiny-0.1m")
    tasks = [{"observation": "say cat"}, {"observation": "say dog"}]
    examples = record_agent_demos(agent, tasks, respond, tok)
    assert len(examples) == 4  # two calls per task
    first, second = examples[0], examples[1]
    # the prompt is what the chat template renders for the agent's messages and tools
    rendered = render_chat(tok, [{"role": "user", "content": "say cat"}], TOOLS)
    assert tok.decode(first.prompt_ids, skip_special_tokens=False) == rendered
    assert first.response_ids[-1] == tok.eos_token_id
    assert tok.decode(first.response_ids[:-1]) == respond(rendered)
    # the second call's prompt holds the parsed call and the tool's result
    text = tok.decode(second.prompt_ids, skip_special_tokens=False)
    assert '"word": "cat"' in text and "<tool_response>\nCAT\n</tool_response>" in text
    assert tok.decode(second.response_ids[:-1]) == "CAT"
    stats = run_sft(load_policy("tiny-0.1m")[0], tok, examples,
                    SFTConfig(steps=2, batch_size=4), progress=False)  # fmt: skip
    assert stats["sft/loss"] > 0


def test_an_agent_that_never_calls_the_model_is_refused():
    _, tok = load_policy("tiny-0.1m")
    with pytest.raises(ValueError, match="made no model call"):
        record_agent_demos(lambda task, url, key: "42", [{"observation": "x"}], respond, tok)
