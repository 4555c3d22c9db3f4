"""Run directories and the metrics logger every trainer uses.

`runs/<name>/` holds `config.yaml` (the resolved config), `metrics.jsonl` (one JSON
object per logged step), TensorBoard event files under `tb/`, and `run.log` (everything
the run printed through `logging`). The console shows one progress bar with the key
live metrics (plain lines when stderr is not a terminal: `arborl.progress`). Metrics are
flushed on every write, so a run killed mid-way keeps every step it logged.

A run folder has one writer: `RunDir` takes an exclusive `flock` on `runs/<name>/.lock` for
the trainer's life, so a second trainer with the same name stops at once with
`RunDirBusy` (naming the folder and the holder's pid) instead of interleaving its metrics,
config and checkpoints with the first. The kernel drops the lock when its holder dies, even
by kill -9, so a crashed run never leaves the folder stuck.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from arborl import phases
from arborl.config import dump_yaml
from arborl.progress import progress

log = logging.getLogger("arborl")


def default_run_name() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def _scalar(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


LOCK_FILE = ".lock"
"""The file in a run folder whose `flock` marks the folder's one writer."""


class RunDirBusy(RuntimeError):
    """Another live process holds the run folder's lock."""


def take_lock(file: Path, busy: Any) -> Any:
    """Open and exclusively `flock` `file` (no waiting), write who holds it and return the
    open file: the lock lasts until that file is closed or the process dies. When another
    live process holds it, raise `busy(holder)` (what its line says)."""
    f = open(file, "a+")  # noqa: SIM115 - the caller closes it
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "a process that has not written its pid yet"
        f.close()
        raise busy(holder) from None
    f.seek(0)
    f.truncate()
    since = datetime.now().isoformat(timespec="seconds")
    f.write(f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n")
    f.flush()
    return f


def _lock(path: Path) -> Any:
    """The run folder's lock (`take_lock` on `path/.lock`), closed in `RunDir.close()`."""

    def busy(holder: str) -> RunDirBusy:
        return RunDirBusy(
            f"run folder {path} is in use by another trainer ({holder}); two trainers in one "
            "folder would interleave its metrics, config and checkpoints. Give this run "
            "another trainer.name, or wait for that one to end (then trainer.resume=auto "
            "continues it)"
        )

    return take_lock(path / LOCK_FILE, busy)


def lock_holder(path: str | Path) -> str | None:
    """Who holds run folder `path` now (what its `.lock` says), or None when no live
    trainer does. A check, not a claim: the folder may be taken right after."""
    lock = Path(path) / LOCK_FILE
    if not lock.exists():
        return None
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            return f.read().strip() or "a process that has not written its pid yet"
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return None


@dataclass
class RunDir:
    """The folder of one run and its open log handles; its one writer while open (the
    `.lock` file's flock, released by `close()` or the process's death)."""

    path: Path
    metrics_path: Path = field(init=False)
    _tb: Any = field(default=None, init=False, repr=False)
    _handler: logging.Handler | None = field(default=None, init=False, repr=False)
    _lock_file: Any = field(default=None, init=False, repr=False)
    purge_step: int | None = field(default=None, init=False, repr=False)
    """Set by `MetricsLogger.rewind`: TensorBoard hides events of this step and later
    from earlier writers (a resumed run replays them)."""

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock(self.path)  # before anything in the folder is written
        self.metrics_path = self.path / "metrics.jsonl"
        self._handler = logging.FileHandler(self.path / "run.log")
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(self._handler)
        log.setLevel(logging.INFO)

    @classmethod
    def create(cls, output_dir: str | Path, name: str | None, config: Any = None) -> RunDir:
        run = cls(Path(output_dir) / (name or default_run_name()))
        if config is not None:
            dump_yaml(config, run.path / "config.yaml")
        return run

    @property
    def tb(self):
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.path / "tb"), purge_step=self.purge_step)
        return self._tb

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._handler is not None:
            log.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None


class MetricsLogger:
    """Writes metrics to metrics.jsonl and the trackers named in `loggers` (TensorBoard,
    W&B: `arborl.train.trackers`), and shows them on a progress bar.

    `keys` picks the metrics shown on the bar (all are written to the files)."""

    def __init__(
        self,
        run: RunDir,
        total: int | None = None,
        desc: str = "train",
        keys: tuple[str, ...] = (),
        disable_bar: bool | None = None,
        loggers: tuple[str, ...] | list[str] = ("tensorboard",),
        config: dict[str, Any] | None = None,
    ) -> None:
        from arborl.train.trackers import build_trackers

        self.run = run
        self.trackers = build_trackers(loggers, run, config)
        self.keys = keys
        self._file = open(run.metrics_path, "a")  # noqa: SIM115 - closed in close()
        self._t0 = time.perf_counter()
        self.bar = progress(total, desc, disable=disable_bar, dynamic_ncols=True)

    def log(self, step: int, metrics: dict[str, Any], advance: int = 0) -> None:
        record = {"step": step, "time_s": round(time.perf_counter() - self._t0, 3)}
        scalars = {}
        for k, v in metrics.items():
            s = _scalar(v)
            record[k] = s if s is not None else (v if isinstance(v, str) else None)
            if s is not None:
                scalars[k] = s
        if scalars:
            for tracker in self.trackers:
                tracker.log(step, scalars)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        shown = {k: record[k] for k in self.keys if isinstance(record.get(k), float)}
        if shown:
            self.bar.set_postfix({k.split("/")[-1]: f"{v:.3g}" for k, v in shown.items()})
        if advance:
            self.bar.update(advance)

    def rewind(self, step: int) -> None:
        """Forget what was logged after `step` (a resume from the step-`step` checkpoint
        replays it): `metrics.jsonl` keeps records up to `step` except a finished run's
        final evaluation, and TensorBoard purges later steps, so each step is held once."""
        self._file.close()
        keep = [
            r
            for r in read_metrics(self.run.metrics_path)
            if r.get("step", 0) <= step and not any(k.startswith("eval/final_") for k in r)
        ]
        tmp = self.run.metrics_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
        tmp.replace(self.run.metrics_path)
        self._file = open(self.run.metrics_path, "a")  # noqa: SIM115 - closed in close()
        if self.run._tb is not None:
            self.run._tb.close()
            self.run._tb = None
        self.run.purge_step = step + 1

    def close(self) -> None:
        self.bar.close()
        self._file.close()
        for tracker in self.trackers:
            tracker.close()


class PhaseTimer:
    """Wall time of each phase of one RL step, as `time/<phase>_s` metrics; `metrics()`
    adds `time/other_s` (what no phase covered) so that the split adds up to the step."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            with phases.phase(name):  # the same phase, exclusive, in an active `Profile`
                yield
        finally:
            key = f"time/{name}_s"
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        total = time.perf_counter() - self.start
        return {**self.seconds, "time/other_s": max(0.0, total - sum(self.seconds.values()))}


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file (a torn last line from a kill is skipped)."""
    out = []
    if not Path(path).exists():
        return out
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
