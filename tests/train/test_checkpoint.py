"""Resuming is bit-exact: 6 RL steps straight == 3 steps, SIGKILL, resume=auto, 3 more.

The killed run is a real `arborl train` process killed right after its step-3 checkpoint
appears; the resumed run is a fresh process. Final policy (and, for ppo, critic) weights
must be torch.equal to an uninterrupted run's, which runs in the test's own process (the
same `arborl train` entry point, one process start and its imports fewer per case).
"""

import errno
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from arborl.train.checkpoint import (
    MANIFEST_FILE,
    STATE_FILE,
    checkpoint_dirs,
    load_state,
    resolve_resume,
    save_model_parts,
    verify_checkpoint,
    write_checkpoint,
    write_manifest,
)
from arborl.train.runlog import read_metrics
from tests._status import owed_status


def save_checkpoint(run_dir, step, policy, tokenizer, state, keep=2):
    """`write_checkpoint` of a policy alone (the trainers save through their engine)."""

    def parts(tmp):
        save_model_parts(tmp, policy, tokenizer)
        return {}

    return write_checkpoint(run_dir, step, parts, state, keep)


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


def _train_args(args):
    return ["train", *TOY, *args]


def _cmd(args):
    return [sys.executable, "-m", "arborl.cli.main", *_train_args(args)]


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
# KL term, so the sharded reference is saved and restored too); and a LoRA policy, whose
# resume restores the adapters (`adapter/`) while `policy/` holds the merged weights. After
# SFT of rank-4 adapters every action is still invalid, so every group ties: the tied rows
# are kept and an entropy bonus moves the adapters in RL steps 4-6.
LORA = ["model.lora_rank=4", "algo.entropy_coef=0.01", "algo.drop_zero_adv=false"]
RAY = [
    "trainer.engine=ray", "ray.num_train_ranks=2", "ray.num_rollout_workers=2",
    "ray.cpus_per_worker=0.25", "algo.kl_coef=0.05",
]  # fmt: skip
# Score mode (agent.action_mode=score): every action is one of Maze's, so potential shaping
# rather than the invalid-action penalty gives the groups mixed returns; a KL term, so the
# reference's categorical log-probs are part of the resumed state too.
SCORE = [
    "agent.action_mode=score",
    "reward.sources={env: 1.0, potential: 0.1}",
    "algo.kl_coef=0.05",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,engine",
    [("grpo", []), ("ppo", []), ("grpo", RAY), ("grpo", LORA), ("grpo", SCORE)],
    ids=["grpo", "ppo", "grpo-ray", "grpo-lora", "grpo-score"],
)
@pytest.mark.fault("kill -9 of the trainer")
def test_kill_and_resume_is_bit_exact(algo, engine, tmp_path):
    from arborl.cli.main import main

    common = [f"algo={algo}", f"trainer.output_dir={tmp_path}", *engine]
    # 3 where the run's summary says it learned nothing (its adapters move by entropy alone)
    assert main(_train_args([*common, "trainer.name=straight"])) == owed_status(
        tmp_path / "straight"
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

    resumed = subprocess.run(
        _cmd([*common, "trainer.name=cut", "trainer.resume=auto"]), env=_env(), capture_output=True
    )
    assert resumed.returncode == owed_status(tmp_path / "cut"), resumed.stderr[-3000:]
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


# --- verified resume (issue 19, requirement 5 and 2) ----------------------------------


def _three(tmp_path, keep=3):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, _Tiny(), _Tiny(), {"x": step}, keep=keep)
    return tmp_path / "checkpoints"


def test_a_save_writes_a_manifest_of_sizes_and_hashes_last(tmp_path):
    ck = _three(tmp_path)
    doc = json.loads((ck / "step-3" / MANIFEST_FILE).read_text())["files"]
    assert sorted(doc) == ["policy/w.pt", STATE_FILE]
    state = (ck / "step-3" / STATE_FILE).read_bytes()
    assert doc[STATE_FILE] == {"size": len(state), "sha256": hashlib.sha256(state).hexdigest()}
    assert verify_checkpoint(ck / "step-3") is None
    assert load_state(ck / "step-3")["x"] == 3


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda d: _scribble(d / "policy" / "w.pt"), "does not match its SHA-256"),
        (lambda d: _truncate(d / STATE_FILE, 100), "has 100 bytes"),
        (lambda d: shutil.rmtree(d / "policy"), "policy/w.pt is missing"),
        (lambda d: (d / MANIFEST_FILE).unlink(), "no manifest.json"),
        (lambda d: (d / MANIFEST_FILE).write_text("{"), "unreadable manifest.json"),
    ],
    ids=["random-bytes", "truncated-state", "policy-deleted", "no-manifest", "bad-manifest"],
)
@pytest.mark.fault("corrupt newest checkpoint")
def test_resume_skips_a_damaged_newest_checkpoint_and_says_why(tmp_path, caplog, damage, reason):
    ck = _three(tmp_path)
    damage(ck / "step-3")
    assert reason in verify_checkpoint(ck / "step-3")
    with caplog.at_level(logging.WARNING, logger="arborl"):
        assert resolve_resume("auto", tmp_path) == ck / "step-2"
    assert f"skipping checkpoint {ck / 'step-3'}: " in caplog.text and reason in caplog.text
    with pytest.raises(ValueError, match="does not verify.*trainer.resume=auto"):
        resolve_resume(str(ck / "step-3"), tmp_path)


