"""An OpenAI-compatible HTTP server around any `GenerationBackend` (`arborl serve`).

Lets external agent code, eval harnesses and the `openai` client talk to an arborl
checkpoint, and lets rollout workers on other machines share one model. Endpoints:
`/v1/models`, `/v1/completions`, `/v1/chat/completions` (both with `stream`), `/health`.

Design choices:
* Requests take the model one at a time, in arrival order (a fair queue), and each holds
  it for at most `max_request_s` (`--max-request-s`, default 300 s; past it a 504 names the
  limit). A client that disconnects, waiting or generating, stops its request within one
  decode step (`arborl.serving.cancel`). A request with a list of prompts (or `n > 1`) is
  one batched `generate` call, which is how rollouts should call it.
* Streaming is post-hoc: the completion is generated whole, then sent as one SSE chunk per
  token. Clients see the streaming protocol; time-to-first-token is the full latency.
* Bounded: `max_tokens` (at most the model's context, `max_tokens_limit`), rows
  (prompts x n, `max_rows`) and prompt token ids (in the vocabulary, shorter than the
  context) are checked before any work, each failure a 400 naming the field, the value and
  the limit. Auth, body size and JSON depth are the shared `arborl.serving.Guard`; without
  a key every route is open, which `arborl serve` warns about (and refuses off loopback).
* vLLM extensions: `skip_special_tokens` (default true), `include_stop_str_in_output`
  (default false), `top_k`, and `return_token_ids` (default false): each completion choice
  then carries the sampled `token_ids`, which `OpenAIBackend` stores instead of
  re-encoding text (not exact with BPE).
* Chat logprobs' `bytes` are each token's raw bytes (`token_bytes`), so the pieces of one
  UTF-8 character join back to it.
* Tool calling (`arborl.generation.tools`): `tools` reach the chat template (natively, or as
  Hermes-format text for templates without tool support), `tool` messages go back into it,
  and generated `<tool_call>` blocks come back as OpenAI `tool_calls` (`finish_reason`
  "tool_calls"). Output that tries a call and does not parse is returned as text, never a
  5xx. `--tool-parser` picks the parser (`TOOL_PARSERS`).
* A `CallRecorder` (the training gateway, `arborl.generation.gateway`) may check each call
  against its session, set the sampling parameters and record what was sampled.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from transformers import PreTrainedTokenizerBase

from arborl.generation.base import Completion, GenerationBackend, SamplingParams
from arborl.generation.sse import stream_chat, stream_completions
from arborl.generation.token_bytes import token_bytes
from arborl.generation.tools import TOOL_PARSERS, MessageError, parse_tool_calls, render_chat
from arborl.serving import (
    DEFAULT_LIMITS,
    Guard,
    Limits,
    ModelQueue,
    install_handlers,
    openai_error,
    run_request,
)

MAX_ROWS = 256
"""Default cap on prompts x n in one request (each row is a sequence generated)."""
MAX_REQUEST_S = 300.0
"""Default longest time one request may hold the model (seconds; `--max-request-s`)."""
FLAG = "`arborl serve --max-request-s`"
SESSION_HEADER = "x-arborl-session"
"""The request header naming a call's session (episode); also the response header."""


class _Base(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown OpenAI fields are ignored

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=1e4, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=0)
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_token_ids: bool = False
    user: str | None = None
    metadata: dict[str, Any] | None = None


class CompletionRequest(_Base):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False


class ChatRequest(_Base):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None


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
        """Check that the call may run in `session` (raise `APIError` if not) and return the
        sampling parameters to use and a ticket for `end`. Runs before the model is taken."""
        ...

    def end(self, ticket: Any, call: dict[str, Any] | None) -> str:
        """Record a finished call (`call`: kind, request, prompt_ids, choices, sampling; None:
        the call failed, record nothing); returns the session id it went to."""
        ...


def session_of(request: Request, req: _Base) -> str | None:
    """The session a call names: the URL path (`/s/<id>/v1/...`, see `SessionPath`), the
    `X-Arborl-Session` header, `metadata.session_id`, or the `user` field, first found."""
    sid = request.scope.get("arborl_session") or request.headers.get(SESSION_HEADER)
    if not sid and isinstance(req.metadata, dict):
        sid = req.metadata.get("session_id")
    return str(sid or req.user or "") or None


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


MIN_TEMPERATURE = 1e-4
"""Temperatures below this sample greedily (dividing logits by less overflows)."""


def _finite(values: list[float]) -> list[float | None]:
    """Logprobs as JSON allows them: -inf (a token of probability 0) becomes None."""
    return [v if math.isfinite(v) else None for v in values]


render_error = openai_error  # this server's error body


