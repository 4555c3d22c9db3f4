"""`bench/gpu_check.py` on a machine without a GPU: the plain run says so and exits 0, and
`--smoke` runs the GPU check's own code (the FSDP2 train step through arborl's sharding,
the trainer stage's command line) on CPU with a tiny shape, so a GPU session finds it
working rather than discovering a typo."""

import json
import subprocess
import sys

import pytest

from ._scripts import BENCH


def _run(*args, timeout=900):
    return subprocess.run(
        [sys.executable, str(BENCH / "gpu_check.py"), *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_without_a_gpu_it_says_so_and_exits_0():
    done = _run(timeout=120)
    assert done.returncode == 0 and "no CUDA device" in done.stdout
    shell = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], capture_output=True, text=True)
    assert shell.returncode == 0 and "skipping the GPU step" in shell.stdout


@pytest.mark.slow
def test_smoke_runs_the_train_step_and_a_trainer_step_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = _run("--smoke", "--stage-timeout", "600", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(out.read_text())
    train = summary["train"]
    assert train["backend"] == "gloo" and train["steps"] == 5 and train["tokens_per_s"] > 0
    assert train["losses"][-1] < train["losses"][0]  # AdamW through FSDP2 moved the weights
    trainer = summary["trainer"]
    assert trainer["status"] == "ok", trainer
    step = trainer["step"]
    assert step["time/weight_sync_s"] > 0
    # PPO's GAE gives a random-init policy nonzero advantages: the actor really updated
    assert step["actor/grad_norm"] > 0 and "critic/values_mean" in step, step
