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
    POST   /batch                    {"calls": [{"session_id", "method", "args"}, ...],
                                      "timeout_s"?}        -> {"replies": [{"status", ...}, ...]}
    GET    /health                                         -> {"status": "ok", "env_id", "sessions", "pid"}

Errors are never a 200: 400 (unreadable JSON, wrong types, JSON too deep, a kwarg over
its limit, bad reset options), 401 (missing or wrong token; `/docs` and `/openapi.json`
need it too), 404 (no such session), 409 (step before reset), 413 (body too large), 422
(not an object), 501, 503 (full), 504 (a call past `--call-timeout-s`), 500 (the env
raised), each with `{"error": kind, "detail": text}`. Auth and body limits are the shared
`arborl.serving.Guard`. Env calls run on a thread pool, never on the event loop, so a slow
env does not stall `/health` or other sessions. Sessions idle past `--idle-timeout-s` are
closed.

`/batch` carries up to `--max-batch-calls` session calls (any of `CALLS`) in one request,
so a pool's whole step costs one HTTP exchange per replica instead of one per env (the
per-request cost, ~1 ms of routing and parsing, dominated a cheap env's step). Its calls
run concurrently on the thread pool like single calls, each bounded by `--call-timeout-s`
(or the body's smaller `timeout_s`); each reply is `{"status": 200, "value": <the single
call's reply>}` or `{"status": <code>, "error": kind, "detail": text}`, in call order, so
one failed call never fails its neighbours. The single-call routes stay as they were.
Snapshots are signed with a server-side secret (`ARBORL_SNAPSHOT_SECRET`), never
with the token. The env itself (a package's entry point) is trusted code.

    ARBORL_TOKEN=secret python -m arborl.envs.remote.http_server arborl/Maze-v0 --port 8000
"""

# No `from __future__ import annotations`: FastAPI must see the real `Request` class in the
# route signatures, which are defined inside `create_app` (fastapi is imported lazily).
import argparse
import asyncio
import json
import os
import secrets
import signal
import sys
import threading
import time
from typing import Any

from arborl.envs.remote.host import EnvHost, HostError
from arborl.serving import DEFAULT_LIMITS, Guard, Limits, install_handlers, resolve_key

TOKEN_ENV_VAR = "ARBORL_TOKEN"
SECRET_ENV_VAR = "ARBORL_SNAPSHOT_SECRET"
"""The snapshot-signing secret (hex), shared by the replicas of one `env serve`; never the
clients' token and never sent to them."""
CALLS = ("reset", "step", "snapshot", "restore", "oracle")
MAX_BATCH_CALLS = 1024
"""Default bound on the calls in one `/batch` body (`--max-batch-calls`)."""


def render_error(status: int, kind: str, detail: str) -> dict:
    """The env server's error body."""
    return {"error": kind, "detail": detail}


def host_lifespan(host, idle_timeout_s: float):
    """A FastAPI lifespan for an `EnvHost` server (REST and OpenEnv): a thread that ends
    sessions idle for `idle_timeout_s` while the app runs, and every session closed when
    it stops."""
    from contextlib import asynccontextmanager

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

    return lifespan


STUCK_GRACE_S = 2.0
"""Seconds past `call_timeout_s` before `/health` calls a replica stuck (see `create_app`)."""


def create_app(host: EnvHost, token: str, idle_timeout_s: float = 600.0,
               call_timeout_s: float = 60.0, limits: Limits = DEFAULT_LIMITS,
               max_batch_calls: int = MAX_BATCH_CALLS) -> Any:  # fmt: skip
    """The FastAPI app serving `host`'s sessions behind bearer-token auth (`Guard`).

    A call running past `call_timeout_s` gets 504 at once (its thread cannot be stopped), and
    `STUCK_GRACE_S` later `/health` answers 503 `stuck`, so the supervisor restarts the
    replica. The grace lets the 504 reach its client first: a supervisor that killed the
    replica the moment the deadline passed could beat the reply on a loaded machine, and the
    client saw a dropped connection instead of the 504.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    if not token:
        raise ValueError("the env server needs a token; give --token or $ARBORL_TOKEN")

    app = FastAPI(
        title=f"arborl env server: {host.env_id}", lifespan=host_lifespan(host, idle_timeout_s)
    )
    install_handlers(app, render_error)
    hint = f" (the server's --token / ${TOKEN_ENV_VAR})"
    app.add_middleware(Guard, token=token, render=render_error, limits=limits, hint=hint)

    @app.exception_handler(HostError)
    async def _host_error(request: Request, e: HostError):
        return JSONResponse(render_error(e.status, e.kind, e.detail), status_code=e.status)

    async def body(request: Request) -> dict[str, Any]:
        raw = await request.body()  # size and depth were checked by the Guard
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise HostError(400, "bad_json", f"the body is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise HostError(
                422, "bad_request", f"the body must be a JSON object, got {type(data).__name__}"
            )
        return data

    async def bounded(fn: Any, *args: Any, timeout_s: float = call_timeout_s) -> Any:
        try:
            return await asyncio.wait_for(run_in_threadpool(fn, *args), timeout_s)
        except TimeoutError:
            if timeout_s < call_timeout_s:  # the client's own, shorter deadline
                raise HostError(504, "deadline", f"the env call ran past the batch's "
                                f"timeout_s={timeout_s:g}s") from None  # fmt: skip
            raise HostError(504, "deadline", f"the env call ran past this server's deadline of "
                            f"{call_timeout_s:g}s (--call-timeout-s); the replica will be "
                            "restarted") from None  # fmt: skip

    def batch_calls(data: dict) -> tuple[list[tuple[str, str, dict]], float]:
        """The checked `(session_id, method, args)` calls and per-call deadline of a batch."""
        calls, timeout_s = data.get("calls"), data.get("timeout_s", call_timeout_s)
        if not isinstance(calls, list):
            raise HostError(400, "bad_request", "the batch body needs 'calls': a list of "
                            "{'session_id', 'method', 'args'} objects")  # fmt: skip
        if len(calls) > max_batch_calls:
            raise HostError(413, "batch_too_large", f"{len(calls)} calls in one batch; the "
                            f"limit is {max_batch_calls} (--max-batch-calls); send fewer")  # fmt: skip
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise HostError(400, "bad_request", f"timeout_s must be a number > 0, got "
                            f"{timeout_s!r:.80}")  # fmt: skip
        out = []
        for n, c in enumerate(calls):
            ok = isinstance(c, dict) and isinstance(c.get("session_id"), str)
            if not ok or c.get("method") not in CALLS or not isinstance(c.get("args", {}), dict):
                raise HostError(400, "bad_request", f"calls[{n}] must be {{'session_id': str, "
                                f"'method': one of {list(CALLS)}, 'args': object}}, got "
                                f"{c!r:.120}")  # fmt: skip
            out.append((c["session_id"], c["method"], c.get("args", {})))
        return out, min(float(timeout_s), call_timeout_s)

    async def one_of_batch(sid: str, method: str, args: dict, timeout_s: float) -> dict:
        try:
            value = await bounded(host.call, sid, method, args, timeout_s=timeout_s)
        except HostError as e:
            return {"status": e.status, **render_error(e.status, e.kind, e.detail)}
        return {"status": 200, "value": value}

    @app.get("/health")
    async def health():
        oldest = host.oldest_call_s()
        status = {"status": "ok" if oldest <= call_timeout_s + STUCK_GRACE_S else "stuck",
                  "env_id": host.env_id, "sessions": len(host.sessions), "pid": os.getpid(),
                  "oldest_call_s": round(oldest, 3)}  # fmt: skip
        return JSONResponse(status, status_code=200 if status["status"] == "ok" else 503)

    @app.post("/sessions")
    async def create(request: Request):
        kwargs = await body(request)
        return await bounded(host.create, kwargs)

    @app.post("/sessions/{sid}/{method}")
    async def call(sid: str, method: str, request: Request):
        args = await body(request)
        if method not in CALLS:
            raise HostError(
                404, "no_route", f"no call {method!r}; see the REST contract in the docs"
            )
        return await bounded(host.call, sid, method, args)

    @app.post("/batch")
    async def batch(request: Request):
        calls, timeout_s = batch_calls(await body(request))
        replies = await asyncio.gather(*(one_of_batch(*c, timeout_s) for c in calls))
        return {"replies": list(replies)}

    @app.delete("/sessions/{sid}")
    async def delete(sid: str, request: Request):
        await body(request)
        return await bounded(host.delete, sid)

    return app


def _watch_parent(parent_pid: int) -> None:
    """Exit (gracefully) when the process that started us is gone."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def exit_with_parent() -> None:
    """Make this server exit when the process that started it dies (pool-owned servers)."""
    from arborl.envs.remote.orphans import die_with_parent

    die_with_parent()
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()


def build_parser(
    prog: str = "python -m arborl.envs.remote.http_server",
    description: str = "Serve one env id over HTTP.",
) -> argparse.ArgumentParser:
    """The flags of an env server (this one and the OpenEnv one share them)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("env_id", help="env id, e.g. arborl/Maze-v0")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV_VAR}, "
                   "else --token-file, else a generated one, printed); a flag shows in ps")  # fmt: skip
    p.add_argument("--token-file", default=None, help="read the bearer token from this file")
    p.add_argument("--call-timeout-s", type=float, default=60.0,
                   help="per-call deadline; a call past it gets 504 and /health turns 503 "
                   "(default 60)")  # fmt: skip
    p.add_argument(
        "--max-kwarg-int",
        type=int,
        default=256,
        help="largest number (int or float) accepted in env kwargs, e.g. a grid size (default 256)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=Limits.max_body_bytes,
        help=f"largest request body (default {Limits.max_body_bytes})",
    )
    p.add_argument(
        "--max-json-depth",
        type=int,
        default=Limits.max_json_depth,
        help=f"deepest JSON nesting in a body (default {Limits.max_json_depth})",
    )
    p.add_argument("--max-batch-calls", type=int, default=MAX_BATCH_CALLS,
                   help=f"most session calls in one /batch body (default {MAX_BATCH_CALLS})")  # fmt: skip
    p.add_argument("--idle-timeout-s", type=float, default=600.0,
                   help="close sessions unused this long (default 600)")  # fmt: skip
    p.add_argument(
        "--max-sessions", type=int, default=4096, help="open sessions at most (default 4096)"
    )
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit when the parent process dies (pool-owned servers)")  # fmt: skip
    return p


def server_token_and_host(args) -> tuple[str, EnvHost]:
    """The token clients must present (`--token`, `--token-file` or $ARBORL_TOKEN; a
    generated one is printed when none is given) and the `EnvHost` of `args.env_id`, for
    the REST and OpenEnv servers. The snapshot key is the server's own secret (from the
    supervising pool, else random), never the token clients hold."""
    token, _ = resolve_key(args.token, TOKEN_ENV_VAR, args.token_file)
    if not token:
        token = secrets.token_urlsafe(24)
        print(f"no --token or ${TOKEN_ENV_VAR}: generated token {token}", flush=True)
    spec = json.loads(os.environ["ARBORL_ENV_SPEC"]) if os.environ.get("ARBORL_ENV_SPEC") else None
    secret = bytes.fromhex(os.environ.get(SECRET_ENV_VAR, "")) or secrets.token_bytes(32)
    return token, EnvHost(args.env_id, secret, spec, args.max_sessions, args.max_kwarg_int)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    token, host = server_token_and_host(args)
    import uvicorn

    host.create({})  # build one env now: a broken env fails at start, not on first use
    host.close_all()
    if args.exit_with_parent:
        exit_with_parent()
    limits = Limits(args.max_body_bytes, args.max_json_depth)
    app = create_app(
        host, token, args.idle_timeout_s, args.call_timeout_s, limits, args.max_batch_calls
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=3)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
