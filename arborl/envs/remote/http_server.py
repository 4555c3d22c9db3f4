"""The HTTP env server (FastAPI + uvicorn), run in the env's own interpreter.

REST contract (bodies and replies are JSON objects; every route but `/health` needs
`Authorization: Bearer <token>`):

    POST   /sessions                 body: env kwargs      -> {"session_id", "env_id", "max_turns"}
    POST   /sessions/{id}/reset      {"seed", "options"}   -> {"observation", "info", "instruction", "task"}
    POST   /sessions/{id}/step       {"action"}            -> {"observation", "reward", "terminated", "truncated", "info"}
    POST   /sessions/{id}/snapshot                         -> {"snapshot"}  (an opaque signed string)
    POST   /sessions/{id}/restore    {"snapshot"}          -> {"restored": true, "instruction", "task"}
    POST   /sessions/{id}/oracle                           -> {"action"}    (501 without an oracle)
    DELETE /sessions/{id}                                  -> {"deleted"}
    GET    /health                                         -> {"status": "ok", "env_id", "sessions", "pid"}

Errors are never a 200: 400 (unreadable JSON, wrong types), 401 (missing or wrong token),
404 (no such session), 409 (step before reset), 422 (not an object), 501, 503 (full), 500
(the env raised), each with `{"error": kind, "detail": text}`. Env calls run on a thread
pool, never on the event loop, so a slow env does not stall `/health` or other sessions.
Sessions idle past `--idle-timeout-s` are closed.

    ARBORL_TOKEN=secret python -m arborl.envs.remote.http_server arborl/Maze-v0 --port 8000
"""

# No `from __future__ import annotations`: FastAPI must see the real `Request` class in the
# route signatures, which are defined inside `create_app` (fastapi is imported lazily).
import argparse
import hmac
import json
import os
import secrets
import signal
import sys
import threading
import time
from typing import Any

from arborl.envs.remote.host import EnvHost, HostError

TOKEN_ENV_VAR = "ARBORL_TOKEN"


def create_app(host: EnvHost, token: str, idle_timeout_s: float = 600.0) -> Any:
    """The FastAPI app serving `host`'s sessions behind bearer-token auth."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    expected = f"Bearer {token}".encode()

    @asynccontextmanager
    async def lifespan(app):
        stop = threading.Event()
        period = max(0.05, min(5.0, idle_timeout_s / 4))

        def sweep() -> None:
            while not stop.wait(period):
                host.sweep_idle(idle_timeout_s)

        threading.Thread(target=sweep, daemon=True, name="idle-sweeper").start()
        yield
        stop.set()
        host.close_all()

    app = FastAPI(title=f"arborl env server: {host.env_id}", lifespan=lifespan)

    def error(status: int, kind: str, detail: str) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"error": kind, "detail": detail}, status_code=status, headers=headers)

    @app.exception_handler(HostError)
    async def _host_error(request: Request, e: HostError):
        return error(e.status, e.kind, e.detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        return error(e.status_code, "http", str(e.detail))

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception):
        return error(500, "internal", f"{e!r:.500}")

    async def body(request: Request) -> dict[str, Any]:
        if not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            raise HostError(401, "unauthorized", "missing or wrong bearer token: send "
                            "'Authorization: Bearer <token>' (the server's --token / "
                            f"{TOKEN_ENV_VAR})")  # fmt: skip
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise HostError(400, "bad_json", f"the body is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise HostError(
                422, "bad_request", f"the body must be a JSON object, got {type(data).__name__}"
            )
        return data

    @app.get("/health")
    async def health():
        return {"status": "ok", "env_id": host.env_id, "sessions": len(host.sessions),
                "pid": os.getpid()}  # fmt: skip

    @app.post("/sessions")
    async def create(request: Request):
        kwargs = await body(request)
        return await run_in_threadpool(host.create, kwargs)

    @app.post("/sessions/{sid}/{method}")
    async def call(sid: str, method: str, request: Request):
        args = await body(request)
        if method not in ("reset", "step", "snapshot", "restore", "oracle"):
            raise HostError(
                404, "no_route", f"no call {method!r}; see the REST contract in the docs"
            )
        return await run_in_threadpool(host.call, sid, method, args)

    @app.delete("/sessions/{sid}")
    async def delete(sid: str, request: Request):
        await body(request)
        return await run_in_threadpool(host.delete, sid)

    return app


def _watch_parent(parent_pid: int) -> None:
    """Exit (gracefully) when the process that started us is gone."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m arborl.envs.remote.http_server",
                                description="Serve one env id over HTTP.")  # fmt: skip
    p.add_argument("env_id", help="env id, e.g. arborl/Maze-v0")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV_VAR}, "
                   "else a generated one, printed)")  # fmt: skip
    p.add_argument("--idle-timeout-s", type=float, default=600.0,
                   help="close sessions unused this long (default 600)")  # fmt: skip
    p.add_argument(
        "--max-sessions", type=int, default=4096, help="open sessions at most (default 4096)"
    )
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit when the parent process dies (pool-owned servers)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV_VAR)
    if not token:
        token = secrets.token_urlsafe(24)
        print(f"no --token or ${TOKEN_ENV_VAR}: generated token {token}", flush=True)
    import uvicorn

    spec = json.loads(os.environ["ARBORL_ENV_SPEC"]) if os.environ.get("ARBORL_ENV_SPEC") else None
    host = EnvHost(args.env_id, token.encode(), spec, args.max_sessions)
    host.create({})  # build one env now: a broken env fails at start, not on first use
    host.close_all()
    if args.exit_with_parent:
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    app = create_app(host, token, args.idle_timeout_s)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=3)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
