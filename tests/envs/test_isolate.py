"""Isolated set-up: a real venv with the package's own dependency, idempotent, logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arborl.envs.packages.isolate import (
    STAMP,
    SetupError,
    find_python,
    interpreter_for,
    plan_setup,
    prefix_for,
    setup_env,
)
from arborl.envs.packages.manifest import load_manifest
from arborl.envs.packages.userdata import add_package

from ._pkg import *  # noqa: F403
from ._pkg import COUNTER_ID, FIXTURE


def _run(python, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                          cwd="/", timeout=60)  # fmt: skip


def test_dependency_only_inside_the_venv(counter_interp):
    inside = _run(
        counter_interp.python, "import tinycount, sys; print(tinycount.__version__, sys.prefix)"
    )
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["0.1.0", str(counter_interp.prefix)]
    outside = _run(sys.executable, "import tinycount")
    assert outside.returncode != 0 and "No module named 'tinycount'" in outside.stderr


def test_worker_code_imports_without_torch(counter_interp):
    # The worker entry needs arborl.envs only; the venv has neither torch nor numpy at all.
    code = ("import sys, arborl.envs.remote.stdio_worker, arborl.envs.remote.host, counter_env;"
            "print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules));"
            "import importlib.util as u; print(u.find_spec('torch') is None)")  # fmt: skip
    out = _run(counter_interp.python, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_setup_script_ran_inside_and_stamp(counter_interp):
    marker = (counter_interp.prefix / "setup-marker.txt").read_text().split()
    assert marker == [str(counter_interp.prefix), "0.1.0"]  # sys.prefix of the venv's python
    stamp = json.loads((counter_interp.prefix / STAMP).read_text())
    assert stamp["backend"] == "venv" and stamp["python"] == str(counter_interp.python)
    log = counter_interp.log.read_text()
    assert "-m venv" in log and "pip install" in log and "setup.sh" in log
    assert not (FIXTURE / "vendor" / "tinycount" / "build").exists()  # no build junk in the package


def test_setup_is_idempotent(counter_interp):
    log_before = counter_interp.log.read_text()
    lines: list[str] = []
    start = time.perf_counter()
    again = setup_env(load_manifest(FIXTURE), log=lines.append)
    assert time.perf_counter() - start < 2.0 and "already set up" in lines[0]
    assert again.prefix == counter_interp.prefix and counter_interp.log.read_text() == log_before
    assert interpreter_for(COUNTER_ID).python == counter_interp.python
    assert interpreter_for("arborl/Maze-v0") is None


def test_not_set_up_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path))
    add_package(FIXTURE)
    with pytest.raises(SetupError, match=r"run `arborl env setup fixture/Counter-v0` first"):
        interpreter_for(COUNTER_ID)


def _package(tmp_path: Path, extra: str, files: dict[str, str] | None = None) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "arborl-env.toml").write_text(
        f"name='p'\n{extra}\n[[envs]]\nid='me/P-v0'\nentry_point='p:P'\n"
    )
    for name, text in (files or {}).items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_conda_required_but_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no conda-like tool here
    pkg = _package(tmp_path, "[dependencies]\nconda='environment.yml'",
                   {"environment.yml": "dependencies: [python=3.11, pip]\n"})  # fmt: skip
    with pytest.raises(
        SetupError,
        match="none of \\['micromamba', 'mamba', 'conda'\\] is on PATH.*install micromamba",
    ):
        setup_env(load_manifest(pkg), log=lambda s: None)


def test_conda_commands_are_built(tmp_path):
    pkg = _package(tmp_path, "[dependencies]\nconda='environment.yml'\npip=['tinycount']",
                   {"environment.yml": "dependencies: [python=3.11, pip]\n"})  # fmt: skip
    m, prefix = load_manifest(pkg), tmp_path / "prefix"
    env_file = str(pkg / "environment.yml")
    mm = plan_setup(m, prefix, conda="/opt/bin/micromamba")
    assert mm[0] == [
        "/opt/bin/micromamba",
        "create",
        "--yes",
        "--prefix",
        str(prefix),
        "--file",
        env_file,
    ]
    conda = plan_setup(m, prefix, conda="/opt/bin/conda")
    assert conda[0] == [
        "/opt/bin/conda",
        "env",
        "create",
        "--prefix",
        str(prefix),
        "--file",
        env_file,
    ]
    assert mm[1][:5] == [str(prefix / "bin" / "python"), "-m", "pip", "install", "--no-compile"]
    assert "tinycount" in mm[1] and "fastapi>=0.110" in mm[1]


def test_missing_python_version_says_how_to_fix():
    with pytest.raises(SetupError, match="python='3.2' but no `python3.2` is on PATH"):
        find_python("3.2")
    assert find_python("") == sys.executable


def test_failing_command_shows_command_and_output(tmp_path, monkeypatch):
    # A stand-in `micromamba` on PATH (a real executable) that fails the way a solver does:
    # set-up must run the command it built, then report it and the output's last lines.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "micromamba"
    fake.write_text('#!/bin/sh\necho "called with: $*"\nfor i in $(seq 1 40); do echo "solver line $i"; done\n'
                    'echo "error: nothing provides tinycount-missing" >&2\nexit 3\n')  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ARBORL_HOME", str(tmp_path / "home"))
    pkg = _package(tmp_path, "[dependencies]\nconda='environment.yml'",
                   {"environment.yml": "dependencies: [python=3.11, pip, tinycount-missing]\n"})  # fmt: skip
    m = load_manifest(pkg)
    with pytest.raises(SetupError) as err:
        setup_env(m, log=lambda s: None)
    msg = str(err.value)
    prefix = prefix_for(m)
    assert f"set-up command failed (3):\n  $ {fake} create --yes --prefix {prefix} --file" in msg
    # 42 lines of output (1 + 40 + 1): the last 30 start at solver line 12
    assert "last 30 lines" in msg and "solver line 40" in msg and "solver line 12\n" in msg
    assert "solver line 11\n" not in msg and "nothing provides tinycount-missing" in msg
    assert (
        f"full log: {prefix}.log" in msg
        and "called with: create --yes" in Path(f"{prefix}.log").read_text()
    )
    assert not (prefix / STAMP).exists()  # a failed set-up is never stamped done


def test_concurrent_setups_take_turns(counter_interp, counter_home):
    """A second `setup_env` of a package waits for the one in progress, then reuses its build
    (before the lock, it deleted the first one's half-built prefix)."""
    from arborl.envs.packages.isolate import _setup_lock

    code = (
        "import sys; from arborl.envs.packages.isolate import setup_env;"
        "from arborl.envs.packages.manifest import load_manifest;"
        f"setup_env(load_manifest({str(FIXTURE)!r}), log=lambda s: print(s, flush=True))"
    )
    env = {**os.environ, "ARBORL_HOME": str(counter_home)}
    with _setup_lock(counter_interp.prefix, "test", log=lambda s: None):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env=env)  # fmt: skip
        first = proc.stdout.readline()
        assert "another set-up of this package is running; waiting" in first
        time.sleep(0.3)
        assert proc.poll() is None  # still waiting while the lock is held
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "already set up" in rest
