"""Tool calling over a chat template: OpenAI `tools` in, OpenAI `tool_calls` out.

The request side (`render_chat`): the request's `tools`, assistant turns that carried
`tool_calls` and `tool` role messages are put into the prompt. A template that handles tools
itself (its text mentions `tools`: Qwen2.5, Llama 3.1, SmolLM3, Hermes...) gets them as Hugging
Face expects them (`tools=` and `arguments` as a dict). A template that does not (arborl's
char and ChatML templates, most older models) gets them as text in the Hermes format that
the Qwen family was trained on: the tool list in a system message, each call as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the assistant's content, each
tool result as a user turn `<tool_response>...</tool_response>`. Either way what the model
sees is what the template renders, and the gateway records those exact ids.

The response side (`TOOL_PARSERS`, `parse_tool_calls`): generated text is split into content
and calls by a parser chosen by name (`hermes` by default: `<tool_call>` blocks holding JSON).
Output that tries to call a tool but does not parse (broken JSON, an unknown tool, a block
left open) is never an error to the client: it comes back as plain text and the parse is
marked invalid (`ToolParse.error`), which the gateway records so training can penalise it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from arborl.registry import Registry


@dataclass
class ToolParse:
    """Generated text split into what the client sees."""

    content: str
    """The text outside tool-call blocks (the whole text when a call failed to parse)."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI `tool_calls` entries: {id, type: function, function: {name, arguments (str)}}."""
    error: str | None = None
    """Why a tool call the model attempted was not accepted (None: no attempt or all ok)."""


TOOL_PARSERS: Registry = Registry("tool_parser", error=ValueError)
"""Parser name -> `fn(text, tool_names) -> ToolParse` (`tool_names`: the tools offered)."""

_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@TOOL_PARSERS.register("hermes")
def parse_hermes(text: str, tool_names: set[str]) -> ToolParse:
    """`<tool_call>{"name": N, "arguments": {...}}</tool_call>` blocks (Hermes, Qwen2.5,
    and arborl's fallback rendering); a last block left open at the end of the output counts
    if its JSON is whole (generation may stop on the end-of-turn token first)."""
    if "<tool_call>" not in text:
        return ToolParse(text)
    calls = []
    for raw in _HERMES_BLOCK.findall(text):
        try:
            obj = json.loads(raw.strip())
        except json.JSONDecodeError as e:
            return ToolParse(text, error=f"tool call is not JSON: {e.msg} at char {e.pos}")
        call, why = _openai_call(obj, tool_names)
        if call is None:
            return ToolParse(text, error=why)
        calls.append(call)
    content = _HERMES_BLOCK.sub("", text).strip()
    return ToolParse(content, calls)


def _openai_call(obj: Any, tool_names: set[str]) -> tuple[dict | None, str]:
    """An OpenAI `tool_calls` entry from a parsed `{"name", "arguments"}` object, or why not."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None, 'tool call must be an object with a string "name"'
    name = obj["name"]
    if name not in tool_names:
        return None, f"tool {name!r} was not offered (offered: {sorted(tool_names)})"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None, f"arguments of {name!r} are a string that is not JSON"
    if not isinstance(args, dict):
        return None, f"arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    fn = {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
    return {"id": _call_id(), "type": "function", "function": fn}, ""


def check_tools(tools: Any) -> None:
    """Raise `MessageError` unless `tools` is None or a list of OpenAI function tools."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise MessageError("tools must be a list of {type: function, function: {...}}")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise MessageError(f"tools[{i}] must be {{type: function, function: {{name: str, "
                               "description, parameters}}}")  # fmt: skip


def tool_names(tools: list[dict] | None) -> set[str]:
    """Names of the functions in an OpenAI `tools` list."""
    return {t.get("function", {}).get("name", "") for t in tools or [] if isinstance(t, dict)}


def parse_tool_calls(text: str, tools: list[dict] | None, parser: str = "hermes") -> ToolParse:
    """Split `text` into content and calls with `TOOL_PARSERS[parser]`; no `tools`: no calls."""
    if not tools:
        return ToolParse(text)
    return TOOL_PARSERS.get(parser)(text, tool_names(tools))


# --- the request side ------------------------------------------------------------------------


class MessageError(ValueError):
    """A message the template cannot take (the server answers 400 with it)."""


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, None, or a list of `{"type": "text"}` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise MessageError(f"{where}.content[{i}] is of type {kind!r}; only text parts "
                                   "are served (this model reads text)")  # fmt: skip
        return "".join(parts)
    raise MessageError(f"{where}.content must be a string or a list of text parts")


def supports_tools(template: str | None) -> bool:
    """Does the chat template render `tools` itself? (it names them)"""
    return bool(template) and "tools" in template


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _calls_of(msg: dict, where: str) -> list[dict]:
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise MessageError(f"{where}.tool_calls must be a list")
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise MessageError(f"{where}.tool_calls[{j}] needs function.name")
        out.append({"name": fn["name"], "arguments": _arguments(fn.get("arguments", {}))})
    return out


def tools_system_text(tools: list[dict]) -> str:
    """The fallback rendering of `tools`: one JSON line per function and the call format."""
    lines = [json.dumps(t.get("function", t), ensure_ascii=False, sort_keys=True) for t in tools]
    return (
        "You can call these tools:\n<tools>\n" + "\n".join(lines) + "\n</tools>\n"
        'To call one, reply with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>'
    )


def _native(messages: list[dict]) -> list[dict]:
    """Messages as HF tool-aware templates expect them (arguments as dicts, text content)."""
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        msg = {"role": m.get("role"), "content": text_of(m.get("content"), where)}
        if m.get("tool_calls"):
            msg["tool_calls"] = [{"type": "function", "function": c} for c in _calls_of(m, where)]
        for key in ("name", "tool_call_id"):
            if key in m:
                msg[key] = m[key]
        out.append(msg)
    return out


def _fallback(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """Messages for a template without tool support (roles system, user, assistant only)."""
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role, text = m.get("role"), text_of(m.get("content"), where)
        if role == "developer":  # the OpenAI name of a system message
            role = "system"
        if role == "assistant" and m.get("tool_calls"):
            blocks = [f"<tool_call>{json.dumps(c, ensure_ascii=False)}</tool_call>"
                      for c in _calls_of(m, where)]  # fmt: skip
            text = "\n".join(([text] if text else []) + blocks)
        elif role == "tool":
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        out.append({"role": role, "content": text})
    if tools:
        note = tools_system_text(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{note}"}
        else:
            out.insert(0, {"role": "system", "content": note})
    return out


def render_chat(tokenizer: Any, messages: list[dict], tools: list[dict] | None) -> str:
    """The prompt text of `messages` (+ `tools`) under `tokenizer`'s chat template, with the
    generation prompt; raises `MessageError` for messages it cannot take."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise MessageError("messages must be a list of objects")
    check_tools(tools)
    template = getattr(tokenizer, "chat_template", None)
    if supports_tools(template if isinstance(template, str) else None):
        kwargs = {"tools": tools} if tools else {}
        msgs = _native(messages)
    else:
        kwargs, msgs = {}, _fallback(messages, tools)
    try:
        return tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, **kwargs
        )
    except Exception as e:  # jinja errors (unknown role, missing key) are client errors
        raise MessageError(f"could not apply the chat template to messages: {e}") from e