def _check_limits(prompts: list[list[int]], req: _Base, max_tokens: int, vocab: int,
                  max_tokens_limit: int, max_rows: int) -> None:  # fmt: skip
    """400 naming the field, value and limit for anything that sizes work too much."""
    if max_tokens > max_tokens_limit:
        raise APIError(400, f"max_tokens={max_tokens} is over this server's limit of "
                       f"{max_tokens_limit} (the model context; `arborl serve --max-tokens`); "
                       "ask for fewer")  # fmt: skip
    if len(prompts) * req.n > max_rows:
        raise APIError(400, f"{len(prompts)} prompt(s) x n={req.n} = {len(prompts) * req.n} "
                       f"sequences; the limit is {max_rows} (`arborl serve --max-rows`)")  # fmt: skip
    for i, p in enumerate(prompts):
        if len(p) >= max_tokens_limit:
            raise APIError(400, f"prompt[{i}] has {len(p)} tokens; the limit is "
                           f"{max_tokens_limit - 1} (the model context)")  # fmt: skip
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"prompt[{i}] holds token id {bad[0]}, outside the "
                           f"vocabulary [0, {vocab}); send text or valid ids")  # fmt: skip


def _encode(tokenizer: PreTrainedTokenizerBase, text: str, where: str) -> list[int]:
    try:
        text.encode("utf-8")
        return tokenizer.encode(text, add_special_tokens=False)
    except (UnicodeEncodeError, TypeError, ValueError) as e:
        raise APIError(400, f"{where} is not valid text (UTF-8 only, no lone surrogates): "
                       f"{type(e).__name__}") from e  # fmt: skip


def _with_session(result: Any, session: str | None) -> Any:
    """The handler's reply, with the session it was recorded in as a response header."""
    if session is None:
        return result
    if isinstance(result, dict):
        return JSONResponse(result, headers={SESSION_HEADER: session})
    result.headers[SESSION_HEADER] = session
    return result


def _usage(prompts: list[list[int]], outs: list[Completion], n: int) -> dict:
    """The OpenAI `usage` block: prompt tokens (once per sample), completion tokens, total."""
    p = sum(len(x) for x in prompts) * n
    c = sum(len(o.token_ids) for o in outs)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


@dataclass
class _Served:
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

    def check_model(self, req: _Base) -> None:
        """404 unless `req.model` is empty or the served model's id."""
        if req.model not in (None, "", self.model_name):
            raise APIError(
                404,
                f"model {req.model!r} is not served here; use {self.model_name!r}",
                "not_found_error",
            )

    def run(self, prompts: list[list[int]], req: _Base, max_tokens: int, stops: list[str], session):
        """Check limits, let the recorder begin, and generate `req.n` rows per prompt on the
        queue; returns (completions, sampling params, recorder ticket)."""
        _check_limits(prompts, req, max_tokens, self.vocab, self.max_tokens_limit, self.max_rows)
        params = SamplingParams(
            max_new_tokens=max_tokens,
            # A subnormal temperature overflows logits / T to inf (NaN logprobs): greedy.
            temperature=req.temperature if req.temperature >= MIN_TEMPERATURE else 0.0,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=stops,
            seed=req.seed,
        )
        ticket = None
        if self.recorder is not None:
            params, ticket = self.recorder.begin(session, params, len(prompts) * req.n)
        repeated = [p for p in prompts for _ in range(req.n)]
        try:
            with self.queue.hold():
                return self.backend.generate(repeated, params), params, ticket
        except BaseException as e:
            if self.recorder is not None:
                self.recorder.end(ticket, None)  # a failed call is not recorded
            if isinstance(e, ValueError):
                raise APIError(400, str(e)) from e
            raise

    def record(self, ticket, kind: str, request: dict, prompts, outs, params, extra) -> str | None:
        """Hand the finished call to the recorder; the session it went to (None: no recorder)."""
        if self.recorder is None:
            return None
        choices = [
            {"response_ids": list(c.token_ids), "logprobs": list(c.logprobs),
             "finish_reason": c.finish_reason, **x}
            for c, x in zip(outs, extra)
        ]  # fmt: skip
        sampling = {"temperature": params.temperature, "top_p": params.top_p,
                    "top_k": params.top_k, "max_tokens": params.max_new_tokens,
                    "stop": list(params.stop), "seed": params.seed,
                    "row_seeds": params.row_seeds}  # fmt: skip
        call = {"kind": kind, "request": request, "sampling": sampling,
                "prompt_ids": [list(p) for p in prompts], "n": len(outs) // len(prompts),
                "choices": choices}  # fmt: skip
        return self.recorder.end(ticket, call)

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
        prompts = [
            p if isinstance(p, list) else _encode(self.tokenizer, p, f"prompt[{i}]")
            for i, p in enumerate(prompt)
        ]
        stops = _stops(req.stop)
        max_tokens = req.max_tokens or min(16, self.max_tokens_limit)
        outs, params, ticket = self.run(prompts, req, max_tokens, stops, session)
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        choices = self._completion_choices(req, outs, stops)
        extra = [{"text": ch["text"]} for ch in choices]
        request = {"prompt": req.prompt}
        session = self.record(ticket, "completion", request, prompts, outs, params, extra)
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

    def chat_complete(self, req: ChatRequest, session: str | None):
        """`/v1/chat/completions`: the JSON reply, or an SSE stream with `req.stream`."""
        self.check_model(req)
        try:
            text = render_chat(self.tokenizer, req.messages, req.tools)
        except MessageError as e:
            raise APIError(400, str(e)) from e
        prompts = [_encode(self.tokenizer, text, "messages")]
        stops = _stops(req.stop)
        default = min(self.default_max_tokens, self.max_tokens_limit)
        max_tokens = req.max_completion_tokens or req.max_tokens or default
        outs, params, ticket = self.run(prompts, req, max_tokens, stops, session)
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": rid, "object": "chat.completion", "created": now, "model": self.model_name}
        req.skip_special_tokens = True  # chat content never shows <|end|> and friends
        tools = req.tools if req.tool_choice != "none" else None
        parses = [
            parse_tool_calls(self.finish_text(c, req, stops), tools, self.tool_parser) for c in outs
        ]
        extra = [{"text": self.finish_text(c, req, stops), "content": p.content,
                  "tool_calls": p.calls, "tool_call_error": p.error}
                 for c, p in zip(outs, parses)]  # fmt: skip
        request = {"messages": req.messages, "tools": req.tools, "tool_choice": req.tool_choice}
        session = self.record(ticket, "chat", request, prompts, outs, params, extra)
        reasons = ["tool_calls" if p.calls else c.finish_reason for c, p in zip(outs, parses)]
        if req.stream:
            chunks = [
                {"pieces": list(_pieces(self.tokenizer, c.token_ids, p.content, True))
                 if not p.calls else [p.content], "tool_calls": p.calls, "finish_reason": r}
                for c, p, r in zip(outs, parses, reasons)
            ]  # fmt: skip
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


