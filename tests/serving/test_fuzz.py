"""Property-based HTTP fuzzing of arborl's three servers from their OpenAPI schemas (issue
19, requirement 7): every generated request, authenticated or not, gets a reply below 500,
and the server's memory stays bounded. Bounded in count (`max_examples`) and time
(`timeout`); `derandomize` keeps CI runs reproducible."""

from __future__ import annotations

import json

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serving._openapi_fuzz import operations, serve_in_thread, value_for

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
MAX_GROWTH = 300 << 20  # bytes of RSS a fuzz run may add to the server
FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))  # fmt: skip


_STR = {"type": "string"}
ENV_BODIES = {  # the env server reads its bodies by hand: the REST contract's fields
    "/sessions": {"type": "object", "properties": {"split": _STR, "size": {"type": "integer",
                  "minimum": 2, "maximum": 300}}},
    "/sessions/{sid}/{method}": {"type": "object", "properties": {
        "seed": {"type": "integer", "minimum": 0, "maximum": 5}, "action": _STR,
        "options": {"type": "object", "properties": {"split": _STR}}, "snapshot": _STR}},
    "/sessions/{sid}": {"type": "object", "properties": {}},
}  # fmt: skip
STEP = {
    "type": "object",
    "required": ["observation", "action"],
    "properties": {"observation": _STR, "action": _STR},
}
TRAJECTORY = {"type": "object", "required": ["task_id", "env_id", "steps"], "properties": {
    "task_id": _STR, "env_id": _STR, "steps": {"type": "array", "items": STEP, "minItems": 1},
    "meta": {"type": "object"}, "instruction": _STR}}  # fmt: skip
CALLS = ["reset", "step", "snapshot", "restore", "oracle", "bogus"]


def _send(client: httpx.Client, method: str, path: str, body, auth: bool, sid: str,
          call: str) -> int:  # fmt: skip
    path = path.replace("{sid}", sid).replace("{method}", call)
    content = None if body is None else json.dumps(body, allow_nan=True).encode()
    headers = AUTH if auth else {"Content-Type": "application/json"}
    r = client.request(method, path, content=content, headers=headers)
    return r.status_code


def _fuzz(url: str, rss_of, sid_of, bodies: dict | None = None) -> list[tuple[str, int]]:
    spec = httpx.get(url + "/openapi.json", headers=AUTH, timeout=10).json()
    ops = operations(spec, bodies)
    assert ops, "the schema lists no operations"
    op_and_body = st.sampled_from(ops).flatmap(lambda op: st.tuples(
        st.just(op), value_for(op[2], spec), st.booleans(), st.booleans(),
        st.sampled_from(CALLS)))  # fmt: skip
    start = rss_of()
    seen: list[tuple[str, int]] = []

    with httpx.Client(base_url=url, timeout=60) as client:

        @FUZZ
        @given(op_and_body)
        def one(case):
            (method, path, _), body, auth, real_sid, call = case
            sid = sid_of(client) if real_sid and "{sid}" in path else "nope"
            status = _send(client, method, path, body, auth or real_sid, sid, call)
            seen.append((f"{method} {path}", status))
            assert status < 500, (method, path, body, status)

        one()
    assert len(seen) >= 40 and any(s == 401 for _, s in seen)
    assert any(s < 300 for p, s in seen if p.startswith("POST")), "no request reached the work"
    assert rss_of() - start < MAX_GROWTH
    return seen


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fuzz_env_server():
    from arborl.envs.remote.serve import ReplicaSet

    with ReplicaSet("arborl/Maze-v0", 1, token=TOKEN) as rs:
        proc = psutil.Process(rs.pids()[0])

        def sid_of(client):
            r = client.post("/sessions", json={}, headers=AUTH)
            return r.json()["session_id"]

        _fuzz(rs.urls[0], lambda: proc.memory_info().rss, sid_of, ENV_BODIES)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fuzz_model_server():
    from arborl.generation import HFBackend
    from arborl.generation.server import create_app
    from arborl.models import load_policy

    model, tok = load_policy("tiny-0.1m", seed=0)
    app = create_app(HFBackend(model, tok), tok, "tiny", api_key=TOKEN, max_tokens_limit=8,
                     max_rows=4)  # fmt: skip
    me = psutil.Process()
    with serve_in_thread(app) as url:
        _fuzz(url, lambda: me.memory_info().rss, lambda client: "unused")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fuzz_rm_server():
    score = {"type": "object", "required": ["trajectories"], "properties": {
        "trajectories": {"type": "array", "items": TRAJECTORY, "minItems": 1},
        "batch_size": {"type": "integer", "minimum": 1, "maximum": 8},
        "last_only": {"type": "boolean"}}}  # fmt: skip
    from arborl.rewards.reward_model import RewardModel
    from arborl.rewards.rm_server import create_app

    model = RewardModel.from_spec("tiny-0.1m", "prm", max_length=64, seed=0)
    app = create_app(model, TOKEN, "rm", max_trajectories=4, max_steps=8, max_chars=4000)
    me = psutil.Process()
    with serve_in_thread(app) as url:
        _fuzz(url, lambda: me.memory_info().rss, lambda client: "unused", {"/v1/score": score})
