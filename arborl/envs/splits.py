"""Train/val/test splits by content hash, shared by every built-in env.

A task's split is a pure function of its canonical JSON content: sha256 of the JSON (keys
sorted, no spaces) gives a bucket 0..99; buckets < 80 are train, 80..89 val, >= 90 test.
Samplers draw tasks and reject those whose bucket is not the requested split, so a task
can never land in two splits whatever the seeds, the knobs or the order of draws.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

from arborl.envs.base import SPLITS

SPLIT_BUCKETS: dict[str, range] = {
    "train": range(0, 80),
    "val": range(80, 90),
    "test": range(90, 100),
}
"""Which of the 100 hash buckets belong to each split (80/10/10)."""


def chosen_templates(templates: Any, known: dict[str, Any]) -> list[str]:
    """The template names an env samples from: `templates` (a list of names, or None for
    all of `known`, sorted). ValueError naming the unknown ones when it is empty or holds
    a name `known` lacks, as a constructor's `templates=` argument must."""
    names = list(templates) if templates is not None else sorted(known)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(
            f"templates={templates!r} has unknown or no names {unknown}; choose from {sorted(known)}"
        )
    return names


def canonical_json(task: dict[str, Any]) -> str:
    """The task as JSON with sorted keys and no whitespace: equal content, equal text."""
    try:
        return json.dumps(task, sort_keys=True, separators=(",", ":"))
    except TypeError as e:
        raise TypeError(
            f"task {task!r} is not JSON-serialisable ({e}); use lists, not tuples/sets"
        ) from e


def _digest(task: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(task).encode()).hexdigest()


def task_id_of(task: dict[str, Any]) -> str:
    """A short stable id of the task (first 12 hex digits of the content hash)."""
    return _digest(task)[:12]


def bucket_of(task: dict[str, Any]) -> int:
    """The task's hash bucket, 0..99."""
    return int(_digest(task), 16) % 100


def split_of(task: dict[str, Any]) -> str:
    """The split (`train`, `val` or `test`) the task belongs to."""
    b = bucket_of(task)
    for name, buckets in SPLIT_BUCKETS.items():
        if b in buckets:
            return name
    raise AssertionError(f"bucket {b} is in no split")  # pragma: no cover - buckets cover 0..99


def sample_in_split(
    rng: random.Random,
    split: str,
    draw: Callable[[random.Random], dict[str, Any] | None],
    accept: Callable[[dict[str, Any]], bool] | None = None,
    max_tries: int = 10_000,
) -> dict[str, Any]:
    """Call `draw(rng)` until it returns a task of `split` (rejection sampling).

    `draw` may return None for a rejected candidate. `accept`, when given, runs only on
    candidates already in the right split: put expensive checks (solvers) there.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    for _ in range(max_tries):
        task = draw(rng)
        if task is not None and split_of(task) == split and (accept is None or accept(task)):
            return task
    raise RuntimeError(
        f"drew {max_tries} tasks and none fell in split {split!r}; the generator's knobs "
        "allow too few distinct tasks: widen them (e.g. larger size or number range)"
    )
