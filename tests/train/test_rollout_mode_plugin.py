"""A rollout mode from outside arborl is a record and an entry point: a package written
here (as a user's would be installed) registers `greedy_first`, and `arborl train
rollout.mode=greedy_first` loads the config and trains a step with it, found through the
package's `arborl.rollout_modes` entry point, with no import and no edit in arborl."""

import json
import os
import subprocess
import sys
import textwrap

import yaml

PLUGIN = '''
"""Flat episodes whose first turn is greedy (a toy mode: the test checks it ran)."""
import os
from dataclasses import replace

from arborl.rollout import run_rollout
from arborl.train.rollout_modes import RolloutMode


def collect(backend, tokenizer, pool, seeds, rollout_cfg, cfg, split):
    with open(os.environ["MODE_LOG"], "a") as f:  # the test checks it was called
        f.write(f"{len(seeds)}x{rollout_cfg.group_size}\\n")
    return run_rollout(backend, tokenizer, pool, seeds, rollout_cfg, cfg.agent, split=split)


MODE = RolloutMode("greedy_first", collect, views=("step",), needs_action=("supports_tree",))
'''


def _package(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "mode_pkg.py").write_text(textwrap.dedent(PLUGIN))
    info = plugins / "mode_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mode-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[arborl.rollout_modes]\ngreedy_first = mode_pkg:MODE\n")
    return {**os.environ, "MODE_LOG": str(tmp_path / "calls.txt"),
            "PYTHONPATH": os.pathsep.join([str(plugins), *sys.path])}  # fmt: skip


def _train(tmp_path, env, *extra):
    return subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", "rollout.mode=greedy_first",
         "model.name_or_path=tiny-0.1m", "sft.steps=5", "sft.num_demos=4",
         "rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=3",
         "eval.num_episodes=2", "trainer.total_steps=1", "trainer.progress=false",
         "trainer.plots=false", "trainer.report=false", "trainer.loggers=[]",
         f"trainer.output_dir={tmp_path}", "trainer.name=plug", *extra],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip


def test_arborl_train_runs_a_rollout_mode_registered_outside_arborl(tmp_path):
    env = _package(tmp_path)
    out = _train(tmp_path, env)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "plug"
    assert yaml.safe_load((run / "config.yaml").read_text())["rollout"]["mode"] == "greedy_first"
    assert (tmp_path / "calls.txt").read_text().split() == ["2x2"]  # one RL step
    steps = [json.loads(x) for x in (run / "metrics.jsonl").open() if '"train/success"' in x]
    assert len(steps) == 1
    # The record's capability is checked at config load, by the record, naming the fix.
    out = _train(tmp_path, env, "agent.action_mode=score", "trainer.name=refused")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert (
        "rollout.mode='greedy_first' needs an action mode with supports_tree, and "
        "agent.action_mode='score' has not: set agent.action_mode to one of ['generate']"
    ) in out.stderr
    assert not (tmp_path / "refused").exists()
