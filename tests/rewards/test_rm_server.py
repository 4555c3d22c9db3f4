"""`arborl rm serve` as a real process on 127.0.0.1, and its HTTP client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from arborl.data.trajectory import Step, Trajectory
from arborl.rewards.reward_model import RewardModel
from arborl.rewards.rm_client import RMClient, RMClientError
from arborl.rewards.rm_server import TOKEN_ENV, resolve_token


def traj(actions: str) -> Trajectory:
    steps = [Step(observation=f"o{i}", action=a) for i, a in enumerate(actions)]
    return Trajectory("t", "e", instruction="go", steps=steps)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A served tiny PRM; no --token and no ARBORL_TOKEN, so the server makes one up."""
    d = tmp_path_factory.mktemp("rm") / "prm"
    model = RewardModel.from_spec("tiny-0.1m", "prm", max_length=128, seed=2)
    model.save_pretrained(d)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    cmd = [sys.executable, "-m", "arborl.cli.main", "rm", "serve", str(d), "--port", str(port),
           "--max-trajectories", "4"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    token, lines = None, []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and token is None:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if "generated token:" in line:
            token = line.rsplit(":", 1)[1].strip()
    url = f"http://127.0.0.1:{port}"
    while token and time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    try:
        assert token, "server printed no generated token:\n" + "".join(lines)
        yield url, token, model
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


def test_resolve_token_prefers_flag_then_env(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert resolve_token("flag") == ("flag", False)
    assert resolve_token(None) == ("from-env", False)
    monkeypatch.delenv(TOKEN_ENV)
    made, generated = resolve_token(None)
    assert generated and len(made) >= 24 and made != resolve_token(None)[0]


def test_auth_health_and_json_errors(server):
    url, token, _ = server
    assert httpx.get(url + "/health").json() == {"status": "ok", "kind": "prm"}
    body = {"trajectories": [traj("ud").to_dict()]}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.post(url + "/v1/score", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(url + "/v1/info", headers=auth).json()["kind"] == "prm"
    r = httpx.post(url + "/v1/score", content=b"{not json", headers=auth)
    assert r.status_code == 422 and "error" in r.json()
    r = httpx.post(url + "/v1/score", json={"trajectories": [{"steps": []}]}, headers=auth)
    assert r.status_code == 400 and "trajectories[0]" in r.json()["error"]["message"]
    r = httpx.post(
        url + "/v1/score", json={"trajectories": [traj("u").to_dict()] * 5}, headers=auth
    )
    assert r.status_code == 413 and "at most 4" in r.json()["error"]["message"]
    assert httpx.get(url + "/nowhere", headers=auth).status_code == 404


def test_client_scores_like_the_local_model(server):
    url, token, model = server
    trajs = [traj("ud"), traj("l"), traj("rrr"), traj("du"), traj("u")]
    with RMClient(url, token=token, max_per_request=2) as client:  # 3 requests of <= 2
        assert client.kind == "prm"
        remote = client.score_steps(trajs)
        last = client.score(trajs)  # last_only: the server scores one step each
    local = model.score_steps(trajs)
    for r, loc in zip(remote, local):
        assert r == pytest.approx(loc, abs=1e-5)
    assert last == pytest.approx([s[-1] for s in local], abs=1e-5)
    with pytest.raises(RMClientError, match="401.*ARBORL_TOKEN"):
        RMClient(url, token="nope").score(trajs[:1])
    with pytest.raises(RMClientError, match="unreachable"):
        RMClient(f"http://127.0.0.1:{free_port()}", token="x", timeout_s=2).score(trajs[:1])


def test_limits_and_bad_records_are_4xx_before_scoring(server):
    # Review defects 10 and 11: 2000 steps held the server 107 s; meta as a list, a lone
    # surrogate or a non-string action gave a 500 or were scored silently.
    url, token, _ = server
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    long = {"task_id": "t", "env_id": "e", "steps": [{"observation": "A.G", "action": "r"}] * 2000}
    t0 = time.monotonic()
    r = httpx.post(url + "/v1/score", json={"trajectories": [long]}, headers=auth, timeout=30)
    assert r.status_code == 413 and "2000 steps" in r.json()["error"]["message"]
    assert "256" in r.json()["error"]["message"] and time.monotonic() - t0 < 5
    good = traj("ud").to_dict()
    cases = [({**good, "meta": [1]}, "meta"), ({**good, "meta": "x"}, "meta"),
             ({**good, "steps": [{"observation": 5, "action": "u"}]}, "observation"),
             ({**good, "steps": [{"observation": "o", "action": None}]}, "action")]  # fmt: skip
    for record, field in cases:
        r = httpx.post(url + "/v1/score", json={"trajectories": [record]}, headers=auth)
        assert r.status_code == 400 and field in r.json()["error"]["message"], r.text
    raw = b'{"trajectories": [{"task_id": "t", "env_id": "e", "steps": [{"observation": "\\ud800", "action": "u"}]}]}'
    r = httpx.post(url + "/v1/score", content=raw, headers=auth)
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"]
    big = {"trajectories": [{**good, "steps": [{"observation": "x" * 600_000, "action": "u"}] * 2}]}
    r = httpx.post(url + "/v1/score", json=big, headers=auth)
    assert r.status_code == 413 and "--max-chars" in r.json()["error"]["message"]
    # Auth before the body: an unauthenticated malformed body is 401, not 422.
    assert httpx.post(url + "/v1/score", content=b"{nope").status_code == 401
    assert httpx.get(url + "/openapi.json").status_code == 401


def test_a_forged_pickle_body_runs_nothing(server, tmp_path):
    # Requirement 2: the rm server never unpickles what a client sends.
    import pickle

    from tests.envs.test_http_security import _Marker

    url, token, _ = server
    marker = tmp_path / "RAN"
    blob = pickle.dumps(_Marker(str(marker)))
    auth = {"Authorization": f"Bearer {token}"}
    for ctype in ("application/json", "application/octet-stream", "application/x-pickle"):
        r = httpx.post(url + "/v1/score", content=blob, headers={**auth, "Content-Type": ctype})
        assert r.status_code in (400, 422), r.text
    assert not marker.exists()
