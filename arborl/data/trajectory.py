"""The trajectory schema: what an episode looked like, step by step.

Every producer of experience (oracle demos, rollouts, search, imported data) writes
`Trajectory` records, and every consumer (SFT, reward-model training, curation, reports)
reads them. They are plain dataclasses so that JSONL and parquet round trips are exact;
`info` dicts must hold JSON-serialisable values.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Step:
    """One turn: what the agent saw, what it did and what came back."""

    observation: str
    """The observation the action was taken in (text shown to the agent)."""
    action: str
    """The action text sent to the env (after parsing), exactly as stepped."""
    reward: float = 0.0
    """Reward returned by the env for this step."""
    terminated: bool = False
    """The env reached a terminal state on this step."""
    truncated: bool = False
    """The episode was cut on this step (turn or token limit)."""
    info: dict[str, Any] = field(default_factory=dict)
    """The env's info dict after the step (JSON-serialisable values)."""
    response: str | None = None
    """The model's raw text for this turn, when it differs from `action` (e.g. ReAct)."""


@dataclass
class Trajectory:
    """One episode of one task."""

    task_id: str
    """Stable id of the task (same across runs and seeds)."""
    env_id: str
    """Registry id of the env, e.g. `arborl/Maze-v0`."""
    seed: int | None = None
    """Seed the env was reset with."""
    instruction: str = ""
    """The env's instruction text for this episode."""
    steps: list[Step] = field(default_factory=list)
    """The turns, in order."""
    won: bool = False
    """Whether the episode ended in success (the env's `info['won']`)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Free-form metadata: policy name, split, group id, source file, ..."""

    @property
    def total_return(self) -> float:
        """Undiscounted sum of step rewards."""
        return float(sum(s.reward for s in self.steps))

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_return"] = self.total_return
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        known = {"task_id", "env_id", "seed", "instruction", "steps", "won", "meta"}
        missing = {"task_id", "env_id"} - d.keys()
        if missing:
            raise ValueError(
                f"trajectory record lacks required field(s) {sorted(missing)}; "
                f"got fields {sorted(d)}"
            )
        steps = [s if isinstance(s, Step) else Step(**s) for s in d.get("steps", [])]
        kwargs = {k: v for k, v in d.items() if k in known and k != "steps"}
        return cls(steps=steps, **kwargs)


def _atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: a crash mid-way
    never leaves a half-written file where a previous good one stood."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> Path:
    """Write trajectories to `.jsonl` or `.parquet` (chosen by suffix), atomically. A
    JSONL file is written one trajectory at a time (`trajectories` may be a stream)."""
    path = Path(path)
    if path.suffix == ".jsonl":

        def write(p: Path) -> None:
            with open(p, "w") as f:
                for t in trajectories:
                    f.write(json.dumps(t.to_dict()) + "\n")

    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        records = [t.to_dict() for t in trajectories]
        # Steps and meta are nested and heterogeneous across envs: keep them as JSON
        # strings so every env's trajectories share one flat schema.
        table = pa.table(
            {
                "task_id": [r["task_id"] for r in records],
                "env_id": [r["env_id"] for r in records],
                "seed": pa.array([r["seed"] for r in records], type=pa.int64()),
                "instruction": [r["instruction"] for r in records],
                "won": [bool(r["won"]) for r in records],
                "total_return": [float(r["total_return"]) for r in records],
                "num_steps": [len(r["steps"]) for r in records],
                "steps": [json.dumps(r["steps"]) for r in records],
                "meta": [json.dumps(r["meta"]) for r in records],
            }
        )

        def write(p: Path) -> None:
            pq.write_table(table, p)

    else:
        raise ValueError(
            f"trajectory file {str(path)!r} has suffix {path.suffix!r}; use .jsonl or .parquet"
        )
    _atomic_write(path, write)
    return path


def iter_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Read trajectories from a `.jsonl` or `.parquet` file written by `write_trajectories`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trajectory file {str(path)!r} does not exist")
    if path.suffix == ".jsonl":
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    yield Trajectory.from_dict(json.loads(raw.decode("utf-8")))
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: not UTF-8 text ({e})") from e
                except (json.JSONDecodeError, TypeError, ValueError) as e:
                    raise ValueError(f"{path}:{lineno}: not a trajectory record: {e}") from e
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for r in pq.read_table(path).to_pylist():
            r["steps"] = json.loads(r["steps"])
            r["meta"] = json.loads(r["meta"])
            yield Trajectory.from_dict(r)
    else:
        raise ValueError(
            f"trajectory file {str(path)!r} has suffix {path.suffix!r}; use .jsonl or .parquet"
        )


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    return list(iter_trajectories(path))
