"""Checkpoints that resume bit-for-bit on CPU.

A checkpoint is a folder `checkpoints/step-<N>/` with the policy in Hugging Face format
(`policy/`: weights, config, tokenizer, chat template), the critic when there is one
(`critic/`), and `trainer_state.pt` (optimizer and scheduler states, step, and the state
of every random generator the trainer owns). Every random draw of the trainer flows
from generators stored here or from seeds derived from (run seed, step), so resuming at
step N replays steps N+1... exactly as an uninterrupted run would.

Writes go to a temporary folder renamed into place, so a kill mid-save never leaves a
half checkpoint that `resume=auto` would pick up.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

STATE_FILE = "trainer_state.pt"


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if (p / STATE_FILE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def write_checkpoint(
    run_dir: str | Path,
    step: int,
    write_parts: Callable[[Path], dict[str, Any]],
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """The one atomic checkpoint writer: `write_parts(tmp)` writes the model parts into a
    temporary folder and returns more state; `trainer_state.pt` (`state` + that + the step
    and Python's RNG) is written last, the folder renamed to `checkpoints/step-<step>/`,
    and all but the newest `keep` complete checkpoints pruned."""
    root = Path(run_dir).resolve() / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    parts = write_parts(tmp)
    full = {"step": step, "python_random": random.getstate(), **state, **parts}
    torch.save(full, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    policy,
    tokenizer,
    state: dict[str, Any],
    critic=None,
    keep: int = 2,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """`write_checkpoint` of a policy (HF format, + `extra_files` beside it) and a critic."""

    def parts(tmp: Path) -> dict[str, Any]:
        policy.save_pretrained(tmp / "policy")
        tokenizer.save_pretrained(tmp / "policy")
        if critic is not None:
            critic.save_pretrained(tmp / "critic")
        for name, text in (extra_files or {}).items():
            (tmp / "policy" / name).write_text(text)
        return {}

    return write_checkpoint(run_dir, step, parts, state, keep)


def load_state(ckpt: str | Path) -> dict[str, Any]:
    path = Path(ckpt) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{ckpt} is not an arborl checkpoint (no {STATE_FILE})")
    return torch.load(path, weights_only=False)


def resolve_resume(resume: str | None, run_dir: Path) -> Path | None:
    """`trainer.resume`: None -> no resume; "auto" -> newest checkpoint of the run (or
    None when there is none yet); otherwise a checkpoint path that must exist."""
    if resume is None:
        return None
    if resume == "auto":
        return latest_checkpoint(run_dir)
    path = Path(resume)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(
            f"trainer.resume={resume!r} is not a checkpoint folder (no {STATE_FILE}); "
            f"use 'auto' or a path like {run_dir}/checkpoints/step-10"
        )
    return path