def _add_routes(app: FastAPI, served: _Served, max_request_s: float | None) -> None:
    """The error handler and the routes, each a thin call into `served`."""

    @app.exception_handler(APIError)
    def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(render_error(exc.status, exc.kind, exc.message), exc.status)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "model": served.model_name}

    @app.get("/v1/models")
    def models() -> dict:
        name, created = served.model_name, served.created
        card = {"id": name, "object": "model", "created": created, "owned_by": "arborl"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        work = partial(served.complete, req, session_of(request, req))
        return await run_request(request, work, max_request_s, FLAG)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        work = partial(served.chat_complete, req, session_of(request, req))
        return await run_request(request, work, max_request_s, FLAG)


def create_app(
    backend: GenerationBackend,
    tokenizer: PreTrainedTokenizerBase,
    model_name: str,
    api_key: str | None = None,
    default_max_tokens: int = 256,
    max_tokens_limit: int | None = None,
    max_rows: int = MAX_ROWS,
    limits: Limits = DEFAULT_LIMITS,
    max_request_s: float | None = MAX_REQUEST_S,
    tool_parser: str = "hermes",
    recorder: CallRecorder | None = None,
    guard: dict[str, Any] | None = None,
) -> FastAPI:
    """Build the FastAPI app serving `backend` under the model id `model_name`.

    With `api_key`, every route but `/health` needs `Authorization: Bearer <api_key>` (else
    401, before the body is read). `default_max_tokens` applies to chat requests that give
    no limit; `max_tokens_limit` (default: the model context) bounds every request.
    `max_request_s` (None or 0: no limit) bounds how long one request holds the model.
    `tool_parser` names the `TOOL_PARSERS` entry that reads generated tool calls;
    `recorder` (the gateway) checks and records every call; `guard` overrides `Guard`'s
    keyword arguments (the gateway's per-session `authorize`).
    """
    if max_request_s is not None and not max_request_s >= 0:
        raise ValueError(f"max_request_s={max_request_s} must be >= 0 (0: no limit)")
    TOOL_PARSERS.get(tool_parser)  # an unknown parser fails here, listing the known ones
    app = FastAPI(title="arborl serve", version="1")
    context = int(getattr(backend, "max_length", 0) or 0)
    max_tokens_limit = max_tokens_limit or (context if 0 < context < 10**9 else 4096)
    served = _Served(
        backend=backend,
        tokenizer=tokenizer,
        model_name=model_name,
        default_max_tokens=default_max_tokens,
        max_tokens_limit=max_tokens_limit,
        max_rows=max_rows,
        tool_parser=tool_parser,
        recorder=recorder,
    )
    install_handlers(app, render_error)
    guard_kwargs = {"token": api_key, "render": render_error, "limits": limits,
                    "auth_kind": "authentication_error", **(guard or {})}  # fmt: skip
    app.add_middleware(Guard, **guard_kwargs)
    _add_routes(app, served, max_request_s)
    return app
