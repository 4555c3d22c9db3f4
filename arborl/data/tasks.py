"""RL task-prompt files: verl-style parquet rows that name the tasks RL trains on.

One row per task, in the column layout verl and OpenManus-RL use, so the same file feeds
other trainers too: `data_source` (the env id), `prompt` (chat messages), `ability`
(the domain), `reward_model` (`{style, ground_truth}`) and `extra_info` (`task_id`,
`seed`, `env_split`, ...). arborl envs draw a task from `(seed, env split)`, so a row
reproduces its task when `extra_info.seed` is set and the env is built on
`extra_info.env_split`. `arborl curate` writes these files; `arborl train
env.tasks_file=...` reads them through `read_task_seeds`.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

TASK_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
"""The columns of a task-prompt row, in order."""

EXTRA_INFO_FIELDS: dict[str, str] = {
    "index": "int: row number within its file.",
    "split": "str: the curated split the row belongs to (train/val/test, or '').",
    "task_id": "str: the task's stable id.",
    "seed": "int | null: the env reset seed that draws this task (null: imported prompt).",
    "env_split": "str: the env split the seed draws from ('' when unknown).",
    "won": "bool: whether the source episode was won.",
    "total_return": "float: the source episode's return.",
    "meta": "str: JSON of any other metadata.",
}
"""The fixed `extra_info` struct written by `task_table`, with meaning per key."""


def task_schema():
    """The pyarrow schema of a task-prompt parquet file (nested, like verl's)."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    extra = pa.struct(
        [
            ("index", pa.int64()),
            ("split", pa.string()),
            ("task_id", pa.string()),
            ("seed", pa.int64()),
            ("env_split", pa.string()),
            ("won", pa.bool_()),
            ("total_return", pa.float64()),
            ("meta", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra),
        ]
    )


def task_table(rows: Sequence[dict[str, Any]]):
    """A pyarrow table of task rows (dicts with the `TASK_COLUMNS` keys)."""
    import pyarrow as pa

    return pa.Table.from_pylist(list(rows), schema=task_schema())


def read_task_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a task-prompt `.parquet` (or `.jsonl`) file, as dicts.

    `reward_model` and `extra_info` may be structs or JSON strings (both are in use)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"task file {str(path)!r} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        rows = _jsonl_rows(path)
    else:
        raise ValueError(f"task file {str(path)!r} has suffix {path.suffix!r}; use .parquet")
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict):
            raise ValueError(f"{path} row {i}: expected a JSON object, got {type(r).__name__}")
        for key in ("reward_model", "extra_info"):
            if isinstance(r.get(key), str):
                try:
                    r[key] = json.loads(r[key])
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} row {i}: {key} is a string but not JSON: {e}") from e
    return rows


def _jsonl_rows(path: Path) -> list[Any]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e}); convert it to UTF-8") from e
    rows = []
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e
    return rows


def read_task_seeds(path: str | os.PathLike, env_id: str, env_split: str) -> list[int]:
    """The reset seeds of a task file's rows, checked against the env that will use them.

    Rows of other envs (another `data_source`: a mixed-domain file) are skipped; every row
    of `env_id` must carry `extra_info.seed` and come from `env_split` when it names one
    (the same seed on another split is another task). A seed is an integer >= 0 (a
    negative one would draw the task of its absolute value); a seed that several rows
    repeat is allowed but logged as a warning.
    """
    rows = read_task_rows(path)
    seeds = []
    for i, r in enumerate(rows, 1):
        where = f"{path} row {i}"
        if r.get("data_source") != env_id:
            continue
        extra = r.get("extra_info") or {}
        if not isinstance(extra, dict):
            raise ValueError(f"{where}: extra_info must be an object, got {extra!r:.40}")
        if extra.get("seed") is None:
            raise ValueError(
                f"{where}: extra_info.seed is missing; arborl envs need a reset seed per task "
                "(imported prompts without seeds cannot be replayed in an arborl env)"
            )
        split = extra.get("env_split") or ""
        if split and split != env_split:
            raise ValueError(
                f"{where}: extra_info.env_split={split!r} but env.train_split={env_split!r}; "
                f"the seed draws a different task on another split: set env.train_split={split}"
            )
        seed = extra["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(
                f"{where}: extra_info.seed={seed!r} is not an integer (a seed is never "
                "rounded: 1.7 or true would silently name another task)"
            )
        if seed < 0:
            raise ValueError(
                f"{where}: extra_info.seed={seed} is negative; arborl envs draw the same task "
                f"for {seed} and {-seed}, so seeds must be >= 0"
            )
        seeds.append(seed)
    repeated = {s: n for s, n in Counter(seeds).items() if n > 1}
    if repeated:  # allowed (a task drawn more often), but usually a mistake in the file
        shown = ", ".join(f"{s} x{n}" for s, n in list(repeated.items())[:5])
        logging.getLogger("arborl").warning(
            "task file %s repeats %d seed(s) (%s): those tasks are drawn more often than the "
            "others; one row per task is the usual layout",
            path,
            len(repeated),
            shown,
        )
    if not seeds:
        sources = sorted({str(r.get("data_source")) for r in rows})
        raise ValueError(
            f"task file {str(path)!r} has no rows of env {env_id!r} (its data_source values: "
            f"{sources}); set env.id to one of them or export tasks of this env"
        )
    return seeds


def sample_task_seeds(task_seeds: Sequence[int], num_tasks: int, seed: int) -> list[int]:
    """`num_tasks` seeds drawn from `task_seeds` without replacement while they last (then
    with repeats), from an explicit RNG seeded by `seed`."""
    if not task_seeds:
        raise ValueError("task_seeds is empty; the task file gave no tasks")
    rng = np.random.default_rng(seed)
    replace = num_tasks > len(task_seeds)
    idx = rng.choice(len(task_seeds), size=num_tasks, replace=replace)
    return [int(task_seeds[i]) for i in idx]
