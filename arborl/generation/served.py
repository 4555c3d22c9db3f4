"""One model behind `arborl serve`'s routes: check a call, run it on the queue, record it and
build the OpenAI reply (`arborl.generation.server` makes one `Served` and its routes call it).

Design choices:
* **Sized before any work.** Everything that sizes work is checked before the text is
  tokenized or the model is taken, each failure a 400 naming the field, the value and the
  limit: rows (prompts x n), empty prompts and messages, the number of messages, and the
  prompt text in characters. A text longer than (context - 1) x the tokenizer's longest
  token (in characters) cannot fit the context, so it is refused before tokenizing: a
  tokenizer's output is many times its input's size (a 7 MB body used to cost 2 GB).
* **A call holds one in-flight slot at the recorder, as a context manager** (`Slot`): the
  recorder's `begin` on entry and exactly one `end` on exit, with the record or, when
  anything raised in between (the model, decoding, a tool parser), with None. No exception
  can leak the slot, so no request shape can fill the recorder's in-flight limit for good.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from fastapi.responses import JSONResponse, StreamingResponse
from transformers import PreTrainedTokenizerBase

from arborl.generation.base import Completion, GenerationBackend, SamplingParams
from arborl.generation.requests import ChatRequest, CompletionRequest, _Base
from arborl.generation.sse import stream_chat, stream_completions
from arborl.generation.token_bytes import token_bytes
from arborl.generation.tools import MessageError, parse_tool_calls, render_chat
from arborl.serving import ModelQueue

SESSION_HEADER = "x-arborl-session"
"""The request header naming a call's session (episode); also the response header."""
MIN_TEMPERATURE = 1e-4
"""Temperatures below this sample greedily (dividing logits by less overflows)."""
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")
"""What the session header carries unescaped: visible ASCII but `%` (the escape itself)."""


