"""openenv-core in its own venv, built by the test run once per machine and cached.

openenv-core pins its own stack (gradio, fastmcp, openai, ...), so it never goes into
arborl's venv. The venv lives in `~/.cache/arborl-test/openenv-venv-<key>` (or
`ARBORL_TEST_OPENENV_VENV`), keyed by the requirement and the Python, like the env-package
venvs in `packages/_real.py`: a second run reuses it, a new machine or a new pin builds it
(~2 min). A stamp file is written last, so an interrupted build is rebuilt, never taken
for a finished one. A build that fails fails the tests that need it,
with pip's output; nothing is skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REQUIREMENT = "openenv-core==0.3.0"
PYTHON = os.environ.get("ARBORL_TEST_OPENENV_PYTHON", "python3.11")
SCRIPTS = Path(__file__).parent / "openenv"
__all__ = ["openenv_python"]


def venv_dir() -> Path:
    key = hashlib.sha256(f"{REQUIREMENT} {PYTHON}".encode()).hexdigest()[:12]
    default = Path.home() / ".cache" / "arborl-test" / f"openenv-venv-{key}"
    return Path(os.environ.get("ARBORL_TEST_OPENENV_VENV", default)).expanduser()


def build_venv(target: Path, python_exe: str = PYTHON, requirement: str = REQUIREMENT) -> Path:
    """The venv's python, building the venv first if it is not there (raises with the log)."""
    python = target / "bin" / "python"
    if (target / ".arborl-openenv-installed").is_file():
        return python
    shutil.rmtree(target, ignore_errors=True)  # a build without its stamp is unfinished
    target.parent.mkdir(parents=True, exist_ok=True)
    steps = [[python_exe, "-m", "venv", str(target)],
             [str(target / "bin" / "pip"), "install", "--quiet", requirement],
             [str(python), "-c", "import openenv.core.env_server"]]  # fmt: skip
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"building the openenv-core venv in {target} failed at "
                               f"{cmd[:3]} (exit {done.returncode}):\n{done.stdout[-2000:]}"
                               f"{done.stderr[-3000:]}")  # fmt: skip
    (target / ".arborl-openenv-installed").write_text(requirement + "\n")
    return python


@pytest.fixture(scope="session")
def openenv_python() -> str:
    """The python of a venv with the real openenv-core installed (built once, cached)."""
    try:
        return str(build_venv(venv_dir()))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"openenv-core cannot be installed here, so the OpenEnv interop tests "
                    f"cannot run: {e}")  # fmt: skip
