"""A run folder has one writer (issue 34, review-2 defect 5: two `arborl train` runs with one
name both exited 0 and interleaved metrics, config and checkpoints in one folder).

`RunDir` holds an exclusive flock on `runs/<name>/.lock`; a second trainer is refused at
once, naming the folder and the holder's pid; a trainer killed with SIGKILL leaves no stale
lock, so `trainer.resume=auto` continues its run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arborl.train.checkpoint import latest_checkpoint
from arborl.train.runlog import LOCK_FILE, RunDir, RunDirBusy, read_metrics
from tests._status import owed_status

pytestmark = pytest.mark.fault("duplicate run")


def test_a_second_rundir_on_an_open_folder_is_refused_until_the_first_closes(tmp_path):
    first = RunDir(tmp_path / "run")
    with pytest.raises(RunDirBusy) as e:
        RunDir(tmp_path / "run")
    msg = str(e.value)
    assert str(tmp_path / "run") in msg and f"pid {os.getpid()}" in msg
    assert "trainer.name" in msg and "trainer.resume=auto" in msg
    assert not (tmp_path / "run" / "run.log").read_text()  # the refused one wrote nothing
    first.close()
    RunDir(tmp_path / "run").close()  # free again
    RunDir(tmp_path / "other").close()  # other names never conflict


def test_arborl_sft_on_a_busy_folder_is_one_error_line(tmp_path, capsys):
    from arborl.cli.main import main

    held = RunDir(tmp_path / "warm")
    try:
        rc = main(["sft", "--out", str(tmp_path / "warm"), "model.name_or_path=tiny-0.1m"])
    finally:
        held.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: run folder"), err
    assert f"pid {os.getpid()}" in err[0]


# A long run (never meant to finish) of the smallest trainer: no SFT, 2 x 2 episodes a step.
TOY = [
    "model.name_or_path=tiny-0.1m",
    "sft.enabled=false",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=4",
    "eval.num_episodes=2",
    "eval.every=0",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.report=false",
    "trainer.num_threads=1",
    "trainer.save_every=1",
    "trainer.name=same",
]


def _train(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "arborl.cli.main", "train", *TOY,
            f"trainer.output_dir={out}", *extra]  # fmt: skip


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_a_second_trainer_is_refused_and_a_killed_one_leaves_no_stale_lock(tmp_path):
    run = tmp_path / "same"
    first = subprocess.Popen(_train(tmp_path, "trainer.total_steps=1000"), env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while latest_checkpoint(run) is None and first.poll() is None:
            assert time.monotonic() < deadline, "the first trainer saved no checkpoint in 240 s"
            time.sleep(0.1)
        assert first.poll() is None
        second = subprocess.run(_train(tmp_path, "rollout.seed=1"), env=ENV,
                                capture_output=True, text=True, timeout=240)  # fmt: skip
        assert second.returncode == 2, second.stderr[-2000:]
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: run folder"), second.stderr[-2000:]
        assert str(run) in err[0] and f"pid {first.pid}" in err[0] and "trainer.name" in err[0]
        assert first.poll() is None  # the first run goes on, its folder untouched
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL
    newest = latest_checkpoint(run)
    step = int(newest.name.removeprefix("step-"))
    # SIGKILL left the .lock file but not the lock: a resume takes the folder over.
    assert (run / LOCK_FILE).exists()
    resumed = subprocess.run(
        _train(tmp_path, "trainer.resume=auto", f"trainer.total_steps={step + 1}"),
        env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == owed_status(run), resumed.stderr[-2000:]
    assert f"at step {step}" in (run / "run.log").read_text()
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]
    assert steps == list(range(1, step + 2))  # one writer: every RL step once, in order
