"""The HTTP client of `arborl rm serve`, with the same scoring interface as `RewardModel`.

`RMClient(url).score_steps(trajectories)` returns what `RewardModel.score_steps` would
(per trajectory, the raw score after each step; NaN where the context cut a step off), so
the `rm` reward source and the search evaluator take either without caring which.
Large calls are split into requests of at most `max_per_request` trajectories.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import httpx

from arborl.data.trajectory import Trajectory
from arborl.rewards.rm_server import TOKEN_ENV


class RMClientError(RuntimeError):
    """The server refused a request or could not be reached; the message says why."""


class RMClient:
    """Talks to one `arborl rm serve` endpoint."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout_s: float = 60.0,
        max_per_request: int = 256,
    ) -> None:
        """`token` defaults to `$ARBORL_TOKEN` (what the server printed or was given)."""
        self.url = url.rstrip("/")
        self.token = token or os.environ.get(TOKEN_ENV)
        self.max_per_request = max_per_request
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        self._info: dict[str, Any] | None = None

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise RMClientError(
                f"reward model server {self.url} unreachable ({e.__class__.__name__}: {e}); "
                "is `arborl rm serve` running there?"
            ) from e
        if resp.status_code != 200:
            try:
                message = resp.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = resp.text[:200]
            hint = (
                " (set --token or ARBORL_TOKEN to the server's token)"
                if resp.status_code == 401
                else ""
            )
            raise RMClientError(
                f"{method} {self.url}{path}: HTTP {resp.status_code}: {message}{hint}"
            )
        return resp.json()

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def info(self) -> dict[str, Any]:
        if self._info is None:
            self._info = self._call("GET", "/v1/info")
        return self._info

    @property
    def kind(self) -> str:
        return self.info()["kind"]

    def score_steps(
        self, trajectories: Sequence[Trajectory], batch_size: int | None = None
    ) -> list[list[float]]:
        """Per trajectory, the raw score after each step (as `RewardModel.score_steps`)."""
        out: list[list[float]] = []
        for start in range(0, len(trajectories), self.max_per_request):
            chunk = trajectories[start : start + self.max_per_request]
            body: dict[str, Any] = {"trajectories": [t.to_dict() for t in chunk]}
            if batch_size is not None:
                body["batch_size"] = batch_size
            reply = self._call("POST", "/v1/score", json=body)
            out.extend(
                [math.nan if x is None else float(x) for x in s] for s in reply["step_scores"]
            )
        return out

    def score(
        self, trajectories: Sequence[Trajectory], batch_size: int | None = None
    ) -> list[float]:
        """Per trajectory, the raw score of its last step (the server scores only that)."""
        out: list[float] = []
        for start in range(0, len(trajectories), self.max_per_request):
            chunk = trajectories[start : start + self.max_per_request]
            body: dict[str, Any] = {"trajectories": [t.to_dict() for t in chunk], "last_only": True}
            if batch_size is not None:
                body["batch_size"] = batch_size
            reply = self._call("POST", "/v1/score", json=body)
            out.extend(math.nan if x is None else float(x) for x in reply["scores"])
        return out

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RMClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
