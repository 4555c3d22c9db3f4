"""`bench/demo_sweep.py` and `bench/determinism.py`: every candidate / variant is a valid
config (a typo would waste a sweep's hours), and both scripts answer --help."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from arborl.config import ConfigError
from arborl.train.config import load_train_config

from ._scripts import BENCH, load_script


def test_every_demo_sweep_candidate_is_a_valid_config():
    sweep = load_script("demo_sweep")
    assert sweep.CANDIDATES["default"] == []
    for name, overrides in sweep.CANDIDATES.items():
        cfg = load_train_config(overrides)
        assert cfg.model.name_or_path == "tiny-1m", name  # every candidate is the demo's model
    with pytest.raises(ConfigError, match="algo.ppo_epoch"):
        load_train_config(["algo.ppo_epoch=2"])  # what a typo in a candidate would do
    # and together they form one `arborl compare` grid (each run its own SFT start)
    args = SimpleNamespace(candidates=list(sweep.CANDIDATES), seeds=[0, 1], eval_episodes=200,
                           set=[], work_dir="runs/x")  # fmt: skip
    grid = sweep.sweep_grid(args)
    assert grid.start == "own" and ["lr3e-4", "default"] in grid.pairs


def test_every_determinism_variant_is_a_valid_config():
    det = load_script("determinism")
    assert det.VARIANTS["default"] == ({}, []) and det.VARIANTS["repeat"] == ({}, [])
    for env_vars, overrides in det.VARIANTS.values():
        load_train_config(overrides)
        assert all(isinstance(v, str) for v in env_vars.values())


@pytest.mark.slow  # each starts a Python that imports torch
@pytest.mark.parametrize("script", ["demo_sweep.py", "determinism.py"])
def test_scripts_answer_help(script):
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "--work-dir" in proc.stdout and "--out" in proc.stdout


def test_collect_tabulates_a_run_folder_from_what_it_wrote(tmp_path, capsys):
    from arborl.train.rl import RLTrainer

    sweep = load_script("demo_sweep")
    RLTrainer(load_train_config([
        "model.name_or_path=tiny-0.1m", "sft.steps=3", "sft.num_demos=2", "rollout.num_tasks=2",
        "rollout.group_size=2", "rollout.max_turns=3", "eval.num_episodes=3", "eval.every=1",
        "eval.every_episodes=2", "trainer.total_steps=2", "trainer.progress=false",
        "trainer.plots=false", "trainer.report=false", "trainer.loggers=[]",
        f"trainer.output_dir={tmp_path}", "trainer.name=toy", "algo=gigpo",
        "algo.drop_zero_adv=false",
    ])).fit()  # fmt: skip
    out = tmp_path / "collect.json"
    sweep.main(["--collect", str(tmp_path / "toy"), "--out", str(out)])
    (row,) = json.loads(out.read_text())["runs"]
    # the settings that change learning are listed; output/bookkeeping ones are not
    assert "algo.name=gigpo" in row["differences"] and "sft.steps=3" in row["differences"]
    assert not any(d.startswith(("trainer.", "eval.every")) for d in row["differences"])
    assert row["rl_steps"] == 2 and row["finished"]
    # before RL, after step 1 (periodic, 2 episodes) and the final evaluation (3 episodes)
    assert [e["step"] for e in row["evals"]] == [0, 1, 2]
    assert all(
        0.0 <= e["success_lo"] <= e["success"] <= e["success_hi"] <= 1.0 for e in row["evals"]
    )
    assert row["entropy_first5"] is not None and row["entropy_first5"] > 0
    assert "algo.name=gigpo" in capsys.readouterr().out


def test_every_sanity_break_matches_the_code_once_and_changes_it(tmp_path):
    """bench/sanity_breaks.py's edits apply to today's update.py (a refactor that moves the
    code must update them, not silently run an unbroken suite), and a mismatch stops it."""
    breaks = load_script("sanity_breaks")
    source = (breaks.REPO / breaks.TARGET).read_text()
    assert set(breaks.BREAKS) == {"sign", "mask", "gradient"}
    for name in breaks.BREAKS:
        target = tmp_path / f"{name}.py"
        target.write_text(source)
        breaks.apply_break(target, name)
        broken = target.read_text()
        assert broken != source and len(broken) > len(source), name
        compile(broken, str(target), "exec")  # the broken module still imports
    target.write_text("nothing to break here\n")
    with pytest.raises(SystemExit, match="'sign': its text occurs 0 times"):
        breaks.apply_break(target, "sign")
    assert breaks.counts("== 9 failed, 1 passed in 61.2s ==") == {
        "passed": 1, "failed": 9, "errors": 0
    }  # fmt: skip


def test_every_learning_bench_env_set_is_a_valid_config():
    learning = load_script("learning")
    assert set(learning.ENV_SETS) >= {"maze", "sokoban", "frozenlake-slippery", "babyai"}
    ids = {}
    for env, overrides in learning.ENV_SETS.items():
        ids[env] = load_train_config([*overrides, "trainer.num_threads=1"]).env.id
    assert ids["babyai"] == "babyai/GoToLocal-v0" and ids["sokoban"] == "arborl/Sokoban-v0"


def test_learning_bench_results_name_no_machine_folder(tmp_path):
    learning = load_script("learning")
    work = tmp_path / "work"
    assert learning.shown_path(work / "maze-sft-s0" / "policy", work) == (
        "<work-dir>/maze-sft-s0/policy"
    )
    assert learning.shown_path(work, work) == "<work-dir>"
    assert learning.shown_path(BENCH / "results", work) == "bench/results"
