"""Security and limits of the HTTP env server (issue 19, review defects 1, 8, 9, 11, 17 and
the auth notes), on real servers on 127.0.0.1 and a real EnvHost."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from arborl.envs import make_pool, register
from arborl.envs.remote.host import EnvHost
from arborl.envs.remote.serve import ReplicaSet
from arborl.envs.remote.subproc import SubprocessTransport
from tests.envs import _slow_env
from tests.envs import test_http_server as base
from tests.envs.test_http_server import AUTH, TOKEN, _session

server, client = base.server, base.client  # the same live server fixtures (127.0.0.1)

SLOW_SPEC = {"id": "test/Slow-v0", "entry_point": "tests.envs._slow_env:SlowEnv"}


class _Marker:
    """A pickle that, if ever unpickled, creates the file `path` (a harmless payload)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_snapshot_forged_with_the_client_token_runs_nothing(client, tmp_path):
    # Defect 1: the HMAC key was the bearer token, so a client could sign its own pickle.
    sid = _session(client)
    client.post(f"/sessions/{sid}/reset", json={"seed": 0}, headers=AUTH)
    marker = tmp_path / "FORGED_SNAPSHOT_RAN"
    blob = pickle.dumps(_Marker(str(marker)))
    sig = hmac.new(TOKEN.encode(), blob, hashlib.sha256).hexdigest()
    forged = base64.b64encode(blob).decode() + "." + sig
    r = client.post(f"/sessions/{sid}/restore", json={"snapshot": forged}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"] == "bad_snapshot", r.text
    assert not marker.exists()
    # A snapshot the server made itself still restores.
    snap = client.post(f"/sessions/{sid}/snapshot", headers=AUTH).json()["snapshot"]
    client.post(f"/sessions/{sid}/step", json={"action": "up"}, headers=AUTH)
    r = client.post(f"/sessions/{sid}/restore", json={"snapshot": snap}, headers=AUTH)
    assert r.status_code == 200 and r.json()["restored"] is True


def test_auth_scheme_case_docs_and_body_checked_after_token(client):
    assert client.get("/openapi.json").status_code == 401  # was open to anyone
    assert client.get("/docs").status_code == 401
    assert client.get("/openapi.json", headers=AUTH).status_code == 200
    lower = {"Authorization": f"bearer {TOKEN}"}  # RFC 7235: the scheme is case-insensitive
    assert client.post("/sessions", json={}, headers=lower).status_code == 200
    assert client.post("/sessions", json={}, headers={"Authorization": TOKEN}).status_code == 401
    # Without the token, a malformed or huge body is refused as 401 before it is read.
    assert client.post("/sessions", content=b"{nope").status_code == 401
    assert client.get("/health").status_code == 200


def test_deep_json_and_big_body_are_4xx(client):
    sid = _session(client)
    deep = b"[" * 100_000 + b"]" * 100_000  # was a 500 RecursionError
    r = client.post(f"/sessions/{sid}/reset", content=deep, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"] == "too_deep"
    assert "max_json_depth" in r.json()["detail"] and "64" in r.json()["detail"]
    obj = b'{"a":' * 5000 + b"1" + b"}" * 5000
    assert client.post("/sessions", content=obj, headers=AUTH).status_code == 400
    big = b'{"seed": 1, "pad": "' + b"x" * (9 << 20) + b'"}'
    r = client.post(f"/sessions/{sid}/reset", content=big, headers=AUTH)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]


def test_work_sizing_kwargs_and_bad_options_are_400(client):
    r = client.post("/sessions", json={"size": 1000}, headers=AUTH)  # was an hour-long reset
    assert r.status_code == 400 and r.json()["error"] == "kwargs_limit"
    assert "kwargs.size=1000" in r.json()["detail"] and "256" in r.json()["detail"]
    sid = _session(client)
    r = client.post(f"/sessions/{sid}/reset", json={"options": {"split": "bogus"}}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"] == "bad_options", r.text


def _slow_host(**kw) -> EnvHost:
    register(SLOW_SPEC["id"], SLOW_SPEC["entry_point"])
    return EnvHost(SLOW_SPEC["id"], b"server-secret", **kw)


def test_sweeper_and_delete_never_wait_on_a_busy_session():
    # Defect 8: sweep_idle waited on the lock a running call held, so nothing expired.
    host = _slow_host()
    busy = host.create({})["session_id"]
    idle = [host.create({})["session_id"] for _ in range(3)]
    _slow_env.RELEASE.clear()
    worker = threading.Thread(target=host.call, args=(busy, "reset", {"options": {"sleep_s": 30}}))
    worker.start()
    try:
        time.sleep(0.2)
        swept = []
        sweeper = threading.Thread(target=lambda: swept.append(host.sweep_idle(0.0)))
        sweeper.start()
        sweeper.join(timeout=3)
        assert not sweeper.is_alive() and swept == [3]
        assert host.oldest_call_s() > 0.1
        assert set(host.sessions) == {busy}  # the busy one is not idle
        t0 = time.monotonic()
        assert host.delete(busy) == {"deleted": busy}
        assert time.monotonic() - t0 < 1.0 and not host.sessions
    finally:
        _slow_env.RELEASE.set()
        worker.join(timeout=5)
    assert host.oldest_call_s() == 0.0 and idle


def test_a_call_past_its_deadline_is_504_and_the_replica_restarts(tmp_path):
    rs = ReplicaSet(SLOW_SPEC["id"], 1, token=TOKEN, spec=SLOW_SPEC, call_timeout_s=1.0,
                    log_dir=tmp_path)  # fmt: skip
    with rs, httpx.Client(base_url=rs.urls[0], timeout=10.0) as c:
        pid = rs.pids()[0]
        sid = _session(c)
        t0 = time.monotonic()
        r = c.post(f"/sessions/{sid}/reset", json={"options": {"sleep_s": 60}}, headers=AUTH)
        assert r.status_code == 504 and "--call-timeout-s" in r.json()["detail"]
        assert time.monotonic() - t0 < 5
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (rs.pids()[0] == pid or not _healthy(c)):
            time.sleep(0.2)
        assert rs.pids()[0] != pid and _healthy(c)  # the stuck replica was replaced


def test_replicas_a_pool_starts_take_its_longer_timeout():
    # A slow engine's pool (timeout_s=300, e.g. ALFWorld) must not be cut at the servers'
    # 60 s default; a shorter pool timeout leaves the default.
    for timeout_s, server_s in ((90.0, 90.0), (5.0, 60.0)):
        pool = make_pool("arborl/Maze-v0", 1, mode="http", timeout_s=timeout_s)
        try:
            assert pool.transport.servers.call_timeout_s == server_s
            assert pool.timeout_s == timeout_s
        finally:
            pool.close()


def _healthy(c: httpx.Client) -> bool:
    try:
        return c.get("/health").status_code == 200
    except httpx.HTTPError:
        return False


def test_a_full_replica_makes_the_pool_try_the_next(tmp_path):
    # Defect 9: a 503 server_full from the first replica ended the open.
    with ReplicaSet("arborl/Maze-v0", 2, token=TOKEN, max_sessions=1, log_dir=tmp_path) as rs:
        full, free = rs.urls
        httpx.post(full + "/sessions", json={}, headers=AUTH, timeout=10).raise_for_status()
        pool = make_pool("arborl/Maze-v0", 1, mode="http", urls=[full, free], token=TOKEN)
        try:
            obs, _ = pool.reset([3])
            assert obs[0] and pool.transport.sessions[0][0] == free
        finally:
            pool.close()


def test_a_worker_whose_pipe_closed_is_never_reused():
    # Defect 17: poll() could still say "alive" after the pipe closed, so the dead worker
    # was reused and the reset after a kill -9 came back as an env error.
    t = SubprocessTransport("arborl/Maze-v0", 1)
    try:
        t.group.ensure([0])
        w = t.workers[0]
        w.proc.kill()
        w.proc.wait()
        while w.read_available():
            time.sleep(0.01)
        w.proc.poll = lambda: None  # the window in which poll() has not seen the death
        assert not w.alive()
        t.group.ensure([0])
        assert t.workers[0] is not w and t.num_restarts == 1
    finally:
        t.close()


@pytest.mark.slow
def test_sigkill_of_env_serve_leaves_no_replica(tmp_path):
    # Requirement 8: replicas stayed up on their ports after their `env serve` was killed.
    env = {**os.environ, "ARBORL_HOME": str(tmp_path), "ARBORL_TOKEN": TOKEN,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # fmt: skip
    cmd = [sys.executable, "-m", "arborl.cli.main", "env", "serve", "arborl/Maze-v0",
           "--replicas", "2"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)  # fmt: skip
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "Ctrl-C" in line or (not line and proc.poll() is not None):
                break
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) == 2, [c.cmdline() for c in children]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(children, timeout=8)
        assert alive == [], [c.pid for c in alive]
    finally:
        if proc.poll() is None:
            proc.kill()
        for c in children:
            if c.is_running():
                c.kill()
        proc.stdout.close()


def test_health_turns_stuck_only_after_the_504_had_its_grace():
    # A supervisor that killed the replica the moment a call passed its deadline could beat
    # the 504 to the client on a loaded machine (seen once: a dropped connection instead).
    from fastapi.testclient import TestClient

    from arborl.envs.remote.http_server import STUCK_GRACE_S, create_app

    app = create_app(_slow_host(), TOKEN, call_timeout_s=0.5)
    _slow_env.RELEASE.clear()
    try:
        with TestClient(app) as c:
            sid = c.post("/sessions", json={}, headers=AUTH).json()["session_id"]
            r = c.post(f"/sessions/{sid}/reset", json={"options": {"sleep_s": 30}}, headers=AUTH)
            assert r.status_code == 504
            assert c.get("/health").status_code == 200  # inside the grace: the 504 goes first
            time.sleep(STUCK_GRACE_S + 0.3)
            health = c.get("/health")
            assert health.status_code == 503 and health.json()["status"] == "stuck"
    finally:
        _slow_env.RELEASE.set()