class APIError(Exception):
    """An error sent to the client as OpenAI-style JSON with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class CallRecorder(Protocol):
    """What a server with a recorder (the gateway) asks of it around each call."""

    def begin(
        self, session: str | None, params: SamplingParams, num_rows: int
    ) -> tuple[SamplingParams, Any]:
        """Check that the call may run in `session` (raise `APIError` if not), count it in
        flight and return the sampling parameters to use and a ticket for `end`. Runs before
        the model is taken."""
        ...

    def end(self, ticket: Any, call: dict[str, Any] | None) -> str:
        """Release the call's in-flight slot and record it (`call`: kind, request,
        prompt_ids, choices, sampling; None: the call failed, record nothing); returns the
        session id it went to. Called exactly once per successful `begin`."""
        ...


class Slot:
    """A call's in-flight slot at `recorder` (None: no recorder, nothing to hold): `begin` on
    entry; `finish(call)` records it, and leaving without `finish`, by any exception, ends it
    unrecorded. `params` are the sampling parameters the recorder set."""

    def __init__(
        self,
        recorder: CallRecorder | None,
        session: str | None,
        params: SamplingParams,
        num_rows: int,
    ) -> None:
        self.recorder, self.session, self.params = recorder, session, params
        self.num_rows, self.ticket, self._held = num_rows, None, False

    def __enter__(self) -> Slot:
        if self.recorder is not None:
            self.params, self.ticket = self.recorder.begin(self.session, self.params, self.num_rows)
            self._held = True
        return self

    def finish(self, call: dict[str, Any]) -> str | None:
        """Record the finished call; the session it went to (None: no recorder)."""
        if not self._held:
            return None
        self._held = False  # before `end`: a failing `end` must not be ended twice
        return self.recorder.end(self.ticket, call)

    def __exit__(self, *exc: Any) -> None:
        if self._held:
            self._held = False
            self.recorder.end(self.ticket, None)  # a failed call is not recorded


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _cut_at_stop(text: str, stops: list[str]) -> str:
    """Drop the earliest stop string and everything after it (OpenAI semantics)."""
    hits = [text.find(s) for s in stops if s in text]
    return text[: min(hits)] if hits else text


def _pieces(tokenizer: PreTrainedTokenizerBase, ids: list[int], text: str, skip: bool):
    """Split `text` into one piece per token (for streaming and logprob token strings)."""
    prev = 0
    for k in range(len(ids)):
        cur = min(len(tokenizer.decode(ids[: k + 1], skip_special_tokens=skip)), len(text))
        yield text[prev:cur]
        prev = max(prev, cur)


def _finite(values: list[float]) -> list[float | None]:
    """Logprobs as JSON allows them: -inf (a token of probability 0) becomes None."""
    return [v if math.isfinite(v) else None for v in values]


def longest_token_chars(tokenizer: PreTrainedTokenizerBase) -> int:
    """Most characters of text one token can stand for: the longest vocabulary entry (a
    byte-level BPE entry has one character per byte, so it bounds its text from above).
    A tokenizer without `get_vocab` is asked to decode each id instead."""
    try:
        entries = list(tokenizer.get_vocab())
    except (NotImplementedError, AttributeError):
        entries = [tokenizer.decode([i]) for i in range(len(tokenizer))]
    return max((len(t) for t in entries), default=1) or 1


def _check_limits(
    prompts: list[list[int]], max_tokens: int, vocab: int, max_tokens_limit: int
) -> None:
    """400 naming the field, value and limit for a prompt or budget the model cannot take."""
    if max_tokens > max_tokens_limit:
        raise APIError(
            400,
            f"max_tokens={max_tokens} is over this server's limit of "
            f"{max_tokens_limit} (the model context; `arborl serve --max-tokens`); "
            "ask for fewer",
        )
    for i, p in enumerate(prompts):
        if not p:
            raise APIError(
                400,
                f"prompt[{i}] is empty (no tokens); send at least one token or a non-empty text",
            )
        if len(p) >= max_tokens_limit:
            raise APIError(
                400,
                f"prompt[{i}] has {len(p)} tokens; the limit is "
                f"{max_tokens_limit - 1} (the model context)",
            )
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise APIError(
                400,
                f"prompt[{i}] holds token id {bad[0]}, outside the "
                f"vocabulary [0, {vocab}); send text or valid ids",
            )


def _with_session(result: Any, session: str | None) -> Any:
    """The handler's reply, with the session it was recorded in as a response header
    (percent-encoded UTF-8 where the id is not visible ASCII: headers carry only that)."""
    if session is None:
        return result
    value = quote(session, safe=_HEADER_SAFE)
    if isinstance(result, dict):
        return JSONResponse(result, headers={SESSION_HEADER: value})
    result.headers[SESSION_HEADER] = value
    return result


def _usage(prompts: list[list[int]], outs: list[Completion], n: int) -> dict:
    """The OpenAI `usage` block: prompt tokens (once per sample), completion tokens, total."""
    p = sum(len(x) for x in prompts) * n
    c = sum(len(o.token_ids) for o in outs)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _call_record(kind: str, request: dict, prompts, outs, params, extra, n: int) -> dict:
    """What the recorder keeps of a finished call (docs/agents.md, "The record")."""
    choices = [
        {
            "response_ids": list(c.token_ids),
            "logprobs": list(c.logprobs),
            "finish_reason": c.finish_reason,
            **x,
        }
        for c, x in zip(outs, extra)
    ]
    sampling = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "max_tokens": params.max_new_tokens,
        "stop": list(params.stop),
        "seed": params.seed,
        "row_seeds": params.row_seeds,
    }
    return {
        "kind": kind,
        "request": request,
        "sampling": sampling,
        "prompt_ids": [list(p) for p in prompts],
        "n": n,
        "choices": choices,
    }


@dataclass
class Served:
    """One model behind the routes: checks a call, runs it on the queue, records it and
    builds the OpenAI reply. `create_app` makes one and its routes call the methods."""

    backend: GenerationBackend
    tokenizer: PreTrainedTokenizerBase
    model_name: str
    default_max_tokens: int
    max_tokens_limit: int
    max_rows: int
    tool_parser: str
    recorder: CallRecorder | None

    def __post_init__(self) -> None:
        self.queue = ModelQueue()
        self.created = int(time.time())  # the model card's `created`
        self.vocab = len(self.tokenizer)
        longest = longest_token_chars(self.tokenizer)
        self.max_prompt_chars = max(self.max_tokens_limit - 1, 1) * longest
        """Longest prompt text that could fit the context; longer is refused untokenized."""
        self.max_messages = self.max_tokens_limit
        """Most chat messages in one request (each renders to at least one token)."""

    def check_model(self, req: _Base) -> None:
        """404 unless `req.model` is empty or the served model's id."""
        if req.model not in (None, "", self.model_name):
            raise APIError(
                404,
                f"model {req.model!r} is not served here; use {self.model_name!r}",
                "not_found_error",
            )

    def check_rows(self, num_prompts: int, n: int) -> None:
        """400 for no prompt at all, or more rows (prompts x n) than `max_rows`."""
        if num_prompts == 0:
            raise APIError(
                400,
                "prompt is empty ([]); send a text, a list of texts, token "
                "ids or a list of token-id lists",
            )
        if num_prompts * n > self.max_rows:
            raise APIError(
                400,
                f"{num_prompts} prompt(s) x n={n} = {num_prompts * n} "
                f"sequences; the limit is {self.max_rows} (`arborl serve --max-rows`)",
            )

    def encode(self, text: str, where: str) -> list[int]:
        """`text`'s token ids; 400 for a text too long to fit (before tokenizing) or not UTF-8."""
        if len(text) > self.max_prompt_chars:
            raise APIError(
                400,
                f"{where} has {len(text)} characters of prompt text; the limit "
                f"is {self.max_prompt_chars} (the context, {self.max_tokens_limit - 1} "
                "tokens, x the tokenizer's longest token); send less",
            )
        try:
            text.encode("utf-8")
            return self.tokenizer.encode(text, add_special_tokens=False)
        except (UnicodeEncodeError, TypeError, ValueError) as e:
            raise APIError(
                400,
                f"{where} is not valid text (UTF-8 only, no lone surrogates): {type(e).__name__}",
            ) from e

    def sampling(
        self, prompts: list[list[int]], req: _Base, max_tokens: int, stops: list[str]
    ) -> SamplingParams:
        """Check the prompts and budget, and the request's sampling parameters."""
        _check_limits(prompts, max_tokens, self.vocab, self.max_tokens_limit)
        return SamplingParams(
            max_new_tokens=max_tokens,
            # A subnormal temperature overflows logits / T to inf (NaN logprobs): greedy.
            temperature=req.temperature if req.temperature >= MIN_TEMPERATURE else 0.0,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=stops,
            seed=req.seed,
        )

    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams):
        """`n` rows per prompt, on the queue (a backend's ValueError is the client's: 400)."""
        repeated = [p for p in prompts for _ in range(n)]
        try:
            with self.queue.hold():
                return self.backend.generate(repeated, params)
        except ValueError as e:
            raise APIError(400, str(e)) from e

    def finish_text(self, c: Completion, req: _Base, stops: list[str]) -> str:
        """A completion's text as the client asked for it: special tokens, stop string."""
        text = self.tokenizer.decode(c.token_ids, skip_special_tokens=req.skip_special_tokens)
        return text if req.include_stop_str_in_output else _cut_at_stop(text, stops)

    def complete(self, req: CompletionRequest, session: str | None):
        """`/v1/completions`: the JSON reply, or an SSE stream with `req.stream`."""
        self.check_model(req)
        if req.echo:
            raise APIError(400, "echo=true is not supported; set echo=false")
        prompt = req.prompt
        if isinstance(prompt, str):
            prompt = [prompt]
        if prompt and all(isinstance(x, int) for x in prompt):
            prompt = [prompt]  # a single prompt given as token ids
        self.check_rows(len(prompt), req.n)  # before any text is tokenized
        prompts = [
            p if isinstance(p, list) else self.encode(p, f"prompt[{i}]")
            for i, p in enumerate(prompt)
        ]
        stops = _stops(req.stop)
        max_tokens = req.max_tokens or min(16, self.max_tokens_limit)
        params = self.sampling(prompts, req, max_tokens, stops)
        with Slot(self.recorder, session, params, len(prompts) * req.n) as slot:
            outs = self.generate(prompts, req.n, slot.params)
            choices = self._completion_choices(req, outs, stops)
            extra = [{"text": ch["text"]} for ch in choices]
            call = _call_record(
                "completion", {"prompt": req.prompt}, prompts, outs, slot.params, extra, req.n
            )
            session = slot.finish(call)
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": rid, "object": "text_completion", "created": now, "model": self.model_name}
        if req.stream:
            stream = stream_completions(base, choices)
            return _with_session(StreamingResponse(stream, media_type="text/event-stream"), session)
        for ch in choices:
            ch.pop("pieces")
        return _with_session(
            {**base, "choices": choices, "usage": _usage(prompts, outs, req.n)}, session
        )

    def _completion_choices(
        self, req: CompletionRequest, outs: list[Completion], stops: list[str]
    ) -> list[dict]:
        """One completions choice per output, with its per-token `pieces` for streaming."""
        choices = []
        for i, c in enumerate(outs):
            text = self.finish_text(c, req, stops)
            pieces = list(_pieces(self.tokenizer, c.token_ids, text, req.skip_special_tokens))
            logprobs = None
            if req.logprobs is not None:
                offsets = [sum(len(p) for p in pieces[:k]) for k in range(len(pieces))]
                logprobs = {
                    "tokens": pieces,
                    "token_logprobs": _finite(c.logprobs),
                    "top_logprobs": None,
                    "text_offset": offsets,
                }
            choices.append(
                {
                    "index": i,
                    "text": text,
                    "pieces": pieces,
                    "logprobs": logprobs,
                    "finish_reason": c.finish_reason,
                }
            )
            if req.return_token_ids:
                choices[-1]["token_ids"] = list(c.token_ids)
        return choices

    def chat_prompt(self, req: ChatRequest) -> list[int]:
        """The chat's prompt ids; 400 for no messages, too many, or text that cannot fit."""
        if not req.messages:
            raise APIError(400, "messages is empty ([]); send at least one message")
        self.check_rows(1, req.n)
        if len(req.messages) > self.max_messages:
            raise APIError(
                400,
                f"messages holds {len(req.messages)} messages; the limit is "
                f"{self.max_messages} (the context: each takes a token or more)",
            )
        try:
            text = render_chat(self.tokenizer, req.messages, req.tools)
        except MessageError as e:
            raise APIError(400, str(e)) from e
        return self.encode(text, "messages")

    def chat_complete(self, req: ChatRequest, session: str | None):
        """`/v1/chat/completions`: the JSON reply, or an SSE stream with `req.stream`."""
        self.check_model(req)
        prompts = [self.chat_prompt(req)]
        stops = _stops(req.stop)
        default = min(self.default_max_tokens, self.max_tokens_limit)
        max_tokens = req.max_completion_tokens or req.max_tokens or default
        params = self.sampling(prompts, req, max_tokens, stops)
        req.skip_special_tokens = True  # chat content never shows <|end|> and friends
        tools = req.tools if req.tool_choice != "none" else None
        with Slot(self.recorder, session, params, req.n) as slot:
            outs = self.generate(prompts, req.n, slot.params)
            texts = [self.finish_text(c, req, stops) for c in outs]
            parses = [parse_tool_calls(t, tools, self.tool_parser) for t in texts]
            extra = [
                {"text": t, "content": p.content, "tool_calls": p.calls, "tool_call_error": p.error}
                for t, p in zip(texts, parses)
            ]
            request = {"messages": req.messages, "tools": req.tools, "tool_choice": req.tool_choice}
            call = _call_record("chat", request, prompts, outs, slot.params, extra, req.n)
            session = slot.finish(call)
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": rid, "object": "chat.completion", "created": now, "model": self.model_name}
        reasons = ["tool_calls" if p.calls else c.finish_reason for c, p in zip(outs, parses)]
        if req.stream:
            chunks = [
                {
                    "pieces": list(_pieces(self.tokenizer, c.token_ids, p.content, True))
                    if not p.calls
                    else [p.content],
                    "tool_calls": p.calls,
                    "finish_reason": r,
                }
                for c, p, r in zip(outs, parses, reasons)
            ]
            stream = stream_chat(base, chunks)
            return _with_session(StreamingResponse(stream, media_type="text/event-stream"), session)
        choices = self._chat_choices(req, outs, parses, reasons)
        return _with_session(
            {**base, "choices": choices, "usage": _usage(prompts, outs, req.n)}, session
        )

    def _chat_choices(
        self, req: ChatRequest, outs: list[Completion], parses: list, reasons: list[str]
    ) -> list[dict]:
        """One chat choice per output: the assistant message, its tool calls and logprobs."""
        choices = []
        for i, (c, p, reason) in enumerate(zip(outs, parses, reasons)):
            logprobs = None
            if req.logprobs:
                toks = [self.tokenizer.decode([t], skip_special_tokens=False) for t in c.token_ids]
                raw = [list(token_bytes(self.tokenizer, t)) for t in c.token_ids]
                logprobs = {
                    "content": [
                        {"token": s, "logprob": lp, "bytes": b, "top_logprobs": []}
                        for s, b, lp in zip(toks, raw, _finite(c.logprobs))
                    ]
                }
            message: dict[str, Any] = {"role": "assistant", "content": p.content}
            if p.calls:
                message["content"] = p.content or None
                message["tool_calls"] = p.calls
            choices.append(
                {"index": i, "message": message, "logprobs": logprobs, "finish_reason": reason}
            )
        return choices
