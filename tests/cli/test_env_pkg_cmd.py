"""`arborl env add/setup/list/dockerfile/serve` through the real entry point, and the
Docker build context (its server command is run from the context to prove it suffices)."""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest

from arborl.cli.main import main
from arborl.envs.packages.dockerfile import dockerfile_text, write_docker_context
from arborl.envs.packages.manifest import load_manifest
from arborl.envs.remote.serve import free_port
from tests.envs._pkg import *  # noqa: F403
from tests.envs._pkg import COUNTER_ID, FIXTURE


def test_add_then_list_shows_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path))
    assert main(["env", "add", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "registered package 'counter-fixture'" in out and f"arborl env setup {COUNTER_ID}" in out
    assert main(["env", "list"]) == 0
    out = capsys.readouterr().out
    assert "arborl/Maze-v0" in out  # the registry table is still there
    line = next(x for x in out.splitlines() if x.startswith(f"{COUNTER_ID}  package="))
    assert "package=counter-fixture" in line and "isolation=subprocess" in line
    assert f"not set up: arborl env setup {COUNTER_ID}" in line


def test_list_after_setup_and_setup_again(counter_interp, capsys):
    assert main(["env", "list"]) == 0
    line = next(
        x for x in capsys.readouterr().out.splitlines() if x.startswith(f"{COUNTER_ID}  package=")
    )
    assert "[set up]" in line
    assert main(["env", "setup", COUNTER_ID]) == 0
    out = capsys.readouterr().out
    assert "already set up" in out and f"python: {counter_interp.python}" in out


def test_check_package_env_through_its_pool(counter_interp, capsys):
    # The host cannot import counter_env (tinycount lives in the venv only): check runs
    # through a pool in the package's preferred mode, or the one asked for.
    assert main(["env", "check", COUNTER_ID, "--num-seeds", "1"]) == 0
    assert main(["env", "check", COUNTER_ID, "--num-seeds", "1", "--mode", "http"]) == 0
    assert capsys.readouterr().out.count(f"OK    {COUNTER_ID}") == 2
    assert (
        main(["env", "check", "arborl/Game24-v0", "--num-seeds", "1", "--mode", "subprocess"]) == 0
    )


def test_setup_unknown_id(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path))
    with pytest.raises(KeyError, match="arborl env add PATH"):
        main(["env", "setup", "me/Nope-v0"])


def test_help_strings(capsys):
    for sub in ("add", "setup", "serve", "dockerfile"):
        with pytest.raises(SystemExit):
            main(["env", sub, "--help"])
    out = capsys.readouterr().out
    assert (
        "--replicas N` uses PORT..PORT+N-1" in " ".join(out.split())  # ServerConfig.port's doc
        and "rebuild even if already set up" in out
    )
    assert "context folder (default ./docker-<package>)" in out


def test_dockerfile_reproduces_setup():
    text = dockerfile_text(load_manifest(FIXTURE), COUNTER_ID)
    lines = text.splitlines()
    assert "FROM python:3.11-slim" in lines and "RUN python -m venv /opt/env" in lines
    assert '/env/vendor/tinycount "fastapi>=0.110" "uvicorn>=0.29"' in text
    assert "RUN bash /env/setup.sh" in lines and "EXPOSE 8000" in lines
    assert lines[-1] == ('CMD ["/opt/env/bin/python", "-m", "arborl.envs.remote.http_server", '
                         '"fixture/Counter-v0", "--host", "0.0.0.0", "--port", "8000"]')  # fmt: skip
    spec_line = next(x for x in lines if x.startswith("ENV ARBORL_ENV_SPEC="))
    spec = json.loads(json.loads(spec_line.split("=", 1)[1]))
    assert spec["entry_point"] == "counter_env:CounterEnv" and spec["max_turns"] == 12


def test_docker_context_serves_with_its_own_files(
    counter_interp, tmp_path, capsys, wait_for_health
):
    out = tmp_path / "ctx"
    assert main(["env", "dockerfile", COUNTER_ID, "--out", str(out)]) == 0
    assert "docker build -t counter-fixture" in capsys.readouterr().out
    assert (out / "env" / "counter_env.py").is_file() and (out / "env" / "setup.sh").is_file()
    assert (out / "arborl-runtime" / "arborl" / "envs" / "remote" / "http_server.py").is_file()
    assert not (out / "arborl-runtime" / "arborl" / "train").exists()  # no training stack
    # Run the image's CMD with the context's paths (PYTHONPATH as the Dockerfile sets it)
    # and the package's venv standing in for /opt/env.
    text = (out / "Dockerfile").read_text()
    spec = json.loads(json.loads(next(x for x in text.splitlines()
                                      if x.startswith("ENV ARBORL_ENV_SPEC=")).split("=", 1)[1]))  # fmt: skip
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{out / 'arborl-runtime'}:{out / 'env'}",
           "ARBORL_ENV_SPEC": json.dumps(spec), "ARBORL_TOKEN": "t"}  # fmt: skip
    # -S skips the venv's .pth (which points at this checkout): only the context's copies
    # of arborl and of the package can be imported, plus the venv's installed packages.
    site = subprocess.run([str(counter_interp.python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    boot = f"import sys; sys.path.append({site!r}); "
    where = subprocess.run([str(counter_interp.python), "-S", "-c", boot +
                            "import arborl.envs.remote.http_server as m, counter_env as c, tinycount;"
                            "print(m.__file__); print(c.__file__)"],
                           env=env, cwd=out / "env", capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(out)) for line in where.stdout.split())
    run = (
        boot
        + "import runpy; runpy.run_module('arborl.envs.remote.http_server', run_name='__main__')"
    )
    proc = subprocess.Popen([str(counter_interp.python), "-S", "-c", run, COUNTER_ID, "--port",
                             str(port)], cwd=out / "env", env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_health(proc, f"http://127.0.0.1:{port}")
        auth = {"Authorization": "Bearer t"}
        sid = httpx.post(f"http://127.0.0.1:{port}/sessions", json={}, headers=auth).json()[
            "session_id"
        ]
        r = httpx.post(
            f"http://127.0.0.1:{port}/sessions/{sid}/reset", json={"seed": 1}, headers=auth
        )
        assert r.json()["observation"].startswith("value 0, target")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_dockerfile_refuses_out_inside_package(tmp_path):
    with pytest.raises(ValueError, match="inside the package folder"):
        write_docker_context(load_manifest(FIXTURE), COUNTER_ID, FIXTURE / "ctx")
