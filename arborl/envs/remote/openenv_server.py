"""Any arborl env as an OpenEnv server (`arborl env serve ID --protocol openenv`).

OpenEnv (`openenv-core`, the env-server standard TRL uses) keeps one env per WebSocket
connection. The wire format below is openenv-core 0.3.0's, read from its source
(`env_server/http_server.py`, `serialization.py`, `env_client.py`), and the tests drive
this server with that package's own `GenericEnvClient`:

    WS  /ws   one env per connection; text frames, one JSON object each
      {"type": "reset", "data": {"seed", "episode_id", "options", "env_kwargs"}}  (all optional)
      {"type": "step",  "data": {"action": "<text>"}}
          -> {"type": "observation", "data": {"observation": OBS, "reward", "done"}}
      {"type": "state"} -> {"type": "state", "data": {"episode_id", "step_count", "env_id", "max_turns"}}
      {"type": "close"} -> the server closes the connection (and the env)
      a session gone (idle past --idle-timeout-s, or deleted) -> the server closes the
          connection with code 4000 and a reason naming why: reconnect for a new env
      arborl extensions: "snapshot" -> {"snapshot"}; "restore" {"snapshot"}; "oracle" -> {"action"}
      errors: {"type": "error", "data": {"message", "code"}} with OpenEnv's codes
    GET /health -> {"status": "healthy"} (503 "unhealthy" while a call is past its deadline)
    GET /metadata, GET /schema; POST /reset (stateless, as OpenEnv's: a fresh env per request)

OBS is `{"text", "info", "terminated", "truncated"}` (plus `"instruction"` on reset): OpenEnv
has one `done` flag and drops observation metadata on the wire, so `won`, `valid_action`,
`anchor` and the rest travel in `info`. `reward` is null on reset, as in OpenEnv.

Security follows the env server's (docs/security.md) where the protocol lets it. A token
is always required; `/health` is the only open route. OpenEnv's client sends no headers,
so besides `Authorization: Bearer <token>` the token is accepted as the first path
segment: `base_url="http://127.0.0.1:8000/<token>"` makes the stock client open
`ws://127.0.0.1:8000/<token>/ws`. The WebSocket handshake is refused (403) before any env
is built; a frame over `--max-body-bytes` closes the connection (1009) and one nested
deeper than `--max-json-depth` is refused before parsing; `--max-sessions` bounds the open
connections; every env call has `--call-timeout-s`; idle sessions are closed. What the
protocol cannot give: the token in a URL can end up in proxy logs (use the header where
the client allows it), and there is no per-session id a client could resume after a drop.
"""

# No `from __future__ import annotations`: FastAPI must see the real WebSocket/Request
# classes in the route signatures (fastapi is imported lazily, inside `create_app`).
import asyncio
import hmac
import json
import sys
import uuid
from typing import Any

from arborl.envs.remote.host import EnvHost, HostError, jsonable
from arborl.serving import DEFAULT_LIMITS, Guard, Limits, bearer_ok, json_depth

RESET_KEYS = ("seed", "episode_id", "options", "env_kwargs")
STEP_KEYS = ("action", "metadata")  # `metadata`: OpenEnv's Action base field, ignored here
EXTENSIONS = ("snapshot", "restore", "oracle")
ERROR_CODES = {400: "VALIDATION_ERROR", 401: "UNAUTHORIZED", 404: "SESSION_ERROR",
               409: "VALIDATION_ERROR", 413: "VALIDATION_ERROR", 501: "UNKNOWN_TYPE",
               503: "CAPACITY_REACHED"}  # fmt: skip
"""HostError status -> OpenEnv's WSErrorCode (anything else is EXECUTION_ERROR; 401 has
no OpenEnv code, whose servers have no auth)."""


