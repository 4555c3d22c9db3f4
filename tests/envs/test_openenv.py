"""The OpenEnv bridge, both ways, on 127.0.0.1.

`arborl env serve --protocol openenv` serves an arborl env over OpenEnv's WebSocket
protocol, and `make_pool(..., mode="openenv")` drives OpenEnv servers as arborl envs. The
fast tests run arborl's client against arborl's server (results equal to the in-process
pool, the Pool protocol, snapshots, auth and limits). The slow ones put the real
openenv-core (its own venv, `_openenv.py`) on the other side: its `GenericEnvClient` plays
a Maze episode on arborl's server, and arborl's pool plays an env written with its server
classes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from arborl.cli.main import main
from arborl.envs import EnvCallError, EnvPool, RemotePool, check_env, make, make_pool
from arborl.envs.remote.serve import free_port

from ._openenv import *  # noqa: F403
from ._openenv import SCRIPTS, build_venv
from ._pkg import *  # noqa: F403
from ._pkg import COUNTER_ID
from ._pool_protocol import check_pool_protocol

TOKEN = "openenv-test-token"
REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "ARBORL_TOKEN": TOKEN, **extra}


def _wait_healthy(proc: subprocess.Popen, url: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited: {proc.stderr.read().decode()[-3000:]}"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not come up in {timeout_s:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def maze_url(tmp_path_factory):
    """`arborl env serve arborl/Maze-v0 --protocol openenv` (test split) on 127.0.0.1."""
    port = free_port()
    cmd = [sys.executable, "-m", "arborl.cli.main", "env", "serve", "arborl/Maze-v0",
           "--protocol", "openenv", "--port", str(port), "--env-kwargs", '{"split": "test"}']  # fmt: skip
    home = str(tmp_path_factory.mktemp("arborl-home"))
    proc = subprocess.Popen(cmd, env=_env(ARBORL_HOME=home), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url)
        yield url
    finally:
        _stop(proc)


def _pool(url: str, num_envs: int, **kw):
    return make_pool("arborl/Maze-v0", num_envs, mode="openenv", urls=[url], token=TOKEN, **kw)


@pytest.mark.parametrize("split", ["test", "train"])  # train: env_kwargs rebuild the env
def test_openenv_pool_gives_the_in_process_results(maze_url, split):
    pool, ref = _pool(maze_url, 4, split=split), EnvPool("arborl/Maze-v0", 4, split=split)
    try:
        assert isinstance(pool, RemotePool) and pool.mode == "openenv"
        assert pool.reset([11, 12], group_size=2) == ref.reset([11, 12], group_size=2)
        actions = ["up", None, "left", "nonsense"]
        assert pool.step(actions) == ref.step(actions)
        assert pool[0].max_turns == ref[0].max_turns == 16
        assert pool[2].instruction == ref[2].instruction
        assert check_env(pool[1], num_seeds=2) == []
        assert pool.num_env_errors == 0
    finally:
        pool.close()


def test_openenv_pool_satisfies_the_pool_protocol(maze_url):
    pool = _pool(maze_url, 4, split="test")
    try:
        check_pool_protocol(pool)
    finally:
        pool.close()


def test_snapshot_and_restore_travel_as_arborl_extensions(maze_url):
    pool = _pool(maze_url, 1, split="test")
    try:
        pool.reset([3])
        snap = pool[0].snapshot()
        first = pool[0].step("up")
        pool[0].restore(snap)
        assert pool[0].step("up") == first
    finally:
        pool.close()


def test_the_token_is_required_as_header_or_path(maze_url):
    port_url = maze_url
    assert httpx.get(f"{port_url}/health").json() == {"status": "healthy"}
    assert httpx.get(f"{port_url}/metadata").status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{port_url}/metadata", headers=auth).json()["name"] == "arborl/Maze-v0"
    assert httpx.get(f"{port_url}/{TOKEN}/metadata").status_code == 200
    assert httpx.get(f"{port_url}/{TOKEN}x/metadata").status_code == 401
    ws = port_url.replace("http://", "ws://")
    for url, headers in [(f"{ws}/ws", None), (f"{ws}/wrong/ws", None),
                         (f"{ws}/ws", {"Authorization": "Bearer wrong"})]:  # fmt: skip
        with pytest.raises(InvalidStatus) as e:
            connect(url, additional_headers=headers).close()
        assert e.value.response.status_code == 403
    with connect(f"{ws}/{TOKEN}/ws") as c:  # how OpenEnv's stock client authenticates
        c.send(json.dumps({"type": "state"}))
        assert json.loads(c.recv())["data"]["env_id"] == "arborl/Maze-v0"
    with pytest.raises(EnvCallError, match="403"):
        make_pool("arborl/Maze-v0", 1, mode="openenv", urls=[port_url], token="wrong")


def test_a_package_env_is_served_from_its_own_venv(counter_home):
    port = free_port()
    cmd = [sys.executable, "-m", "arborl.cli.main", "env", "serve", COUNTER_ID, "--protocol",
           "openenv", "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env(ARBORL_HOME=str(counter_home)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url)
        pool = make_pool(COUNTER_ID, 2, mode="openenv", urls=[url], token=TOKEN)
        try:
            obs, infos = pool.reset([1, 2])
            assert all(o.startswith("value 0, target ") for o in obs) and pool[0].max_turns == 12
            res, _ = pool.step(["inc", "junk"])
            assert res[0].obs.startswith("value 1,") and not res[1].info["valid_action"]
            assert infos[0]["anchor"] == (infos[0]["anchor"][0], 0)
            assert check_env(pool[0], num_seeds=1) == []
        finally:
            pool.close()
    finally:
        _stop(proc)


def test_openenv_mode_needs_server_urls():
    with pytest.raises(ValueError, match="give urls="):
        make_pool("arborl/Maze-v0", 1, mode="openenv")


def test_env_kwargs_flag_is_for_the_openenv_protocol_only(capsys):
    assert main(["env", "serve", "arborl/Maze-v0", "--env-kwargs", '{"split": "test"}']) == 2
    assert "--protocol openenv only" in capsys.readouterr().err


@pytest.fixture
def strict_url():
    """A server with tight limits: one session, 2 KB frames, JSON depth 8."""
    port = free_port()
    cmd = [sys.executable, "-m", "arborl.envs.remote.openenv_server", "arborl/Maze-v0",
           "--port", str(port), "--max-sessions", "1", "--max-body-bytes", "2048",
           "--max-json-depth", "8"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url)
        yield url.replace("http://", "ws://") + f"/{TOKEN}/ws"
    finally:
        _stop(proc)


def _ask(c, message: dict) -> dict:
    c.send(json.dumps(message))
    return json.loads(c.recv())


def test_every_request_is_bounded_before_work(strict_url):
    with connect(strict_url) as c:
        err = _ask(c, {"type": "step", "data": {"action": "up"}})["data"]
        assert err["code"] == "VALIDATION_ERROR" and "call reset before step" in err["message"]
        err = _ask(c, {"type": "reset", "data": {"sead": 1}})["data"]
        assert "unknown keys ['sead']" in err["message"] and "'seed'" in err["message"]
        err = _ask(c, {"type": "reset", "data": {"env_kwargs": {"size": 100000}}})["data"]
        assert "kwargs_limit" in err["message"] and "100000" in err["message"]
        deep = {"type": "reset", "data": {"options": json.loads("[" * 20 + "]" * 20)}}
        err = _ask(c, deep)["data"]
        assert err["code"] == "VALIDATION_ERROR" and "too_deep" in err["message"]
        reply = _ask(c, {"type": "reset", "data": {"seed": 3}})  # still usable after errors
        assert reply["type"] == "observation"
        rebuilt = _ask(c, {"type": "reset", "data": {"seed": 3, "env_kwargs": {"split": "test"}}})
        _, want = make("arborl/Maze-v0", split="test").reset(seed=3)  # rebuilt in place, not
        assert rebuilt["data"]["observation"]["info"]["task_id"] == want["task_id"]  # refused
        with connect(strict_url) as second:  # --max-sessions 1: refused, then closed
            err = json.loads(second.recv())["data"]
            assert err["code"] == "CAPACITY_REACHED" and "server_full" in err["message"]
        c.send(json.dumps({"type": "step", "data": {"action": "x" * 4096}}))
        with pytest.raises(ConnectionClosed) as e:
            c.recv()
        assert e.value.rcvd.code == 1009  # frame over --max-body-bytes: closed unread
    http = strict_url.replace("ws://", "http://").removesuffix("/ws")
    assert httpx.post(f"{http}/step", json={"action": {"action": "up"}}).status_code == 409
    out = httpx.post(f"{http}/reset", json={"seed": 3}).json()  # stateless, as OpenEnv's
    assert out["done"] is False and "A" in out["observation"]["text"]


def test_a_call_past_its_deadline_is_an_error_and_health_turns_unhealthy():
    from starlette.testclient import TestClient

    from arborl.envs.remote.host import EnvHost
    from arborl.envs.remote.openenv_server import create_app
    from tests.envs import _slow_env  # the module the entry point below imports

    spec = {"id": "test/Slow-v0", "entry_point": "tests.envs._slow_env:SlowEnv"}
    app = create_app(EnvHost(spec["id"], b"k" * 32, spec), TOKEN, call_timeout_s=0.5)
    _slow_env.RELEASE.clear()
    try:
        with TestClient(app) as client, client.websocket_connect(f"/{TOKEN}/ws") as ws:
            ws.send_text(json.dumps({"type": "reset", "data": {"options": {"sleep_s": 30}}}))
            err = json.loads(ws.receive_text())["data"]
            assert err["code"] == "EXECUTION_ERROR" and "deadline of 0.5s" in err["message"]
            health = client.get("/health")  # what `env serve` polls to restart the replica
            assert health.status_code == 503 and health.json() == {"status": "unhealthy"}
            _slow_env.RELEASE.set()  # let the stuck call end before the client shuts down
    finally:
        _slow_env.RELEASE.set()


# --- the real openenv-core on the other side ------------------------------------------


@pytest.mark.slow  # makes a venv (~20 s on 2 loaded cores)
def test_a_venv_that_cannot_be_built_is_an_error_with_pip_s_output(tmp_path):
    with pytest.raises(RuntimeError, match="(?s)failed at.*arborl-no-such-package"):
        build_venv(tmp_path / "venv", sys.executable, "arborl-no-such-package==0.0.0")
    assert not (tmp_path / "venv" / ".arborl-openenv-installed").exists()


@pytest.mark.slow  # builds openenv-core's venv on a new machine (~2 min), cached after
def test_openenv_core_client_plays_an_arborl_env(maze_url, openenv_python):
    env = make("arborl/Maze-v0", split="test")
    env.reset(seed=3)
    actions, expected = ["nonsense"], [env.step("nonsense")]
    while not (expected[-1][2] or expected[-1][3]):
        actions.append(env.oracle_action())
        expected.append(env.step(actions[-1]))
    assert len(actions) >= 3 and expected[-1][1] == 1.0 and expected[-1][4]["won"]
    out = subprocess.run([openenv_python, str(SCRIPTS / "play_client.py"), f"{maze_url}/{TOKEN}",
                          "3", json.dumps(actions)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["reset"]["done"] is False and got["reset"]["reward"] is None
    assert len(got["steps"]) == len(expected)
    for step, (obs, reward, terminated, truncated, info) in zip(got["steps"], expected):
        assert step["observation"]["text"] == obs
        assert step["reward"] == reward and step["done"] == (terminated or truncated)
        assert step["observation"]["info"]["won"] == info["won"]
        assert step["observation"]["info"]["valid_action"] == info["valid_action"]
    assert got["steps"][0]["observation"]["info"]["valid_action"] is False
    assert got["steps"][-1]["reward"] == 1.0 and got["steps"][-1]["done"] is True
    assert got["state"]["step_count"] == len(actions)
    assert got["state"]["env_id"] == "arborl/Maze-v0"


@pytest.fixture
def openenv_core_server(openenv_python):
    """`openenv/counter_server.py`: an env built on openenv-core's classes, on 127.0.0.1."""
    port = free_port()
    proc = subprocess.Popen([openenv_python, str(SCRIPTS / "counter_server.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, timeout_s=120)  # openenv-core imports gradio: slow start
        yield url
    finally:
        _stop(proc)


@pytest.mark.slow
def test_arborl_pool_drives_an_openenv_core_server(openenv_core_server):
    pool = make_pool("openenv-test/Count", 3, mode="openenv", urls=[openenv_core_server],
                     action_key="message", text_key="echoed")  # fmt: skip
    try:
        obs, infos = pool.reset([5, 6, 7])
        assert obs == ["start 5", "start 6", "start 7"]
        assert [i["observation"]["seed"] for i in infos] == [5, 6, 7]
        assert [i["task_id"] for i in infos] == ["seed-5", "seed-6", "seed-7"]
        results, done = pool.step(["a", "quit", "b"])
        assert [r.obs for r in results] == ["a #1", "quit", "b #1"]
        assert [r.reward for r in results] == [0.0, 0.0, 0.0] and done == [False, True, False]
        assert results[1].terminated and not results[1].truncated
        pool.step(["b", None, "c"])
        results, done = pool.step(["c", None, None])
        assert results[0].obs == "c #3" and results[0].reward == 1.0 and results[0].terminated
        assert results[0].info["observation"]["count"] == 3 and results[1:] == [None, None]
        assert done == [True, True, False] and pool.active == [2]
        with pytest.raises(NotImplementedError, match="no 'oracle'"):
            pool[2].oracle_action()
        with pytest.raises(EnvCallError, match="no 'snapshot'"):
            pool[2].snapshot()
        obs, _ = pool.reset([8, 8, 8])  # a new episode on the same connections
        assert obs == ["start 8"] * 3 and pool.num_env_errors == 2
    finally:
        pool.close()


def test_trainer_pool_mode_openenv_uses_env_urls(maze_url, monkeypatch):
    from arborl.config import ConfigError
    from arborl.train.build import build_train_pool
    from arborl.train.config import load_train_config

    with pytest.raises(ConfigError, match=r"env\.urls is empty; set env\.urls="):
        load_train_config(["env.pool_mode=openenv"])
    with pytest.raises(ConfigError, match=r"env\.urls=.* only read by pool_mode http or openenv"):
        load_train_config([f"env.urls=[{maze_url}]"])
    monkeypatch.setenv("ARBORL_TOKEN", TOKEN)
    cfg = load_train_config(["env.pool_mode=openenv", f"env.urls=[{maze_url}]"])
    assert cfg.env.urls == [maze_url]
    pool = build_train_pool(cfg, num_envs=2)
    ref = EnvPool("arborl/Maze-v0", 2, split="train", short_actions=True)
    try:
        assert pool.mode == "openenv"
        assert pool.reset([5], group_size=2) == ref.reset([5], group_size=2)
        assert pool.step(["u", "x"]) == ref.step(["u", "x"])
    finally:
        pool.close()


def test_eval_and_rollout_run_on_openenv_servers(maze_url, monkeypatch, tmp_path, capsys):
    """`arborl eval/rollout --pool-mode openenv --env-urls URL`: the episodes played on the
    server are the ones played in process (same tasks, same oracle moves)."""
    monkeypatch.setenv("ARBORL_TOKEN", TOKEN)
    common = ["--env", "arborl/Maze-v0", "--split", "test", "--num-episodes", "6",
              "--seed", "3", "--policy", "oracle"]  # fmt: skip
    remote, local = tmp_path / "remote.json", tmp_path / "local.json"
    flags = ["--no-baselines", "--no-progress", "--json"]
    assert main(["eval", *common, *flags, str(remote), "--pool-mode", "openenv",
                 "--env-urls", maze_url]) == 0  # fmt: skip
    assert main(["eval", *common, *flags, str(local), "--pool-mode", "inproc"]) == 0
    (r,), (ref,) = json.loads(remote.read_text())["rows"], json.loads(local.read_text())["rows"]
    assert r["episodes"] == ref["episodes"] == 6
    for key in ("success", "mean_turns", "mean_return", "lost_tasks"):
        assert r[key] == ref[key], key
    out = tmp_path / "episodes.jsonl"
    assert main(["rollout", *common, "--out", str(out), "--no-progress",
                 "--pool-mode", "openenv", "--env-urls", maze_url]) == 0  # fmt: skip
    assert len(out.read_text().splitlines()) == 6
    capsys.readouterr()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--pool-mode", "openenv"], "--env-urls is empty; pass --env-urls http://HOST:PORT"),
        (["--env-urls", "http://127.0.0.1:9"], "only read by --pool-mode http or openenv"),
    ],
)
@pytest.mark.parametrize("command", ["eval", "rollout"])
def test_pool_flags_without_their_partner_stop_before_any_episode(
    command, flags, message, tmp_path, capsys
):
    args = [command, "--env", "arborl/Maze-v0", "--policy", "random", "--num-episodes", "2"]
    if command == "rollout":
        args += ["--out", str(tmp_path / "e.jsonl")]
    with pytest.raises(SystemExit, match=message):
        main([*args, *flags])
    assert not (tmp_path / "e.jsonl").exists()
