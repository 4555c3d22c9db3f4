"""What `arborl compare --jobs N` saves: one grid run one cell at a time and N at a time.

The grid is small on purpose but not trivial: the Maze demo's tiny model (`tiny-0.1m`),
arms x seeds RL cells from one given start (start=tiny-0.1m, no SFT), each a few RL steps
and a held-out evaluation, one torch thread each. The grid is run twice into separate
folders, with --jobs 1 and with --jobs N, timed from the outside (wall clock of the whole
call); the comparison of both must have the same numbers (a cell's numbers do not depend
on N), which the table says.

    python bench/compare_jobs.py                       # 4 cells (2 arms x 2 seeds), N = 2
    python bench/compare_jobs.py --steps 10 --seeds 0 1 2   # shorter cells, 6 of them

On a 2-core machine N = 2 is the most to expect a gain from; each child also pays its own
start-up (importing torch), which a run of a few seconds does not repay.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

ARMS = {"grpo": ["algo=grpo"], "raft": ["algo=raft"]}
"""The grid's arms: two cheap algorithms on the same start."""


def grid_keys(args: argparse.Namespace, out: Path) -> dict:
    """The grid, as `CompareConfig` fields."""
    base = [
        f"rollout.num_tasks={args.tasks}", "rollout.group_size=4", f"trainer.total_steps={args.steps}",
        f"eval.num_episodes={args.eval_episodes}", "eval.every=0", "trainer.num_threads=1",
        "trainer.progress=false", "trainer.plots=false", "trainer.report=false",
        "trainer.loggers=[]", "trainer.save_trajectories=0",
    ]  # fmt: skip
    return {"base": base, "arms": ARMS, "start": "tiny-0.1m", "seeds": args.seeds, "out": str(out)}


def numbers(result: dict) -> list:
    """What must not depend on --jobs: each run's before, after and gain."""
    return [(r["run"], r["before"], r["after"], r["gain"]) for r in result["runs"]]


def timed_grid(args: argparse.Namespace, jobs: int, out: Path) -> tuple[float, dict]:
    """(wall seconds, comparison) of the grid run into `out` with `jobs` cells at once."""
    from arborl.config import from_dict
    from arborl.grid.compare import CompareConfig, run_grid

    cfg = from_dict(CompareConfig, grid_keys(args, out), prefix="bench.")
    t0 = time.perf_counter()
    result = run_grid(cfg, echo=lambda line: print(f"  jobs={jobs} {line[:100]}"), jobs=jobs)
    return time.perf_counter() - t0, result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2, help="cells at once in the second call (2)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (default 0 1)")
    p.add_argument("--steps", type=int, default=40, help="RL steps a cell (default 40)")
    p.add_argument("--tasks", type=int, default=16, help="tasks an RL step, x4 episodes (16)")
    p.add_argument("--eval-episodes", type=int, default=200, help="held-out episodes (200)")
    p.add_argument(
        "--out", default=None, help="JSON path (default bench/results/compare_jobs.json)"
    )
    args = p.parse_args(argv)
    if args.jobs < 2:
        p.error(f"--jobs must be 2 or more (it is compared with 1), got {args.jobs}")

    from common import format_table, machine_info, write_json

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="compare_jobs_") as tmp:
        one_s, one = timed_grid(args, 1, Path(tmp) / "jobs1")
        many_s, many = timed_grid(args, args.jobs, Path(tmp) / f"jobs{args.jobs}")
    same = numbers(one) == numbers(many)
    cells = len(one["runs"])
    rows = [
        ["--jobs 1", str(cells), f"{one_s:.0f}", "1.00"],
        [f"--jobs {args.jobs}", str(cells), f"{many_s:.0f}", f"{one_s / many_s:.2f}"],
    ]
    print(format_table(["call", "RL cells", "wall s", "speed-up"], rows))
    print(f"same numbers with --jobs 1 and --jobs {args.jobs}: {same}")
    doc = {
        "grid": grid_keys(args, Path("OUT")),
        "cells": cells,
        "wall_s": {"jobs_1": round(one_s, 1), f"jobs_{args.jobs}": round(many_s, 1)},
        "speedup": round(one_s / many_s, 3),
        "same_numbers": same,
        "runs": [list(run) for run in numbers(one)],
        "load_before": load_before,
        "machine": machine_info(1),
    }
    print(f"wrote {write_json(doc, args.out, 'compare_jobs')}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
