"""The HTTP env server's REST contract, on a real server process on 127.0.0.1."""

from __future__ import annotations

import time

import httpx
import psutil
import pytest

from arborl.envs import make
from arborl.envs.remote.serve import ReplicaSet

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server():
    rs = ReplicaSet("arborl/Maze-v0", 1, token=TOKEN, idle_timeout_s=1.0)
    rs.start()
    yield rs
    rs.stop()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.urls[0], timeout=10.0) as c:
        yield c


def _session(client, **kwargs) -> str:
    r = client.post("/sessions", json=kwargs, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


def test_rest_round_trip_matches_inproc(client):
    r = client.post("/sessions", json={"split": "test"}, headers=AUTH)
    body = r.json()
    sid = body["session_id"]
    assert (
        body["env_id"] == "arborl/Maze-v0" and body["max_turns"] == make("arborl/Maze-v0").max_turns
    )
    ref = make("arborl/Maze-v0", split="test")
    ref_obs, ref_info = ref.reset(seed=7)
    out = client.post(
        f"/sessions/{sid}/reset", json={"seed": 7, "options": None}, headers=AUTH
    ).json()
    assert out["observation"] == ref_obs and out["instruction"] == ref.instruction
    assert out["info"]["task_id"] == ref_info["task_id"] and out["info"]["anchor"] == [
        ref_info["anchor"][0], list(ref_info["anchor"][1])]  # tuples arrive as JSON lists  # fmt: skip
    snap = client.post(f"/sessions/{sid}/snapshot", headers=AUTH).json()["snapshot"]
    action = ref.oracle_action()
    assert client.post(f"/sessions/{sid}/oracle", headers=AUTH).json() == {"action": action}
    step = client.post(f"/sessions/{sid}/step", json={"action": action}, headers=AUTH).json()
    ref_step = ref.step(action)
    assert set(step) == {"observation", "reward", "terminated", "truncated", "info"}
    assert (step["observation"], step["reward"], step["terminated"]) == ref_step[:3]
    assert (
        client.post(f"/sessions/{sid}/restore", json={"snapshot": snap}, headers=AUTH).status_code
        == 200
    )
    again = client.post(f"/sessions/{sid}/step", json={"action": action}, headers=AUTH).json()
    assert again["observation"] == step["observation"]  # restore went back one step
    assert client.delete(f"/sessions/{sid}", headers=AUTH).json() == {"deleted": sid}
    assert (
        client.post(f"/sessions/{sid}/step", json={"action": "up"}, headers=AUTH).status_code == 404
    )


def test_token_required_except_health(client):
    sid = _session(client)
    assert client.get("/health").json()["status"] == "ok"
    routes = [("POST", "/sessions", {}), ("POST", f"/sessions/{sid}/reset", {"seed": 1}),
              ("POST", f"/sessions/{sid}/step", {"action": "up"}),
              ("POST", f"/sessions/{sid}/snapshot", {}), ("DELETE", f"/sessions/{sid}", None),
              ("POST", "/batch", {"calls": [{"session_id": sid, "method": "reset"}]})]  # fmt: skip
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        for method, path, body in routes:
            r = client.request(method, path, json=body, headers=headers)
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.json()["error"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
    assert client.post(f"/sessions/{sid}/reset", json={}, headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    "content, status",
    [
        (b"{not json", 400),
        (b"\xff\xfe\x00garbage", 400),
        (b'{"seed": 1', 400),
        (b"[1, 2, 3]", 422),
        (b'"just a string"', 422),
        (b'{"seed": "seven"}', 400),
        (b'{"seed": 1, "options": [1]}', 400),
        (b"{" * 5000, 400),
    ],
)
def test_garbage_bodies_get_4xx_never_500(client, content, status):
    sid = _session(client)
    start = time.perf_counter()
    r = client.post(f"/sessions/{sid}/reset", content=content, headers=AUTH)
    assert r.status_code == status and time.perf_counter() - start < 5.0
    assert set(r.json()) == {"error", "detail"}
    r = client.post("/sessions", content=content, headers=AUTH)  # env kwargs too
    assert 400 <= r.status_code < 500, r.text


def test_status_codes(client):
    sid = _session(client)
    r = client.post(f"/sessions/{sid}/step", json={"action": "up"}, headers=AUTH)
    assert r.status_code == 409 and r.json()["error"] == "not_reset"
    client.post(f"/sessions/{sid}/reset", json={"seed": 0}, headers=AUTH)
    assert client.post(f"/sessions/{sid}/step", json={"action": 5}, headers=AUTH).status_code == 400
    assert client.post(f"/sessions/{sid}/step", json={}, headers=AUTH).status_code == 400
    assert client.post(f"/sessions/{sid}/jump", json={}, headers=AUTH).status_code == 404
    assert (
        client.post("/sessions/nope/step", json={"action": "up"}, headers=AUTH).status_code == 404
    )
    r = client.post(f"/sessions/{sid}/restore", json={"snapshot": "AAAA.deadbeef"}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"] == "bad_snapshot"  # unsigned: never unpickled
    r = client.post("/sessions", json={"no_such_knob": 1}, headers=AUTH)
    assert r.status_code == 400 and "no_such_knob" in r.json()["detail"]


def test_batch_replies_as_the_single_calls_do_and_fails_calls_one_by_one(client):
    sids = [_session(client, split="test") for _ in range(3)]
    single = [
        client.post(f"/sessions/{sids[0]}/reset", json={"seed": s}, headers=AUTH).json()
        for s in (3, 4)
    ]
    calls = [{"session_id": sid, "method": "reset", "args": {"seed": s}}
             for sid, s in zip(sids[1:], (3, 4))]  # fmt: skip
    calls.append({"session_id": "nope", "method": "reset", "args": {}})
    calls.append({"session_id": sids[0], "method": "step", "args": {"action": 5}})
    r = client.post("/batch", json={"calls": calls}, headers=AUTH)
    assert r.status_code == 200, r.text
    replies = r.json()["replies"]
    assert [x["status"] for x in replies] == [200, 200, 404, 400]
    assert [x["value"] for x in replies[:2]] == single  # the same bodies as the single routes
    assert replies[2]["error"] == "no_session" and replies[3]["error"] == "bad_request"
    action = make("arborl/Maze-v0", split="test").reset(seed=3)[1]["available_actions"][0]
    client.post(f"/sessions/{sids[0]}/reset", json={"seed": 3}, headers=AUTH)  # as sids[1]
    one = {"session_id": sids[1], "method": "step", "args": {"action": action}}
    assert (
        client.post("/batch", json={"calls": [one]}, headers=AUTH).json()["replies"][0]["value"]
        == client.post(f"/sessions/{sids[0]}/step", json={"action": action}, headers=AUTH).json()
    )


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({}, 400, "'calls'"),
        ({"calls": [{"session_id": "s", "method": "create"}]}, 400, "calls[0]"),
        ({"calls": [{"session_id": 1, "method": "step"}]}, 400, "calls[0]"),
        ({"calls": [], "timeout_s": -1}, 400, "timeout_s"),
        ({"calls": [{"session_id": "s", "method": "step"}] * 1025}, 413, "--max-batch-calls"),
    ],
)
def test_bad_batches_are_4xx_naming_the_fix(client, body, status, words):
    r = client.post("/batch", json=body, headers=AUTH)
    assert r.status_code == status and words in r.json()["detail"], r.text


def test_idle_sessions_are_closed(client):
    sid = _session(client)
    client.post(f"/sessions/{sid}/reset", json={"seed": 0}, headers=AUTH)
    time.sleep(2.0)  # idle timeout is 1 s, swept every 0.25 s
    r = client.post(f"/sessions/{sid}/step", json={"action": "up"}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"] == "no_session"


@pytest.mark.slow
def test_many_sessions_leave_no_memory_growth(server, client):
    """1500 sessions created, reset, stepped and deleted: RSS grows by < 10 MiB after warm-up."""
    proc = psutil.Process(server.pids()[0])

    def churn(n: int) -> None:
        for k in range(n):
            sid = _session(client, split="train")
            client.post(f"/sessions/{sid}/reset", json={"seed": k}, headers=AUTH)
            client.post(f"/sessions/{sid}/step", json={"action": "up"}, headers=AUTH)
            assert client.delete(f"/sessions/{sid}", headers=AUTH).status_code == 200

    churn(200)  # warm-up: allocator pools, import caches, first-use buffers
    before = proc.memory_info().rss
    churn(1500)
    growth_mib = (proc.memory_info().rss - before) / 2**20
    print(f"server RSS growth over 1500 sessions: {growth_mib:.2f} MiB")
    assert client.get("/health").json()["sessions"] == 0
    assert growth_mib < 10.0, f"server RSS grew {growth_mib:.1f} MiB over 1500 sessions"
