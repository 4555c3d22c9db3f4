"""A new episode-level estimator from outside arborl is its math, one registration and a
test: a package written here (as a user's would be installed) registers `median`, and
`arborl train algo=median` trains two steps with it, found through the package's
`arborl.algorithms` entry point, with no import and no edit in arborl."""

import json
import os
import subprocess
import sys
import textwrap

import yaml

from tests._status import owed_status

PLUGIN = '''
"""GRPO with the group median as the baseline (robust to one outlier episode)."""
import os

import torch

from arborl.algos import group_index
from arborl.train.advantages import episode_algorithm


@episode_algorithm("median", defaults={"lr": 3.0e-5, "norm_by_std": False})
def median_baseline(scores, group_ids, algo):
    index, n = group_index(group_ids)
    medians = torch.stack([scores[index == g].median() for g in range(n)])
    with open(os.environ["MEDIAN_LOG"], "a") as f:  # the test checks it was called
        f.write(f"{len(scores)}\\n")
    return scores - medians[index]
'''


def test_arborl_train_trains_with_an_estimator_registered_outside_arborl(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "median_pkg.py").write_text(textwrap.dedent(PLUGIN))
    info = plugins / "median_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: median-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[arborl.algorithms]\nmedian = median_pkg:median_baseline\n"
    )
    log = tmp_path / "calls.txt"
    env = {**os.environ, "MEDIAN_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(plugins), *sys.path])}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", "algo=median",
         "model.name_or_path=tiny-0.1m", "sft.steps=20", "sft.num_demos=8", "sft.lr=3e-3",
         "rollout.num_tasks=2", "rollout.group_size=4", "rollout.max_turns=3",
         "eval.num_episodes=4", "trainer.total_steps=2", "trainer.progress=false",
         "trainer.plots=false", "trainer.report=false", "trainer.loggers=[]",
         f"trainer.output_dir={tmp_path}", "trainer.name=med"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    run = tmp_path / "med"
    assert out.returncode == owed_status(run), out.stderr[-3000:]
    algo = yaml.safe_load((run / "config.yaml").read_text())["algo"]
    assert (algo["name"], algo["lr"], algo["norm_by_std"]) == ("median", 3.0e-5, False)
    assert log.read_text().split() == ["8", "8"]  # one call per RL step, 2 x 4 episodes
    steps = [json.loads(x) for x in (run / "metrics.jsonl").open() if '"train/success"' in x]
    assert len(steps) == 2
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_a_typo_names_the_registered_algorithms(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", "algo=grop",
         f"trainer.output_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "algo='grop' is not registered" in out.stderr and "Did you mean 'grpo'?" in out.stderr
    assert "Traceback" not in out.stderr
