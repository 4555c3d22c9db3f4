"""kill -9 in the middle of a checkpoint save (review-2's fault scenarios).

A real `arborl train` process kills itself with SIGKILL while its step-4 checkpoint is
half written (weights and trainer_state.pt in `.tmp-step-4/`, no manifest yet). Nothing
half-written is ever resumed from: `trainer.resume=auto` goes back to step 2, the last
checkpoint that verifies, trains steps 3-4 again, removes the torn folder, and ends with
the weights and metrics of a run that was never killed, bit for bit.
"""

import os
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from arborl.train.checkpoint import MANIFEST_FILE, STATE_FILE
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.runlog import read_metrics

pytestmark = pytest.mark.fault("kill -9 during a save")

# Without SFT every action is invalid and every group ties; the tied rows are kept and an
# entropy bonus moves the weights at every step.
TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.enabled=false",
    "rollout.num_tasks=2",
    "rollout.group_size=4",
    "rollout.max_turns=3",
    "eval.num_episodes=2",
    "eval.every=0",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.report=false",
    "trainer.num_threads=1",
    "reward.sources={env: 1.0, invalid_action: 0.5}",
    "algo.drop_zero_adv=false",
    "algo.entropy_coef=0.01",
    "trainer.total_steps=4",
    "trainer.save_every=2",
]

# `arborl train`, except that the step-4 save SIGKILLs the process after writing the
# weights and trainer_state.pt and before the manifest that would make them a checkpoint.
KILL_MID_SAVE = """
import os, signal, sys
import arborl.train.checkpoint as ck
real = ck.write_manifest
def write_manifest(directory):
    if directory.name == ".tmp-step-4":
        os.kill(os.getpid(), signal.SIGKILL)
    real(directory)
ck.write_manifest = write_manifest
from arborl.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _fit(tmp_path, name, *extra) -> None:
    RLTrainer(load_train_config([*TOY, f"trainer.output_dir={tmp_path}",
                                 f"trainer.name={name}", *extra])).fit()  # fmt: skip


def _weights(run, step):
    return load_file(run / "checkpoints" / f"step-{step}" / "policy" / "model.safetensors")


def _rl(run):
    keys = ("actor/pg_loss", "train/mean_return", "actor/entropy")
    recs = [r for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]
    return {r["step"]: [r.get(k) for k in keys] for r in recs}


def test_kill_9_mid_save_resumes_from_the_last_whole_checkpoint_bit_exactly(tmp_path):
    _fit(tmp_path, "straight")
    cmd = [sys.executable, "-c", KILL_MID_SAVE, "train", *TOY,
           f"trainer.output_dir={tmp_path}", "trainer.name=cut"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    ckpts = tmp_path / "cut" / "checkpoints"
    torn = ckpts / ".tmp-step-4"
    assert (torn / STATE_FILE).is_file() and not (torn / MANIFEST_FILE).exists()
    assert sorted(p.name for p in ckpts.iterdir()) == [".tmp-step-4", "step-2"]

    _fit(tmp_path, "cut", "trainer.resume=auto")
    cut, straight = tmp_path / "cut", tmp_path / "straight"
    assert "at step 2" in (cut / "run.log").read_text()  # not the torn step 4
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-2", "step-4"]
    a, b = _weights(straight, 4), _weights(cut, 4)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], _weights(straight, 2)[k]) for k in a)  # steps 3-4 trained
    assert _rl(cut) == _rl(straight) and sorted(_rl(cut)) == [1, 2, 3, 4]  # each step once
