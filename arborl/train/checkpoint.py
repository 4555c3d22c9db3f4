"""Checkpoints that resume bit-for-bit on CPU, and only from bytes that verify.

A checkpoint is a folder `checkpoints/step-<N>/` with the policy in Hugging Face format
(`policy/`: weights, config, tokenizer, chat template; LoRA adapters merged), the LoRA
adapters themselves (`adapter/`, when the policy has them), the critic when there is one
(`critic/`), `trainer_state.pt` (optimizer and scheduler states, step, and the state of
every random generator the trainer owns) and, written last, `manifest.json`: the size and
SHA-256 of every other file. Every random draw of the trainer flows from generators
stored here or from seeds derived from (run seed, step), so resuming at step N replays
steps N+1... exactly as an uninterrupted run would.

Why a manifest: a rename makes a save atomic against a kill, but not against a torn copy,
a full disk or bit rot. A checkpoint counts as complete only when its manifest verifies;
`resume=auto` takes the newest one that does and logs why it skipped the others.
`trainer_state.pt` is read with `torch.load(weights_only=True)`, so a crafted file cannot
run code (it holds tensors, numbers, strings and containers only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("arborl")

STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "manifest.json"
ADAPTER_DIR = "adapter"
"""Where a LoRA policy's adapters are saved in a checkpoint, beside the merged `policy/`."""
_STEP_NAME = re.compile(r"step-(\d+)")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path) -> None:
    """`manifest.json`: size and SHA-256 of every file under `directory` (written last)."""
    files = {
        p.relative_to(directory).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST_FILE
    }
    (directory / MANIFEST_FILE).write_text(json.dumps({"files": files}, indent=1))


def verify_checkpoint(directory: str | Path) -> str | None:
    """None if `directory` is a complete checkpoint, else why not (one line)."""
    d = Path(directory)
    try:
        files = json.loads((d / MANIFEST_FILE).read_text())["files"]
    except FileNotFoundError:
        return f"no {MANIFEST_FILE} (a torn save, or written by an older arborl)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable {MANIFEST_FILE} ({type(e).__name__}: {e})"
    if STATE_FILE not in files:
        return f"{MANIFEST_FILE} does not list {STATE_FILE}"
    for rel, want in files.items():
        p = d / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != want["size"]:
            return f"{rel} has {p.stat().st_size} bytes, the manifest says {want['size']}"
        if _sha256(p) != want["sha256"]:
            return f"{rel} does not match its SHA-256 in {MANIFEST_FILE} (corrupted)"
    return None


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Folders named `step-<N>` of a run (complete or not), oldest first; other names
    (`step-old`, `.tmp-step-3`) are ignored."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_NAME.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint whose manifest verifies; each newer one skipped is logged
    with the reason."""
    for d in reversed(checkpoint_dirs(run_dir)):
        reason = verify_checkpoint(d)
        if reason is None:
            return d
        log.warning("skipping checkpoint %s: %s", d, reason)
    return None


def _remove(directory: Path) -> None:
    """Delete a checkpoint manifest first, so a kill mid-delete leaves one that fails to
    verify rather than one that looks complete."""
    (directory / MANIFEST_FILE).unlink(missing_ok=True)
    shutil.rmtree(directory, ignore_errors=True)


def prune_checkpoints(run_dir: str | Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints that have a manifest; remove older ones, and
    every folder without one older than the newest that has (a torn save or prune).
    Only the manifest's presence is checked here: hashing is for resume."""
    dirs = checkpoint_dirs(run_dir)
    good = [d for d in dirs if (d / MANIFEST_FILE).is_file()]
    keep_set = set(good[-keep:]) if keep > 0 else set()
    newest = int(good[-1].name.split("-")[1]) if good else None
    for d in dirs:
        if d in keep_set or newest is None:
            continue
        if d in good or int(d.name.split("-")[1]) < newest:
            _remove(d)


