"""Shared set-up for the real-benchmark env packages (envpkgs/*): each venv built once.

The venvs are slow to build (ALFWorld compiles fast-downward: minutes), so unlike the
counter fixture they live in a persistent `ARBORL_HOME`: `ARBORL_TEST_ENV_HOME`, default
`~/.cache/arborl-test/home`. `setup_env` is keyed by the manifest hash, so a second run on
the same machine reuses them and a fresh machine (or an edited manifest) builds them in
the test run itself. A package whose set-up fails fails its tests with the set-up log;
nothing is skipped. ALFWorld's game files come from `ALFWORLD_DATA` when set, else from
the archives in `../shared/data/alfworld` beside the checkout (unpacked once into a cache).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from arborl.envs.packages.isolate import Interpreter, setup_env
from arborl.envs.packages.userdata import add_package

REPO = Path(__file__).resolve().parents[3]
ENVPKGS = REPO / "envpkgs"
SHARED_ALFWORLD = REPO.parent / "shared" / "data" / "alfworld"
DEFAULT_HOME = Path.home() / ".cache" / "arborl-test" / "home"


def test_home() -> Path:
    return Path(os.environ.get("ARBORL_TEST_ENV_HOME", DEFAULT_HOME)).expanduser()


_built: dict[str, Interpreter] = {}


def set_up(name: str, monkeypatch: pytest.MonkeyPatch) -> Interpreter:
    """The package `envpkgs/<name>` registered in the test home and set up (once)."""
    monkeypatch.setenv("ARBORL_HOME", str(test_home()))
    if not os.environ.get("ALFWORLD_DATA") and SHARED_ALFWORLD.is_dir():
        monkeypatch.setenv("ARBORL_ALFWORLD_ARCHIVES", str(SHARED_ALFWORLD))
    if name not in _built:
        _built[name] = setup_env(add_package(ENVPKGS / name), timeout_s=3600, log=lambda s: None)
    return _built[name]


GYM_CHECK = """
import json, sys, warnings
import gymnasium
from gymnasium.utils.env_checker import check_env
from arborl.envs import register
env_id, entry, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
register(env_id, entry_point=entry, max_turns=turns, kwargs=json.loads(sys.argv[5]))
env = gymnasium.make(env_id, split=sys.argv[4])
obs, _ = env.reset(seed=3)
assert env.observation_space.contains(obs), obs
with warnings.catch_warnings():
    warnings.simplefilter("error")
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the engines' own imports
    check_env(env.unwrapped, skip_render_check=True)
print("GYM_CHECK_OK", env_id)
"""


def gym_check(
    interp: Interpreter, env_id: str, entry: str, turns: int, split: str, kwargs: dict | None = None
) -> str:
    """Run Gymnasium's own env_checker on `env_id` inside the package's interpreter."""
    import json

    args = [env_id, entry, str(turns), split, json.dumps(kwargs or {})]
    out = subprocess.run(
        [str(interp.python), "-c", GYM_CHECK, *args],
        capture_output=True, text=True, timeout=900, cwd=interp.manifest.root,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def assert_set_up_and_listed(env_id: str, package: str, capsys) -> None:
    """`arborl env setup` is a no-op the second time and `arborl env list` shows the id."""
    from arborl.cli.main import main

    assert main(["env", "setup", env_id]) == 0
    assert "already set up" in capsys.readouterr().out
    assert main(["env", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith(f"{env_id}  package="))
    assert f"package={package}" in line and "[set up]" in line


def assert_checks_through_pool(env_id: str, mode: str, capsys) -> None:
    """arborl's `check_env`, run on the env in its isolated venv through a `mode` pool."""
    from arborl.cli.main import main

    assert main(["env", "check", env_id, "--num-seeds", "1", "--mode", mode]) == 0
    assert f"OK    {env_id}" in capsys.readouterr().out


def run_probe(interp: Interpreter, code: str, timeout_s: float = 600) -> dict:
    """Run `code` in the package's interpreter; its last stdout line is JSON."""
    import json

    out = subprocess.run([str(interp.python), "-c", code], capture_output=True, text=True,
                         timeout=timeout_s, cwd=interp.manifest.root)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def train_two_rl_steps(overrides: list[str], tmp_path: Path):
    """Two RL steps of `arborl train` at toy size (tiny-0.1m, 2 tasks x 2 episodes of 2
    turns, no SFT, no report) with `overrides` selecting the env; checks the steps ran and
    the final evaluation's episodes had no env errors. Returns the config.

    No report: its random and oracle baselines started two more worker pools and ran
    their episodes (a third of the ALFWorld run's time), and a failing baseline only logs
    a warning, so this test could not catch one (tests/report covers the report)."""
    from arborl.train.config import load_train_config
    from arborl.train.rl import RLTrainer

    cfg = load_train_config([
        *overrides, "sft.enabled=false", "model.name_or_path=tiny-0.1m",
        "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=2",
        "rollout.max_new_tokens=8", "eval.num_episodes=2", "eval.every=0",
        "trainer.total_steps=2", "trainer.progress=false", "trainer.plots=false",
        "trainer.report=false", f"trainer.output_dir={tmp_path}", "trainer.name=pkg",
    ])  # fmt: skip
    summary = RLTrainer(cfg).fit()
    assert summary["steps"] == 2
    assert summary["after"]["episodes"] == 2.0 and summary["after"]["env_errors"] == 0.0
    return cfg
