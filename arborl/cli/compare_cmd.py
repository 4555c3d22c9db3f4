"""`arborl compare`: arms x seeds from one start per seed, paired gains and differences.

    arborl compare env=maze trainer.total_steps=40 --algos grpo gigpo --seeds 0 1 2
    arborl compare env=sokoban --arm lr3e-4 algo.lr=3e-4 --arm lr1e-3 algo.lr=1e-3 \\
        --start runs/warm/checkpoints/sft/policy --out runs/cmp-lr
    arborl compare --out runs/cmp-lr            # resume (or re-collect) that grid
    arborl compare --config grid.yaml --collect # tabulate what exists, run nothing
    arborl compare --out runs/cmp-lr --jobs 2   # two cells at once, as child processes

The grid logic is `arborl.grid.compare`; this module only turns flags into its config.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path


def grid_data(args: argparse.Namespace) -> dict:
    """The `CompareConfig` keys of the command line: a YAML file's (`--config`, or the
    `grid.yaml` of `--out` when no arm is given), then the flags over it."""
    from arborl.config import load_config, to_dict
    from arborl.grid.compare import CompareConfig

    file = args.config
    if file is None and not (args.arm or args.algos) and args.out:
        saved = Path(args.out) / "grid.yaml"
        file = str(saved) if saved.exists() else None
    data = {}
    if file:  # checked as it is read; the flags then replace or extend its keys
        data = to_dict(load_config(CompareConfig, files=[file]))
    arms = {name: list(overrides) for name, *overrides in args.arm or []}
    arms.update({algo: [f"algo={algo}"] for algo in args.algos or []})
    if arms:
        data["arms"] = arms
    data["base"] = [*data.get("base", []), *args.overrides]
    data["sft"] = [*data.get("sft", []), *(args.sft or [])]
    for key in ("seeds", "start", "out", "level"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.pair:
        data["pairs"] = [list(p) for p in args.pair]
    return data


def _run(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError, from_dict
    from arborl.grid.compare import CompareConfig, GridConflict, run_grid
    from arborl.grid.guard import GridBusy
    from arborl.train.runlog import RunDirBusy

    try:
        cfg = from_dict(CompareConfig, grid_data(args), prefix="compare.")
        result = run_grid(
            cfg,
            args.fresh,
            args.replace,
            collect_only=args.collect,
            echo=functools.partial(print, flush=True),  # each line as it happens, in a pipe too
            jobs=args.jobs,
        )
    except (ConfigError, GridBusy, GridConflict, RunDirBusy) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n" + result["text"])
    out = Path(cfg.out)
    print(f"\nwrote {out / 'comparison.json'}, {out / 'comparison.txt'}", end="")
    print(f" and {out / 'report.html'}" if (out / "report.html").exists() else "")
    return _failures(result, out)


def _failures(result: dict, out: Path) -> int:
    """1 after naming the cells whose run failed (--jobs N) and the ones not run for it,
    else 0."""
    from arborl.grid.jobs import LOG_FILE

    failed = [c["run"] for c in result["cells"] if c["status"] == "failed"]
    if not failed:
        return 0
    for run in failed:
        print(f"error: cell {run} failed, see {out / run / LOG_FILE}", file=sys.stderr)
    skipped = [c["run"] for c in result["cells"] if c["status"] == "skipped"]
    if skipped:
        print(f"not run, as their SFT start failed: {', '.join(skipped)}", file=sys.stderr)
    print(
        f"the comparison leaves them out; fix the cause and run `arborl compare --out {out}` "
        "again to run them (finished cells are kept)",
        file=sys.stderr,
    )
    return 1


FLAG_KEYS = ("seeds", "start", "sft", "out", "level")
"""The `CompareConfig` keys whose flags are generated from its fields (their help is the
field's docstring); `arms` (--arm, --algos), `base` (the overrides) and `pairs` (--pair)
have shapes a flag per field cannot say."""


def register(sub: argparse._SubParsersAction) -> None:
    from arborl.config.flags import add_flags
    from arborl.grid.compare import CompareConfig

    p = sub.add_parser(
        "compare",
        help="run, resume or collect a grid of runs (arms x seeds) and compare them, paired",
        description="Run every arm (a set of `arborl train` overrides) on every seed from one "
        "start per seed (an `arborl sft` run of that seed, or --start POLICY), all evaluated "
        "on the same held-out tasks with the same sampling seed; then print and write each "
        "arm's gain over the start with a 95% t interval over seeds, the paired per-seed "
        "differences between arms with their intervals and on how many seeds each led, and "
        "the training curves. Finished runs are collected, half-finished ones resumed from "
        "their last checkpoint (docs/training.md, 'Comparing recipes').",
        epilog="--out alone resumes the grid it holds. What every run needs (env=NAME) goes "
        "before --sft and --arm.",
    )
    p.add_argument(
        "overrides", nargs="*", help="key=value overrides every run shares (env=NAME, budget)"
    )
    p.add_argument(
        "--arm",
        nargs="+",
        action="append",
        metavar=("NAME", "OVERRIDE"),
        help="an arm: its name, then its key=value overrides (repeatable)",
    )
    p.add_argument(
        "--algos", nargs="+", metavar="ALGO", help="one arm per algorithm: NAME with algo=NAME"
    )
    p.add_argument(
        "--pair",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        help="compare arm A minus arm B per seed (repeatable; default: every two arms)",
    )
    add_flags(p, CompareConfig, only=FLAG_KEYS, layered=True)  # --seeds ... --level
    p.add_argument("--config", default=None, help="a YAML file of the grid's keys (grid.yaml)")
    p.add_argument("--collect", action="store_true", help="run nothing: compare what exists")
    p.add_argument(
        "--replace",
        action="store_true",
        help="rerun the cells whose folder holds a run of other settings (deleting it)",
    )
    p.add_argument("--fresh", action="store_true", help="rerun every cell from scratch")
    p.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        metavar="N",
        help="run up to N cells at once, each as its own process (its output in "
        "<out>/<cell>/compare.log), an RL cell after its seed's SFT start; a failed cell "
        "leaves the others running, and the command then exits 1. Each run keeps its "
        "trainer.num_threads (default 1: N runs use N cores), and a warning says when N "
        "runs ask for more threads than there are cores. Default 1: one cell after "
        "another, in this process",
    )
    p.set_defaults(func=_run)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give 1 or more")
    return value
