"""An OpenEnv connection whose env the idle sweeper closed is closed too, with a reason
(issue 34, review-2 defect 11: the socket stayed open and answered `no_session`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from arborl.envs.remote.serve import free_port
from tests.envs.test_openenv import TOKEN, _env, _stop, _wait_healthy


@pytest.fixture
def idle_url():
    """An OpenEnv server that closes sessions idle for 1 s."""
    port = free_port()
    cmd = [sys.executable, "-m", "arborl.envs.remote.openenv_server", "arborl/Maze-v0",
           "--port", str(port), "--idle-timeout-s", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url)
        yield url.replace("http://", "ws://") + f"/{TOKEN}/ws"
    finally:
        _stop(proc)


@pytest.mark.fault("abandoned client")
def test_a_swept_connection_is_closed_with_a_reason(idle_url):
    with connect(idle_url) as c:
        c.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(c.recv(timeout=30))["type"] == "observation"
        t0 = time.monotonic()
        with pytest.raises(ConnectionClosed) as e:  # nothing sent: the server closes it
            c.recv(timeout=15)
        assert time.monotonic() - t0 < 10
    assert e.value.rcvd.code == 4000 and "idle_timeout" in e.value.rcvd.reason
    with connect(idle_url) as again:  # a new connection gets a new env
        again.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(again.recv(timeout=30))["type"] == "observation"


def test_a_busy_connection_is_not_swept(idle_url):
    with connect(idle_url) as c:
        c.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        c.recv(timeout=30)
        for _ in range(6):  # 3 s of messages every 0.5 s: never idle for 1 s
            time.sleep(0.5)
            c.send(json.dumps({"type": "state"}))
            assert json.loads(c.recv(timeout=10))["type"] == "state"