def write_checkpoint(
    run_dir: str | Path,
    step: int,
    write_parts: Callable[[Path], dict[str, Any]],
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """The one atomic checkpoint writer: `write_parts(tmp)` writes the model parts into a
    temporary folder and returns more state; `trainer_state.pt` (`state` + that + the step
    and Python's RNG) and then `manifest.json` are written, the folder renamed to
    `checkpoints/step-<step>/`, and all but the newest `keep` complete checkpoints pruned.
    A failed write (e.g. a full disk) removes the temporary folder and says so."""
    root = Path(run_dir).resolve() / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        parts = write_parts(tmp)
        full = {"step": step, "python_random": random.getstate(), **state, **parts}
        torch.save(full, tmp / STATE_FILE)
        write_manifest(tmp)
    except (OSError, RuntimeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        free = shutil.disk_usage(root).free / 2**20
        raise OSError(
            f"could not write checkpoint {final} ({type(e).__name__}: {e}); {free:.1f} MiB "
            f"free on {root}; the partial folder was removed and older checkpoints are "
            "intact: free space (or set trainer.output_dir elsewhere) and resume with "
            "trainer.resume=auto"
        ) from e
    if final.exists():
        _remove(final)
    tmp.rename(final)
    prune_checkpoints(run_dir, keep)
    return final


def save_model_parts(directory: Path, policy, tokenizer, critic=None) -> Path:
    """The checkpoint layout's model folders: `policy/` (HF weights + tokenizer), `critic/`
    when there is one, and for a LoRA policy `adapter/` (peft's adapter files, what a
    resume restores); returns the policy folder. `policy/` is always a plain causal LM,
    adapters merged, so `load_policy`, vLLM and `arborl serve` read any checkpoint alike
    (peft's own save would write only the adapters, tied to the base model's path)."""
    from arborl.models.loading import quiet_saves, save_policy

    policy_dir = save_policy(policy, tokenizer, Path(directory) / "policy")
    with quiet_saves():
        if hasattr(policy, "merge_and_unload"):  # peft.PeftModel
            policy.save_pretrained(Path(directory) / ADAPTER_DIR)
        if critic is not None:
            critic.save_pretrained(Path(directory) / "critic")
    return policy_dir


def load_state(ckpt: str | Path) -> dict[str, Any]:
    """`trainer_state.pt` of a checkpoint, read without unpickling code."""
    path = Path(ckpt) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{ckpt} is not an arborl checkpoint (no {STATE_FILE})")
    try:
        return torch.load(path, weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        raise ValueError(
            f"{path} cannot be loaded as plain data ({type(e).__name__}: {e}); a trainer "
            "state holds only tensors, numbers, strings and containers, so this file is "
            "corrupted or not from arborl; resume from another checkpoint"
        ) from e


def resolve_resume(resume: str | None, run_dir: Path) -> Path | None:
    """`trainer.resume`: None -> no resume; "auto" -> newest checkpoint of the run that
    verifies (or None when there is none yet); otherwise a checkpoint path that must
    exist and verify."""
    if resume is None:
        return None
    if resume == "auto":
        found = latest_checkpoint(run_dir)
        if found is None and checkpoint_dirs(run_dir):
            raise ValueError(
                f"no checkpoint under {run_dir}/checkpoints verifies (see the warnings "
                "above); move them away to start from scratch, or pass a run name that "
                "is not taken (trainer.name=...)"
            )
        return found
    path = Path(resume)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(
            f"trainer.resume={resume!r} is not a checkpoint folder (no {STATE_FILE}); "
            f"use 'auto' or a path like {run_dir}/checkpoints/step-10"
        )
    reason = verify_checkpoint(path)
    if reason is not None:
        raise ValueError(
            f"trainer.resume={resume!r} does not verify: {reason}; use trainer.resume=auto "
            "to take the newest checkpoint that does"
        )
    return path