def _scribble(path: Path) -> None:  # 64 random bytes over the middle, size unchanged
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = os.urandom(64)
    path.write_bytes(bytes(data))


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def test_names_that_do_not_parse_are_ignored_and_none_verifying_is_an_error(tmp_path):
    ck = _three(tmp_path)
    for name in ("step-old", "step-", "step-3x", "latest"):
        (ck / name).mkdir()
        (ck / name / STATE_FILE).write_bytes(b"x")
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step-1", "step-2", "step-3"]
    assert resolve_resume("auto", tmp_path).name == "step-3"
    for d in checkpoint_dirs(tmp_path):
        (d / MANIFEST_FILE).unlink()
    with pytest.raises(ValueError, match="no checkpoint under .* verifies"):
        resolve_resume("auto", tmp_path)


class _Boom:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.fault("corrupt newest checkpoint")
def test_a_crafted_trainer_state_runs_nothing_even_with_a_matching_manifest(tmp_path):
    ck = _three(tmp_path)
    marker = tmp_path / "PAYLOAD_RAN"
    torch.save({"step": 3, "evil": _Boom(marker)}, ck / "step-3" / STATE_FILE)
    write_manifest(ck / "step-3")  # whoever can write the file can rewrite the manifest
    assert resolve_resume("auto", tmp_path) == ck / "step-3"
    with pytest.raises(ValueError, match="cannot be loaded as plain data"):
        load_state(ck / "step-3")
    assert not marker.exists()


def test_a_failed_save_removes_its_partial_folder_and_names_the_path(tmp_path):
    _three(tmp_path)

    def full_disk(tmp: Path) -> dict:
        (tmp / "policy").mkdir()
        (tmp / "policy" / "big").write_bytes(b"0" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"could not write checkpoint .*step-4 .*No space left.*"
                       r"MiB free.*older checkpoints are intact"):  # fmt: skip
        write_checkpoint(tmp_path, 4, full_disk, {}, keep=3)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-1", "step-2", "step-3"
    ]  # fmt: skip


def test_pruning_removes_torn_folders_older_than_the_newest_complete_one(tmp_path):
    ck = _three(tmp_path, keep=2)
    (ck / "step-2" / MANIFEST_FILE).unlink()  # a kill inside a prune's rmtree
    (ck / "step-0").mkdir()  # an empty folder left by one
    save_checkpoint(tmp_path, 4, _Tiny(), _Tiny(), {"x": 4}, keep=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step-3", "step-4"]


def test_resume_without_a_run_name_is_an_error_that_says_how_to_name_it(tmp_path):
    from arborl.config import ConfigError
    from arborl.train.config import load_train_config
    from arborl.train.rl import RLTrainer

    cfg = load_train_config([f"trainer.output_dir={tmp_path}", "trainer.resume=auto"])
    with pytest.raises(ConfigError, match=r"trainer.resume=auto needs the run's name.*"
                       r"trainer.name=<folder>"):  # fmt: skip
        RLTrainer(cfg)
    assert list(tmp_path.iterdir()) == []  # no timestamped run folder was started


def test_a_resumed_run_holds_each_step_once_in_metrics_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from arborl.train.runlog import MetricsLogger, RunDir

    run = RunDir(tmp_path / "r")
    first = MetricsLogger(run, disable_bar=True)
    for step in (1, 2, 3, 4):  # a kill after step 4 was logged, the newest save is step 3
        first.log(step, {"loss": float(step)})
    first.close()
    run.close()
    # A resumed run is a new process, seconds later: TensorBoard orders event files by
    # the time in their names (in one second it would fall back to a counter's text).
    time.sleep(1.1)
    run = RunDir(tmp_path / "r")
    again = MetricsLogger(run, disable_bar=True)
    again.rewind(3)
    for step in (4, 5):
        again.log(step, {"loss": 10.0 + step})
    again.close()
    run.close()
    recs = read_metrics(run.metrics_path)
    assert [(r["step"], r["loss"]) for r in recs] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 14.0), (5, 15.0)
    ]  # fmt: skip
    acc = EventAccumulator(str(run.path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 14.0), (5, 15.0)
    ]  # fmt: skip


@pytest.mark.fault("corrupt newest checkpoint")
def test_a_run_resumes_from_the_older_checkpoint_when_the_newest_weights_are_damaged(tmp_path):
    from arborl.train.config import load_train_config
    from arborl.train.rl import RLTrainer

    def cfg(total):
        return load_train_config([
            "model.name_or_path=tiny-0.1m", "sft.enabled=false", "rollout.num_tasks=2",
            "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=4",
            "eval.num_episodes=2", "eval.every=0", "trainer.progress=false",
            "trainer.plots=false", "trainer.save_every=1", f"trainer.total_steps={total}",
            f"trainer.output_dir={tmp_path}", "trainer.name=r", "trainer.resume=auto",
        ])  # fmt: skip

    RLTrainer(cfg(2)).fit()
    run = tmp_path / "r"
    _scribble(run / "checkpoints" / "step-2" / "policy" / "model.safetensors")  # bit rot
    assert RLTrainer(cfg(3)).fit()["steps"] == 3
    log = (run / "run.log").read_text()
    assert "skipping checkpoint" in log and "model.safetensors does not match" in log
    assert f"resumed from {run.resolve() / 'checkpoints' / 'step-1'} at step 1" in log
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/success" in r]
    assert steps == [1, 2, 3]  # step 2 was replayed and is held once
