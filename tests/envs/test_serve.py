"""Orchestration with real server processes: kill -9 recovery, orphan reaping, shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from arborl.envs import make_pool
from arborl.envs.modes import package_context
from arborl.envs.packages.userdata import run_state_file
from arborl.envs.remote.serve import ReplicaSet, reap_orphans

from ._pkg import *  # noqa: F403
from ._pkg import COUNTER_ID


def _wait(pred, timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.fault("killed worker")
@pytest.mark.slow
def test_kill_9_replica_mid_episode(counter_interp):
    ctx = package_context(COUNTER_ID)
    servers = ReplicaSet(COUNTER_ID, 2, python=ctx["python"], spec=ctx["spec"]).start()
    pool = make_pool(COUNTER_ID, 4, mode="http", urls=servers.urls, token=servers.token,
                     timeout_s=5.0)  # fmt: skip
    try:
        placed = [pool.transport.where(i) for i in range(4)]
        assert sorted(placed) == sorted(servers.urls * 2)  # balanced: two sessions per replica
        far = {"task": {"target": 5}}  # five incs to win: every episode is still running at 3
        pool.reset([0, 1, 2, 3], options=far)
        for _ in range(2):
            pool.step(["inc"] * 4)
        victim_url, victim_pid = servers.urls[0], servers.pids()[0]
        os.kill(victim_pid, signal.SIGKILL)
        res, done = pool.step(["inc"] * 4)
        for i in range(4):
            if placed[i] == victim_url:
                assert "env_error" in res[i].info and done[i]
            else:  # the other replica's episodes go on, state intact: three incs so far
                assert res[i].obs.startswith("value 3,") and "env_error" not in res[i].info
        assert pool.num_env_errors == 2
        _wait(lambda: servers.pids()[0] != victim_pid, 30, "the restart")
        _wait(lambda: _healthy(victim_url), 60, "the restarted replica's health")
        assert servers.replicas[0].num_restarts == 1
        obs, infos = pool.reset([0, 1, 2, 3])
        assert all(o.startswith("value 0,") for o in obs) and not any(
            "env_error" in i for i in infos
        )
        assert sorted(pool.transport.where(i) for i in range(4)) == sorted(servers.urls * 2)
        res, _ = pool.step(["inc"] * 4)
        assert all(r.obs.startswith("value 1,") for r in res)
    finally:
        pool.close()
        servers.stop()
    assert not psutil.pid_exists(victim_pid) and not any(
        psutil.pid_exists(p) for p in servers.pids()
    )


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


SERVE = """
import sys
from arborl.envs.modes import package_context
from arborl.envs.remote.serve import ReplicaSet
from arborl.envs.packages.userdata import run_state_file
ctx = package_context(sys.argv[1])
rs = ReplicaSet(sys.argv[1], 2, python=ctx["python"], spec=ctx["spec"], state_file=run_state_file(sys.argv[1]))
rs.start()
rs.serve_forever(on_ready=lambda: print("ready", flush=True))
"""


def _start_orchestrator() -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-c", SERVE, COUNTER_ID], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    return proc, json.loads(run_state_file(COUNTER_ID).read_text())


@pytest.mark.slow
def test_orphans_of_a_killed_orchestrator_are_reaped(counter_interp):
    proc, state = _start_orchestrator()
    pids = [r["pid"] for r in state["replicas"]]
    with pytest.raises(RuntimeError, match=f"already being served by pid {proc.pid}"):
        reap_orphans(run_state_file(COUNTER_ID))  # its owner is alive: refuse
    proc.kill()  # SIGKILL: no `finally` runs, the servers are orphaned
    proc.wait()
    time.sleep(0.5)
    assert all(psutil.pid_exists(p) for p in pids)
    ctx = package_context(COUNTER_ID)
    rs = ReplicaSet(COUNTER_ID, 1, python=ctx["python"], spec=ctx["spec"],
                    state_file=run_state_file(COUNTER_ID)).start()  # fmt: skip
    try:
        assert rs.num_reaped == 2
        _wait(lambda: not any(psutil.pid_exists(p) for p in pids), 10, "the orphans to go")
        assert (
            json.loads(run_state_file(COUNTER_ID).read_text())["replicas"][0]["pid"] == rs.pids()[0]
        )
    finally:
        rs.stop()
    assert not run_state_file(COUNTER_ID).exists()


@pytest.mark.slow
def test_sigterm_stops_every_replica(counter_interp):
    proc, state = _start_orchestrator()
    pids = [r["pid"] for r in state["replicas"]]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not any(psutil.pid_exists(p) for p in pids)
    assert not run_state_file(COUNTER_ID).exists()
