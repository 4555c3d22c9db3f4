"""Server-sent-event streams of finished completions (`arborl serve` and the gateway).

Streaming is post-hoc: the completion is generated whole, then sent as one SSE chunk per
token, so clients that insist on `stream=true` (some agent libraries do) get the protocol;
time to first token is the whole latency. A chat choice with tool calls sends its content
pieces, then one delta holding every call (OpenAI's shape: index, id, type, function).
"""

from __future__ import annotations

import json
from collections.abc import Iterator


def sse(obj: dict | str) -> str:
    """One `data:` event."""
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


def stream_completions(base: dict, choices: list[dict]) -> Iterator[str]:
    """`choices`: dicts with index, pieces (one string per token) and finish_reason."""
    for ch in choices:
        for piece in ch["pieces"]:
            choice = {"index": ch["index"], "text": piece, "logprobs": None, "finish_reason": None}
            yield sse({**base, "choices": [choice]})
        last = {
            "index": ch["index"],
            "text": "",
            "logprobs": None,
            "finish_reason": ch["finish_reason"],
        }
        yield sse({**base, "choices": [last]})
    yield sse("[DONE]")


def stream_chat(base: dict, choices: list[dict]) -> Iterator[str]:
    """`choices`: dicts with pieces (the content, one string per token), tool_calls (OpenAI
    entries, may be empty) and finish_reason."""
    base = {**base, "object": "chat.completion.chunk"}
    for i, ch in enumerate(choices):
        role = {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        yield sse({**base, "choices": [role]})
        for p in ch["pieces"]:
            if p:
                delta = {"index": i, "delta": {"content": p}, "finish_reason": None}
                yield sse({**base, "choices": [delta]})
        if ch["tool_calls"]:
            calls = [{"index": k, **c} for k, c in enumerate(ch["tool_calls"])]
            delta = {"index": i, "delta": {"tool_calls": calls}, "finish_reason": None}
            yield sse({**base, "choices": [delta]})
        end = {"index": i, "delta": {}, "finish_reason": ch["finish_reason"]}
        yield sse({**base, "choices": [end]})
    yield sse("[DONE]")
