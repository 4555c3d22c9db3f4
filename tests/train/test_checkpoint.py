"""Resuming is bit-exact: 6 RL steps straight == 3 steps, SIGKILL, resume=auto, 3 more.

The killed run is a real `arborl train` process killed right after its step-3 checkpoint
appears; the resumed run is a fresh process. Final policy (and, for ppo, critic) weights
must be torch.equal to an uninterrupted run's.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from arborl.train.checkpoint import checkpoint_dirs, resolve_resume, save_checkpoint
from arborl.train.runlog import read_metrics

# SFT makes some actions valid, so invalid-action penalties give groups mixed rewards and
# every RL step really changes the weights.
TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.steps=20",
    "sft.num_demos=8",
    "sft.lr=3e-3",
    "sft.warmup_steps=2",
    "rollout.num_tasks=2",
    "rollout.group_size=4",
    "rollout.max_turns=4",
    "eval.num_episodes=4",
    "eval.every=2",
    "eval.every_episodes=2",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.save_trajectories=2",
    "trainer.num_threads=1",
    "reward.sources={env: 1.0, invalid_action: 0.5}",
    "trainer.total_steps=6",
    "trainer.save_every=3",
    "trainer.keep_checkpoints=3",
    "algo.lr_schedule=cosine",
    "algo.warmup_steps=2",
]


def _cmd(args):
    return [sys.executable, "-m", "arborl.cli.main", "train", *TOY, *args]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _weights(run: Path, step: int, part: str) -> dict[str, torch.Tensor]:
    d = run / "checkpoints" / f"step-{step}" / part
    name = "model.safetensors"
    out = load_file(d / name)
    if part == "critic":
        out.update({f"head.{k}": v for k, v in load_file(d / "value_head.safetensors").items()})
    return out


def _assert_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# Both engines: the local one, and Ray with 2 FSDP2 train ranks and 2 rollout workers (a
# KL term, so the sharded reference is saved and restored too).
RAY = [
    "trainer.backend=ray", "trainer.num_train_ranks=2", "trainer.num_rollout_workers=2",
    "trainer.ray_cpus_per_worker=0.25", "algo.kl_coef=0.05",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,engine", [("grpo", []), ("ppo", []), ("grpo", RAY)], ids=["grpo", "ppo", "grpo-ray"]
)
def test_kill_and_resume_is_bit_exact(algo, engine, tmp_path):
    common = [f"algo={algo}", f"trainer.output_dir={tmp_path}", *engine]
    subprocess.run(
        _cmd([*common, "trainer.name=straight"]), env=_env(), check=True, capture_output=True
    )

    proc = subprocess.Popen(
        _cmd([*common, "trainer.name=cut"]),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = tmp_path / "cut" / "checkpoints" / "step-3" / "trainer_state.pt"
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert marker.exists()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert [p.name for p in checkpoint_dirs(tmp_path / "cut")] == ["step-3"]

    subprocess.run(
        _cmd([*common, "trainer.name=cut", "trainer.resume=auto"]),
        env=_env(),
        check=True,
        capture_output=True,
    )
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    assert "at step 3" in (cut / "run.log").read_text()
    parts = ["policy", "critic"] if algo == "ppo" else ["policy"]
    for part in parts:
        _assert_equal(_weights(straight, 6, part), _weights(cut, 6, part))
    # Not trivially equal: RL steps 4-6 moved the weights.
    w3, w6 = _weights(straight, 3, "policy"), _weights(straight, 6, "policy")
    assert any(not torch.equal(w3[k], w6[k]) for k in w3)
    # The resumed run logged the same per-step training metrics for steps 4-6.

    def rl(run):
        recs = [r for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]
        keys = ("actor/pg_loss", "train/mean_return", "reward/invalid_action")
        return {r["step"]: [r.get(k) for k in keys] for r in recs if r["step"] > 3}

    assert rl(straight) == rl(cut) and len(rl(cut)) == 3


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(2, 2)

    def save_pretrained(self, d):
        Path(d).mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), Path(d) / "w.pt")


def test_save_prunes_old_checkpoints_and_ignores_partial_ones(tmp_path):
    tok = _Tiny()  # anything with save_pretrained
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, _Tiny(), tok, {"x": step}, keep=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step-2", "step-3"]
    (tmp_path / "checkpoints" / ".tmp-step-4" / "policy").mkdir(parents=True)  # a torn save
    (tmp_path / "checkpoints" / "step-9").mkdir()  # no trainer_state.pt
    assert resolve_resume("auto", tmp_path).name == "step-3"
    assert resolve_resume(None, tmp_path) is None
    with pytest.raises(FileNotFoundError, match="use 'auto'"):
        resolve_resume(str(tmp_path / "checkpoints" / "step-9"), tmp_path)
