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
  (prompts x n, `max_rows`), empty prompts and messages, the number of messages, the prompt
  text in characters (before it is tokenized) and prompt token ids (in the vocabulary,
  shorter than the context) are checked before any work (`arborl.generation.served`), each
  failure a 400 naming the field, the value and the limit. Auth, body size and JSON depth are the shared `arborl.serving.Guard`; without
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
  against its session, set the sampling parameters and record what was sampled. A call
  holds its in-flight slot there as a context manager (`served.Slot`), so no failure can
  leak it, and the session id it names is checked (`check_session_id`) before it is
  admitted.
"""

from __future__ import annotations

import unicodedata
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from transformers import PreTrainedTokenizerBase

from arborl.generation.base import GenerationBackend
from arborl.generation.requests import ChatRequest, CompletionRequest, _Base
from arborl.generation.served import SESSION_HEADER, APIError, CallRecorder, Served
from arborl.generation.tools import TOOL_PARSERS
from arborl.serving import (
    DEFAULT_LIMITS,
    Guard,
    Limits,
    install_handlers,
    openai_error,
    run_request,
)

__all__ = [
    "APIError",
    "CallRecorder",
    "SESSION_HEADER",
    "check_session_id",
    "create_app",
    "session_of",
]

MAX_ROWS = 256
"""Default cap on prompts x n in one request (each row is a sequence generated)."""
MAX_REQUEST_S = 300.0
"""Default longest time one request may hold the model (seconds; `--max-request-s`)."""
FLAG = "`arborl serve --max-request-s`"
MAX_SESSION_ID_BYTES = 128
"""Longest session id, in bytes of UTF-8 (a record's file name is bounded from it)."""
_NOT_IN_IDS = {"Cc", "Cf", "Cs", "Zl", "Zp"}
"""Unicode categories no session id may hold: controls (NUL too), invisible formatting
(U+202E turns a listing around), lone surrogates and line breaks."""


def check_session_id(sid: str, where: str) -> str:
    """`sid` if it is a valid session id, else a 400 naming `where` it came from and the rule:
    1 to 128 bytes of UTF-8, no control, format or line-break characters. Checked before a
    call is admitted, so a refused id is never recorded."""
    size = len(sid.encode("utf-8", errors="surrogatepass"))
    bad = None
    if size <= MAX_SESSION_ID_BYTES:  # a long id is refused without a look at each character
        bad = next((c for c in sid if unicodedata.category(c) in _NOT_IN_IDS), None)
    if 0 < size <= MAX_SESSION_ID_BYTES and bad is None:
        return sid
    got = f"{size} bytes" if bad is None else f"the character U+{ord(bad):04X}"
    raise APIError(
        400,
        f"the session id in {where} is not valid ({got}): a session id is 1 to "
        f"{MAX_SESSION_ID_BYTES} bytes of UTF-8 with no control, format or "
        "line-break characters",
    )


def session_of(request: Request, req: _Base) -> str | None:
    """The session a call names: the URL path (`/s/<id>/v1/...`, see `SessionPath`), the
    `X-Arborl-Session` header, `metadata.session_id`, or the `user` field, first found;
    400 for an id that breaks `check_session_id`'s rule."""
    carriers = [
        ("the URL path (/s/<id>/v1)", request.scope.get("arborl_session")),
        ("the X-Arborl-Session header", request.headers.get(SESSION_HEADER)),
        (
            "metadata.session_id",
            req.metadata.get("session_id") if isinstance(req.metadata, dict) else None,
        ),
        ("user", req.user),
    ]
    for where, sid in carriers:
        if sid:
            return check_session_id(str(sid), where)
    return None


render_error = openai_error  # this server's error body


def _add_routes(app: FastAPI, served: Served, max_request_s: float | None) -> None:
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

    def session(request: Request, req: _Base) -> str | None:
        # only a recorder has sessions; plain `arborl serve` ignores what a call names
        return session_of(request, req) if served.recorder is not None else None

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        work = partial(served.complete, req, session(request, req))
        return await run_request(request, work, max_request_s, FLAG)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        work = partial(served.chat_complete, req, session(request, req))
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
    served = Served(
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