_TEXT = {"type": "string"}
SCHEMA = {
    "action": {"type": "object", "properties": {"action": _TEXT}, "required": ["action"]},
    "observation": {"type": "object", "properties": {
        "text": _TEXT, "info": {"type": "object"}, "instruction": _TEXT,
        "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"}}},
    "state": {"type": "object", "properties": {
        "episode_id": _TEXT, "step_count": {"type": "integer"}, "env_id": _TEXT,
        "max_turns": {"type": "integer"}}},
}  # fmt: skip
"""`GET /schema`: the JSON schemas of the action, observation and state (OpenEnv's route)."""


class TokenPrefix:
    """ASGI wrapper: a request for `/<token>/rest` is served as `/rest` with the token as
    its bearer header, so clients that cannot send headers can still authenticate."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.prefix = app, ("/" + token).encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope["path"].encode()
            n = len(self.prefix)
            head, rest = path[:n], path[n:]
            if hmac.compare_digest(head, self.prefix) and rest[:1] in (b"", b"/"):
                headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"authorization"]
                headers.append((b"authorization", b"Bearer " + self.prefix[1:]))
                rest_path = rest.decode() or "/"
                scope = {**scope, "path": rest_path, "raw_path": rest_path.encode(),
                         "headers": headers}  # fmt: skip
        await self.app(scope, receive, send)


def render_error(status: int, kind: str, detail: str) -> dict:
    """HTTP error body: OpenEnv's error data shape."""
    return {"error": kind, "message": detail, "code": ERROR_CODES.get(status, "EXECUTION_ERROR")}


def to_openenv(out: dict[str, Any], reset: bool) -> dict[str, Any]:
    """An `EnvHost` reset/step reply as OpenEnv's `{"observation", "reward", "done"}`."""
    terminated, truncated = bool(out.get("terminated")), bool(out.get("truncated"))
    obs = {"text": out["observation"], "info": out["info"], "terminated": terminated,
           "truncated": truncated}  # fmt: skip
    if reset:
        obs["instruction"] = out.get("instruction", "")
    return {"observation": obs, "reward": None if reset else out["reward"],
            "done": terminated or truncated}  # fmt: skip


