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
with the matching status (401 auth, 400 bad records, 413 too many, 422 malformed body).
Requests are scored one at a time under a lock, each as batched forward passes.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from arborl.data.trajectory import Trajectory

TOKEN_ENV = "ARBORL_TOKEN"
"""Environment variable holding the bearer token when `--token` is not given."""


def resolve_token(token: str | None) -> tuple[str, bool]:
    """(token, generated): `token`, else `$ARBORL_TOKEN`, else a fresh random one."""
    if token:
        return token, False
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV], False
    return secrets.token_urlsafe(24), True


class ScoreRequest(BaseModel):
    trajectories: list[dict[str, Any]] = Field(min_length=1)
    batch_size: int | None = Field(default=None, ge=1, le=1024)
    last_only: bool = False


class RMServerError(Exception):
    """An error sent to the client as JSON with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _error(status: int, message: str, kind: str) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(body, status_code=status)


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def create_app(
    model: Any,
    token: str,
    model_name: str = "rm",
    max_trajectories: int = 1024,
    batch_size: int = 32,
) -> FastAPI:
    """The FastAPI app scoring with `model` (a `RewardModel`); `token` is required."""
    if not token:
        raise ValueError("token is empty; the reward-model server always requires one")
    app = FastAPI(title="arborl rm serve", version="1")
    lock = threading.Lock()

    @app.exception_handler(RMServerError)
    def _own(_r: Request, e: RMServerError) -> JSONResponse:
        return _error(e.status, e.message, e.kind)

    @app.exception_handler(RequestValidationError)
    def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(422, f"malformed request body at {where}: {first.get('msg', e)}",
                      "invalid_request_error")  # fmt: skip

    @app.exception_handler(StarletteHTTPException)
    def _http(_r: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail), "http_error")

    def check_token(request: Request) -> None:
        sent = request.headers.get("authorization", "")
        if not secrets.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            raise RMServerError(
                401, "invalid or missing token (send 'Authorization: Bearer <token>')",
                "authentication_error",
            )  # fmt: skip

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "kind": model.kind}

    @app.get("/v1/info", dependencies=[Depends(check_token)])
    def info() -> dict:
        return {"model": model_name, **model.settings()}

    @app.post("/v1/score", dependencies=[Depends(check_token)])
    def score(req: ScoreRequest) -> dict:
        if len(req.trajectories) > max_trajectories:
            raise RMServerError(
                413, f"{len(req.trajectories)} trajectories in one request; send at most "
                f"{max_trajectories} per request", "request_too_large",
            )  # fmt: skip
        trajs = []
        for i, d in enumerate(req.trajectories):
            try:
                traj = Trajectory.from_dict(d)
            except (TypeError, ValueError, KeyError) as e:
                raise RMServerError(
                    400, f"trajectories[{i}] is not a trajectory record: {e}"
                ) from e
            if not traj.steps:
                raise RMServerError(400, f"trajectories[{i}] has no steps; nothing to score")
            trajs.append(traj)
        with lock:
            if req.last_only:
                last = model.score(trajs, batch_size=req.batch_size or batch_size)
                return {"scores": [_finite(x) for x in last]}
            steps = model.score_steps(trajs, batch_size=req.batch_size or batch_size)
        return {
            "scores": [_finite(s[-1]) for s in steps],
            "step_scores": [[_finite(x) for x in s] for s in steps],
        }

    return app
