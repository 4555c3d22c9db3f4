"""How the cells of an `arborl compare` grid run: in this process (`run_cell`, --jobs 1) or
as child processes, at most N at a time (`run_jobs`, --jobs N).

Why processes: a toy-size run is mostly one busy core (`trainer.num_threads` is 1 by
default), so on a 2-core machine two runs at once halve a grid's wall time. A child is
`python -m arborl.grid.jobs KIND OVERRIDE...`, which calls `run_cell`, the very
function --jobs 1 calls, with the same overrides and its own `trainer.num_threads`: a
cell's numbers do not depend on N (a run is bit-for-bit repeatable on one machine,
docs/training.md, "Reproducibility").

Each child's stdout and stderr go to `<cell>/compare.log` (`LOG_FILE`); the parent prints
one line when a cell starts and one when it ends, never a child's progress. A run that
aborts (`TrainingAborted`: a diverged run, which is a result) prints its reason and exits
with `ABORTED_EXIT`; any other non-zero exit (a crash, a kill) makes the cell "failed"
and the others go on. An RL cell waits for its seed's SFT start when that runs in the
same call (`Job.after`), and is "skipped" when the start did not finish.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOG_FILE = "compare.log"
"""A child's stdout and stderr, in its cell's folder (appended to on a resume)."""
ABORTED_EXIT = 3
"""A child's exit status when its run aborted (`TrainingAborted`); Python exits 1 on an
uncaught exception, so a crash is never read as an abort."""
ABORTED = "aborted: "
"""The child's last line before `ABORTED_EXIT`: this, then `TrainingAborted`'s reason."""
POLL_S = 0.1
PARENT_ENV = "ARBORL_COMPARE_PARENT"
"""Set in a child's environment to the parent's pid (`die_with_parent`)."""
"""How often the parent looks for children that ended."""


def run_cell(kind: str, overrides: list[str]) -> dict:
    """Run one cell in this process: `arborl sft` or `arborl train` with `overrides`."""
    from arborl.train.config import load_train_config

    cfg = load_train_config(overrides)
    if kind == "sft":
        from arborl.train.sft import sft_job

        return sft_job(cfg)
    from arborl.train.rl import RLTrainer

    return RLTrainer(cfg).fit()


@dataclass
class Job:
    """A cell to run in a child process."""

    name: str
    kind: str
    """"sft" (`arborl sft`) or "rl" (`arborl train`)."""
    folder: Path
    """The cell's run folder, where its `LOG_FILE` goes."""
    start: Callable[[], list[str]]
    """Readies the folder and prints the start line when the job is launched, and returns
    the run's overrides (`arborl.grid.compare.start_cell`)."""
    after: str | None = None
    """The job that must finish first (its seed's SFT start), when it runs in this call."""


def run_jobs(jobs: list[Job], max_jobs: int, echo: Callable[[str], None]) -> dict[str, str]:
    """Run `jobs` as child processes, at most `max_jobs` at once, in list order except
    that a job waits for its `after`. Returns each job's outcome: "finished", "aborted",
    "failed" or "skipped" (its `after` did not finish). A parent that stops (Ctrl-C, a
    SIGTERM, an error) stops the children it started and waits for them."""
    outcome: dict[str, str] = {}
    waiting = list(jobs)
    running: dict[str, tuple[Job, subprocess.Popen, float]] = {}
    with sigterm_as_exit(), stop_on_exit(running):
        while waiting or running:
            for job in list(waiting):
                if len(running) >= max_jobs:
                    break
                if job.after is not None and job.after not in outcome:
                    continue  # its start is still waiting or running
                waiting.remove(job)
                if job.after is not None and outcome[job.after] != "finished":
                    outcome[job.name] = "skipped"
                    echo(f"[{job.name}] skipped: its SFT start {job.after} {outcome[job.after]}")
                    continue
                running[job.name] = (job, launch(job), time.perf_counter())
            time.sleep(POLL_S)
            for name, (job, proc, t0) in list(running.items()):
                if proc.poll() is not None:
                    del running[name]
                    outcome[name] = report_end(job, proc.returncode, time.perf_counter() - t0, echo)
    return outcome


@contextmanager
def stop_on_exit(running: dict[str, tuple[Job, subprocess.Popen, float]]):
    """On leaving the block, terminate the children still in `running` and wait for them,
    so none outlives the parent (only an exception leaves any: a normal end has none)."""
    try:
        yield
    finally:
        for _job, proc, _t0 in running.values():
            proc.terminate()
        for _job, proc, _t0 in running.values():
            proc.wait()


@contextmanager
def sigterm_as_exit():
    """Make a SIGTERM (a `kill`, a job scheduler's stop) raise `SystemExit` in the block,
    as Ctrl-C raises `KeyboardInterrupt`, so the block's clean-up runs; Python's default
    for SIGTERM is to die at once. Only the main thread can set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def launch(job: Job) -> subprocess.Popen:
    """Start `job`'s child, its stdout and stderr appended to its `LOG_FILE`."""
    overrides = job.start()
    with open(job.folder / LOG_FILE, "ab") as log:  # the child holds its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "arborl.grid.jobs", job.kind, *overrides],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, PARENT_ENV: str(os.getpid())},
        )


def report_end(job: Job, code: int, wall_s: float, echo: Callable[[str], None]) -> str:
    """Print how `job`'s child ended (exit status `code`) and return its outcome."""
    log = job.folder / LOG_FILE
    if code == 0:
        echo(f"[{job.name}] finished in {wall_s:.0f} s")
        return "finished"
    if code == ABORTED_EXIT:
        lines = log.read_text(errors="replace").splitlines()
        reason = next((x[len(ABORTED) :] for x in reversed(lines) if x.startswith(ABORTED)), "")
        echo(f"[{job.name}] aborted: {reason or f'see {log}'}")
        return "aborted"
    echo(f"[{job.name}] failed (exit status {code}) after {wall_s:.0f} s, see {log}")
    return "failed"


def die_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGTERM when its parent dies, even by SIGKILL
    (Linux `prctl(PR_SET_PDEATHSIG)`), so a killed `arborl compare` leaves no run going;
    elsewhere a no-op. Exits at once when the parent (pid `parent`) is already gone."""
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if libc_name is None:
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(libc_name, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the call, even before this process ran
        raise SystemExit(128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """A child's entry: `run_cell(KIND, OVERRIDES)`; `ABORTED_EXIT` when the run aborts."""
    from arborl.progress import quiet_foreign_bars
    from arborl.train.rl import TrainingAborted
    from arborl.train.stop import TrainingStopped

    kind, *overrides = sys.argv[1:] if argv is None else argv
    if PARENT_ENV in os.environ:  # a child of `run_jobs`
        die_with_parent(int(os.environ[PARENT_ENV]))
    quiet_foreign_bars()  # as `arborl train` does: the log is a file, not a terminal
    try:
        with sigterm_as_exit():  # the parent's terminate() lets the run close its env workers
            run_cell(kind, overrides)
    except TrainingAborted as e:
        print(f"{ABORTED}{e}", file=sys.stderr, flush=True)
        return ABORTED_EXIT
    except TrainingStopped as e:  # a clean stop: the next `arborl compare` resumes the cell
        print(e, file=sys.stderr, flush=True)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
