"""`Guard`: a plain ASGI middleware that checks the token and the body limits first.

It runs before FastAPI reads or validates anything, so an unauthenticated client cannot
make a server parse its body (a 50 MB upload or a 100k-deep JSON array is refused as 401,
413 or 400 at once), and every route but the open ones (`/health`) needs the token,
`/docs` and `/openapi.json` included. Each server renders the error in its own JSON shape
through `render(status, kind, message) -> dict`. A server whose credentials are not one
token (the training gateway: one key per session) passes `authorize(scope, header) -> bool`,
which then decides instead of `token`, still before the body is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from arborl.serving.auth import DEFAULT_LIMITS, Limits, bearer_ok, json_depth

Render = Callable[[int, str, str], dict]


class Guard:
    """Wrap ASGI `app`: auth (when `token`), body size and JSON depth, open `open_paths`."""

    def __init__(self, app: Any, token: str | None, render: Render, limits: Limits = DEFAULT_LIMITS,
                 open_paths: tuple[str, ...] = ("/health",), hint: str = "",
                 auth_kind: str = "unauthorized",
                 authorize: Callable[[dict, str | None], bool] | None = None) -> None:  # fmt: skip
        self.app, self.token, self.render, self.limits = app, token, render, limits
        self.open_paths, self.hint, self.auth_kind = open_paths, hint, auth_kind
        self.authorize = authorize

    async def _send_error(self, send: Any, status: int, kind: str, message: str) -> None:
        body = json.dumps(self.render(status, kind, message)).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]  # fmt: skip
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if (self.token or self.authorize) and scope["path"] not in self.open_paths:
            header = headers.get("authorization")
            ok = self.authorize(scope, header) if self.authorize else bearer_ok(header, self.token)
            if not ok:
                msg = "missing or wrong bearer token: send 'Authorization: Bearer <token>'"
                await self._send_error(send, 401, self.auth_kind, msg + self.hint)
                return
        limit = self.limits.max_body_bytes
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            await self._send_error(send, 413, "body_too_large", f"body of {length} bytes; "
                                   f"the limit is {limit} (max_body_bytes)")  # fmt: skip
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > limit:
                await self._send_error(send, 413, "body_too_large", f"body over {limit} "
                                       "bytes (max_body_bytes); send less")  # fmt: skip
                return
        raw = b"".join(chunks)
        max_depth = self.limits.max_json_depth
        if (depth := json_depth(raw, stop_at=max_depth)) > max_depth:
            await self._send_error(send, 400, "too_deep", f"JSON nested {depth}+ levels "
                                   f"deep; the limit is {max_depth} (max_json_depth)")  # fmt: skip
            return
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def openai_error(status: int, kind: str, message: str) -> dict:
    """The OpenAI-style error body (`arborl serve` and `arborl rm serve` reply with it)."""
    return {"error": {"message": message, "type": kind, "code": status}}


def install_handlers(app: Any, render: Render) -> None:
    """JSON errors in the server's shape for FastAPI's own failures: a malformed body is
    422 naming the field (the input is never echoed, so a NaN in it cannot break the
    reply), an HTTP error keeps its status, a request stopped by `arborl.serving.cancel`
    is 504 (over its time) or 499 (client gone), anything else is a 500 without a
    traceback."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    from arborl.serving.cancel import Cancelled

    def reply(status: int, kind: str, message: str) -> JSONResponse:
        return JSONResponse(render(status, kind, message), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Any, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return reply(422, "invalid_request_error",
                     f"malformed request body at {where}: {first.get('msg', 'invalid')}")  # fmt: skip

    @app.exception_handler(HTTPException)
    async def _http(_request: Any, e: HTTPException) -> JSONResponse:
        return reply(e.status_code, "http_error", str(e.detail))

    @app.exception_handler(Cancelled)
    async def _cancelled(_request: Any, e: Cancelled) -> JSONResponse:
        kind = "request_timeout" if e.reason == "deadline" else "client_closed_request"
        return reply(e.status, kind, e.message)

    @app.exception_handler(Exception)
    async def _internal(_request: Any, e: Exception) -> JSONResponse:
        return reply(500, "internal", f"internal error ({type(e).__name__}); see the server log")
