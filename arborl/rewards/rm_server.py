"""`arborl rm serve`: a reward model behind an HTTP scoring endpoint.

Lets the trainer, search and external code on other machines share one reward model.
Endpoints (JSON in, JSON out):

    GET  /health            no auth: {"status": "ok", "kind": "orm"|"prm"}
    GET  /v1/info           the model's kind, context length and name
    POST /v1/score          {"trajectories": [Trajectory dicts]} ->
                            {"scores": [float], "step_scores": [[float | null]]}
                            with "last_only": true, only "scores" (each trajectory's
                            last step; one sequence each, as search evaluators need)

Same security defaults as the env servers: every route but `/health` needs
`Authorization: Bearer <token>`; the token comes from `--token`, else the `ARBORL_TOKEN`
environment variable, else a random one is generated and printed; the server binds
127.0.0.1 unless told otherwise. Errors are JSON `{"error": {"message", "type", "code"}}`
with the matching status (401 auth, 400 bad records, 413 too many trajectories, steps or
characters, 422 malformed body). Auth runs before the body is read and the body size and
JSON depth are bounded (the shared `arborl.serving.Guard`); each trajectory's steps
(`max_steps`) and the request's text (`max_chars`) are capped before anything is
tokenized, since scoring re-renders every step's prefix. Requests take the model one at a
time in arrival order (a fair queue), each scored as batched forward passes, and hold it
for at most `max_request_s` (`--max-request-s`, default 300 s; past it a 504 names the
limit). A client that disconnects, waiting or being scored, stops its request before the
next forward batch (`arborl.serving.cancel`).
"""

from __future__ import annotations

import math
import secrets
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from arborl.data.trajectory import Trajectory
from arborl.serving import (
    DEFAULT_LIMITS,
    Guard,
    Limits,
    ModelQueue,
    install_handlers,
    openai_error,
    resolve_key,
    run_request,
)

MAX_REQUEST_S = 300.0
"""Default longest time one request may hold the model (seconds; `--max-request-s`)."""
FLAG = "`arborl rm serve --max-request-s`"
TOKEN_ENV = "ARBORL_TOKEN"
"""Environment variable holding the bearer token when `--token` is not given."""


def resolve_token(token: str | None, token_file: str | None = None) -> tuple[str, bool]:
    """(token, generated): `token`, else `$ARBORL_TOKEN`, else `token_file`, else a fresh
    random one."""
    key, _ = resolve_key(token, TOKEN_ENV, token_file)
    return (key, False) if key else (secrets.token_urlsafe(24), True)


class ScoreRequest(BaseModel):
    trajectories: list[dict[str, Any]] = Field(min_length=1)
    batch_size: int | None = Field(default=None, ge=1, le=1024)
    last_only: bool = False


class RMServerError(Exception):
    """An error sent to the client as JSON with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


render_error = openai_error  # this server's error body (the OpenAI shape)


def _check_text(value: Any, where: str) -> int:
    """len(value) for a valid string field, else a 400 naming it."""
    if not isinstance(value, str):
        raise RMServerError(400, f"{where} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RMServerError(400, f"{where} is not valid UTF-8 text (lone surrogate?)") from e
    return len(value)


def _check_record(i: int, d: dict, max_steps: int) -> int:
    """Validate trajectories[i] before it is built; returns its number of characters."""
    steps, meta = d.get("steps", []), d.get("meta", {})
    if not isinstance(steps, list):
        raise RMServerError(400, f"trajectories[{i}].steps must be a list")
    if len(steps) > max_steps:
        raise RMServerError(413, f"trajectories[{i}] has {len(steps)} steps; the limit is "
                            f"{max_steps} per trajectory (`rm serve --max-steps`)",
                            "request_too_large")  # fmt: skip
    if not isinstance(meta, dict):
        raise RMServerError(400, f"trajectories[{i}].meta must be an object, got "
                            f"{type(meta).__name__}")  # fmt: skip
    chars = _check_text(d.get("instruction", ""), f"trajectories[{i}].instruction")
    for k, step in enumerate(steps):
        if not isinstance(step, dict):
            raise RMServerError(400, f"trajectories[{i}].steps[{k}] must be an object")
        for name in ("observation", "action"):
            chars += _check_text(step.get(name, ""), f"trajectories[{i}].steps[{k}].{name}")
    return chars


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def create_app(
    model: Any,
    token: str,
    model_name: str = "rm",
    max_trajectories: int = 1024,
    batch_size: int = 32,
    max_steps: int = 256,
    max_chars: int = 1_000_000,
    limits: Limits = DEFAULT_LIMITS,
    max_request_s: float | None = MAX_REQUEST_S,
) -> FastAPI:
    """The FastAPI app scoring with `model` (a `RewardModel`); `token` is required.
    `max_request_s` (None or 0: no limit) bounds how long one request holds the model."""
    if not token:
        raise ValueError("token is empty; the reward-model server always requires one")
    if max_request_s is not None and not max_request_s >= 0:
        raise ValueError(f"max_request_s={max_request_s} must be >= 0 (0: no limit)")
    app = FastAPI(title="arborl rm serve", version="1")
    queue = ModelQueue()
    install_handlers(app, render_error)
    app.add_middleware(
        Guard, token=token, render=render_error, limits=limits, auth_kind="authentication_error"
    )

    @app.exception_handler(RMServerError)
    def _own(_r: Request, e: RMServerError) -> JSONResponse:
        return JSONResponse(render_error(e.status, e.kind, e.message), e.status)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "kind": model.kind}

    @app.get("/v1/info")
    def info() -> dict:
        return {"model": model_name, **model.settings()}

    @app.post("/v1/score")
    async def score(req: ScoreRequest, request: Request) -> dict:
        return await run_request(request, partial(score_now, req), max_request_s, FLAG)

    def score_now(req: ScoreRequest) -> dict:
        if len(req.trajectories) > max_trajectories:
            raise RMServerError(
                413, f"{len(req.trajectories)} trajectories in one request; send at most "
                f"{max_trajectories} per request", "request_too_large",
            )  # fmt: skip
        chars = sum(_check_record(i, d, max_steps) for i, d in enumerate(req.trajectories))
        if chars > max_chars:
            raise RMServerError(413, f"{chars} characters of text in one request; the limit is "
                                f"{max_chars} (`rm serve --max-chars`)", "request_too_large")  # fmt: skip
        trajs = []
        for i, d in enumerate(req.trajectories):
            try:
                traj = Trajectory.from_dict(d)
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                raise RMServerError(
                    400, f"trajectories[{i}] is not a trajectory record: {e}"
                ) from e
            if not traj.steps:
                raise RMServerError(400, f"trajectories[{i}] has no steps; nothing to score")
            trajs.append(traj)
        with queue.hold():
            if req.last_only:
                last = model.score(trajs, batch_size=req.batch_size or batch_size)
                return {"scores": [_finite(x) for x in last]}
            steps = model.score_steps(trajs, batch_size=req.batch_size or batch_size)
        return {
            "scores": [_finite(s[-1]) for s in steps],
            "step_scores": [[_finite(x) for x in s] for s in steps],
        }

    return app
