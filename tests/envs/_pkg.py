"""Shared set-up for the env-package tests: the counter fixture package, set up once.

`setup_env` is idempotent (keyed by the manifest hash) and the `ARBORL_HOME` used here is
one folder per pytest session (shared by its xdist workers, who take turns on a lock), so
however many test modules ask for the package, its venv is built once per session. Import the fixtures into a test module to use them:
`from ._pkg import *  # noqa: F403` (a star import: `__all__` holds the fixtures only, and
pytest's fixture-as-argument pattern would otherwise read as a redefinition to ruff).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from arborl.envs.packages.isolate import setup_env
from arborl.envs.packages.userdata import add_package

FIXTURE = Path(__file__).parent / "fixtures" / "counter_pkg"
COUNTER_ID = "fixture/Counter-v0"
__all__ = ["_counter_session", "counter_home", "counter_interp"]


@pytest.fixture(scope="session")
def _counter_session(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    home = base / "arborl-home"
    old = os.environ.get("ARBORL_HOME")
    os.environ["ARBORL_HOME"] = str(home)
    try:
        with open(base / "arborl-home.lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # one worker registers and builds
            interp = setup_env(add_package(FIXTURE), log=lambda line: None)
    finally:
        if old is None:
            os.environ.pop("ARBORL_HOME")
        else:
            os.environ["ARBORL_HOME"] = old
    return home, interp


@pytest.fixture
def counter_home(_counter_session, monkeypatch) -> Path:
    """ARBORL_HOME holding the registered, set-up counter package."""
    monkeypatch.setenv("ARBORL_HOME", str(_counter_session[0]))
    return _counter_session[0]


@pytest.fixture
def counter_interp(_counter_session, counter_home):
    """The counter package's isolated `Interpreter` (ARBORL_HOME set as for `counter_home`)."""
    return _counter_session[1]