def _check_keys(data: Any, allowed: tuple[str, ...], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise HostError(400, "bad_request", f"{what} data must be an object, got {data!r:.80}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise HostError(400, "bad_request", f"{what} data has unknown keys {unknown}; "
                        f"allowed: {list(allowed)}")  # fmt: skip
    return data


class Connection:
    """One WebSocket's env session: its id in the `EnvHost`, kwargs, episode and steps."""

    def __init__(self, host: EnvHost, env_kwargs: dict[str, Any]) -> None:
        self.host, self.sid = host, uuid.uuid4().hex
        self.kwargs = dict(env_kwargs)
        self.max_turns = host.create(self.kwargs, self.sid)["max_turns"]
        self.episode_id: str | None = None
        self.step_count = 0

    def handle(self, kind: str, data: Any) -> tuple[str, dict[str, Any]]:
        """(reply type, reply data) for one message; raises HostError."""
        if kind == "reset":
            data = _check_keys(data or {}, RESET_KEYS, "reset")
            kwargs = data.get("env_kwargs")
            if kwargs is not None and kwargs != self.kwargs:
                if not isinstance(kwargs, dict):
                    raise HostError(400, "bad_request", "env_kwargs must be an object")
                self.max_turns = self.host.create(kwargs, self.sid)["max_turns"]
                self.kwargs = dict(kwargs)
            args = {"seed": data.get("seed"), "options": data.get("options")}
            out = self.host.call(self.sid, "reset", args)
            self.episode_id = str(data.get("episode_id") or uuid.uuid4().hex)
            self.step_count = 0
            return "observation", to_openenv(out, reset=True)
        if kind == "step":
            data = _check_keys(data, STEP_KEYS, "step")
            out = self.host.call(self.sid, "step", {"action": data.get("action")})
            self.step_count += 1
            return "observation", to_openenv(out, reset=False)
        if kind == "state":
            self.host.touch(self.sid)
            return "state", {"episode_id": self.episode_id, "step_count": self.step_count,
                             "env_id": self.host.env_id, "max_turns": self.max_turns}  # fmt: skip
        if kind in EXTENSIONS:
            args = _check_keys(data or {}, ("snapshot",), kind)
            return kind, self.host.call(self.sid, kind, args)
        raise HostError(501, "unknown_type", f"unknown message type {kind!r}; known: reset, "
                        f"step, state, close, {', '.join(EXTENSIONS)}")  # fmt: skip

    def close(self) -> None:
        try:
            self.host.delete(self.sid)
        except HostError:
            pass  # already closed by the idle sweeper


def parse_message(raw: str, limits: Limits) -> dict[str, Any]:
    """One WebSocket frame as a message, its depth checked before it is parsed."""
    depth = json_depth(raw.encode(), stop_at=limits.max_json_depth)
    if depth > limits.max_json_depth:
        raise HostError(400, "too_deep", f"JSON nested {depth}+ levels deep; the limit is "
                        f"{limits.max_json_depth} (--max-json-depth)")  # fmt: skip
    try:
        msg = json.loads(raw)
    except ValueError as e:
        raise HostError(400, "bad_json", f"not valid JSON: {e}") from e
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise HostError(400, "bad_request", 'a message is {"type": ..., "data": ...}')
    return msg


SESSION_GONE = 4000
"""WebSocket close code (the application range) for a connection whose session has ended."""
SESSION_POLL_S = 0.5
"""How often an idle connection checks that its session is still open (seconds)."""


def error_frame(e: HostError) -> str:
    """OpenEnv's error message for a refused call."""
    code = ERROR_CODES.get(e.status, "EXECUTION_ERROR")
    return json.dumps({"type": "error", "data": {"message": f"{e.kind}: {e.detail}", "code": code}})


async def serve_connection(websocket: Any, host: EnvHost, env_kwargs: dict, limits: Limits,
                           bounded: Any) -> None:  # fmt: skip
    """One accepted WebSocket: its env session, message by message, until close."""
    from starlette.websockets import WebSocketDisconnect

    try:
        conn = await bounded(Connection, host, env_kwargs)
    except HostError as e:  # full, or the env cannot be built
        await websocket.send_text(error_frame(e))
        await websocket.close()
        return
    code, reason = 1000, ""
    watcher = asyncio.create_task(_close_when_session_ends(websocket, host, conn.sid))
    try:
        while True:
            raw = await websocket.receive_text()
            try:
                msg = parse_message(raw, limits)
                if msg["type"] == "close":
                    break
                kind, data = await bounded(conn.handle, msg["type"], msg.get("data"))
                await websocket.send_text(json.dumps({"type": kind, "data": jsonable(data)}))
            except HostError as e:
                await websocket.send_text(error_frame(e))
                if e.status in (404, 504):  # the session is gone, or its env is stuck
                    code, reason = SESSION_GONE, f"{e.kind}: reconnect for a new env"
                    break
    except (WebSocketDisconnect, RuntimeError):  # the client left, or the watcher closed
        pass
    finally:
        watcher.cancel()
        conn.close()
    try:
        await websocket.close(code=code, reason=reason)
    except RuntimeError:
        pass  # already closed (by the client, or by the watcher)


async def _close_when_session_ends(websocket: Any, host: EnvHost, sid: str) -> None:
    """Close the connection once its session is gone (the idle sweeper ended it): a client
    that sent nothing learns it at once, with the reason, and can reconnect, instead of
    holding an open socket whose every message gets `no_session`."""
    while host.has_session(sid):
        await asyncio.sleep(SESSION_POLL_S)
    await websocket.close(code=SESSION_GONE, reason="idle_timeout: this connection's env was "
                          "closed after --idle-timeout-s without a message; reconnect")  # fmt: skip


def create_app(host: EnvHost, token: str, env_kwargs: dict | None = None,
               idle_timeout_s: float = 600.0, call_timeout_s: float = 60.0,
               limits: Limits = DEFAULT_LIMITS) -> Any:  # fmt: skip
    """The ASGI app: OpenEnv's routes over `host`, behind the token (header or path)."""
    from fastapi import FastAPI, Request, WebSocket
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    from arborl.envs.remote.http_server import TOKEN_ENV_VAR, host_lifespan

    if not token:
        raise ValueError("the OpenEnv server needs a token; give --token or $ARBORL_TOKEN")
    env_kwargs = dict(env_kwargs or {})

    app = FastAPI(
        title=f"arborl OpenEnv server: {host.env_id}", lifespan=host_lifespan(host, idle_timeout_s)
    )
    hint = f" (the server's --token / ${TOKEN_ENV_VAR}; or the base URL http://HOST:PORT/<token>)"
    app.add_middleware(Guard, token=token, render=render_error, limits=limits, hint=hint)

    async def bounded(fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.wait_for(run_in_threadpool(fn, *args), call_timeout_s)
        except TimeoutError:
            raise HostError(504, "deadline", f"the env call ran past this server's deadline "
                            f"of {call_timeout_s:g}s (--call-timeout-s)") from None  # fmt: skip

    @app.get("/health")
    async def health():
        ok = host.oldest_call_s() <= call_timeout_s
        return JSONResponse({"status": "healthy" if ok else "unhealthy"},
                            status_code=200 if ok else 503)  # fmt: skip

    @app.get("/metadata")
    async def metadata():
        return {"name": host.env_id, "description": f"arborl env {host.env_id} over OpenEnv",
                "version": None, "author": None, "documentation_url": None,
                "readme_content": None}  # fmt: skip

    @app.get("/schema")
    async def schema():
        return SCHEMA

    @app.post("/reset")
    async def http_reset(request: Request):  # stateless, as OpenEnv's HTTP /reset
        raw = await request.body()  # size and depth were checked by the Guard
        try:
            data = json.loads(raw) if raw.strip() else {}
            conn = await bounded(Connection, host, env_kwargs)
        except ValueError as e:
            return JSONResponse(render_error(400, "bad_json", str(e)), status_code=400)
        except HostError as e:
            return JSONResponse(render_error(e.status, e.kind, e.detail), status_code=e.status)
        try:
            _, out = await bounded(conn.handle, "reset", data)
            return out
        except HostError as e:
            return JSONResponse(render_error(e.status, e.kind, e.detail), status_code=e.status)
        finally:
            conn.close()

    @app.post("/step")
    async def http_step():
        return JSONResponse(render_error(409, "needs_websocket", "stateless HTTP /step would "
                            "step a fresh, un-reset env; open WS /ws for an episode"),
                            status_code=409)  # fmt: skip

    @app.websocket("/ws")
    async def ws(websocket: WebSocket):
        if not bearer_ok(websocket.headers.get("authorization"), token):
            await websocket.close(code=1008)  # before accept: the handshake gets 403
            return
        await websocket.accept()
        await serve_connection(websocket, host, env_kwargs, limits, bounded)

    return TokenPrefix(app, token)


def main(argv: list[str] | None = None) -> int:
    from arborl.envs.remote.http_server import (
        build_parser,
        exit_with_parent,
        server_token_and_host,
    )

    p = build_parser("python -m arborl.envs.remote.openenv_server",
                     "Serve one env id over OpenEnv's WebSocket protocol.")  # fmt: skip
    p.add_argument("--env-kwargs", default="{}",
                   help='JSON object of env constructor kwargs, e.g. \'{"split": "test"}\' '
                   "(a client may send others in reset's env_kwargs)")  # fmt: skip
    args = p.parse_args(argv)
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except ValueError as e:
        p.error(f"--env-kwargs {args.env_kwargs!r} is not JSON: {e}")
    if not isinstance(env_kwargs, dict):
        p.error(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    token, host = server_token_and_host(args)
    import uvicorn

    Connection(host, env_kwargs).close()  # a broken env or bad kwargs fail at start
    if args.exit_with_parent:
        exit_with_parent()
    limits = Limits(args.max_body_bytes, args.max_json_depth)
    app = create_app(host, token, env_kwargs, args.idle_timeout_s, args.call_timeout_s, limits)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=3, ws_max_size=limits.max_body_bytes)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
