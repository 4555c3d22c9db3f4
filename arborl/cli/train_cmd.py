"""`arborl train [key=value ...]`: RL training (with no arguments, the Maze demo: `make demo-maze`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError
    from arborl.train.config import load_train_config

    try:
        cfg = load_train_config(args.overrides, files=args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from arborl.train.evaluate import format_gain, format_success
    from arborl.train.rl import RLTrainer, TrainingAborted
    from arborl.train.runlog import RunDirBusy
    from arborl.train.stop import TrainingStopped

    # Checked by the trainer before any work: its engine's settings (e.g. engine=ray) and
    # that no other live trainer writes the run folder.
    try:
        trainer = RLTrainer(cfg)
    except (ConfigError, RunDirBusy) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        summary = trainer.fit()
    except TrainingAborted as e:
        print(f"error: training aborted: {e}", file=sys.stderr)
        return 1
    except TrainingStopped as e:  # SIGTERM/SIGINT: the step finished and was saved
        print(f"{e} (run: {trainer.run.path})", file=sys.stderr)
        return e.exit_code
    b, a = summary["before"], summary["after"]
    print(f"\nrun: {summary['run_dir']}  ({summary['steps']} RL steps, {summary['wall_s']} s)")
    if b:
        print(format_success("held-out success before RL", b))
    print(format_success("held-out success after RL ", a))
    if summary.get("gain"):
        print(format_gain("RL gain on the same tasks    ", summary["gain"]))
    scale = _baselines_line(Path(summary["run_dir"]))
    if scale:
        print(scale)
    report = Path(summary["run_dir"]) / "report.html"
    if report.exists():
        print(f"report: {report}  (open it in a browser; `arborl report` rebuilds it)")
    return _failures_exit(summary.get("failures") or {})


def _failures_exit(failures: dict) -> int:
    """Print the run's errored episodes ("N of M episodes errored ...") and, for a run
    that learned nothing, the error that says what to change; the exit status: 0, or
    `NOTHING_LEARNED_EXIT` (docs/training.md, "A run that learned nothing")."""
    from arborl.report.failures import errored_line, verdict_line
    from arborl.train.failures import NOTHING_LEARNED_EXIT

    line = errored_line(failures)
    if line:
        print(f"errors: {line}")
    verdict = verdict_line(failures)
    if verdict:
        print(f"error: {verdict} (exit status {NOTHING_LEARNED_EXIT})", file=sys.stderr)
        return NOTHING_LEARNED_EXIT
    return 0


def _baselines_line(run_dir: Path) -> str:
    """`for scale, ...`: the random policy's and the oracle's held-out success on the run's
    first evaluation tasks (its `baselines.json`, written with the report), or "" if none."""
    from arborl.report.baselines import read_baselines

    rows = read_baselines(run_dir)
    parts = [
        f"{label} {r['success']:.3f} [{r['success_lo']:.3f}, {r['success_hi']:.3f}]"
        f" (n={int(r['episodes'])})"
        for name, label in (("random", "random policy"), ("oracle", "oracle"))
        if (r := rows.get(name))
    ]
    return "for scale, same tasks       : " + ", ".join(parts) if parts else ""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="SFT warm start + RL (any registered algorithm) with held-out evaluation",
        description="Train an agent. Overrides are key=value (trainer.total_steps=10); "
        "algo=NAME selects a registered algorithm with its defaults (algo=gigpo) and "
        "env=NAME selects an env config group: configs/env/NAME.yaml (env=sokoban) or one "
        "a package ships (an arborl.env_configs entry point); with no env=NAME or env.id, "
        "env=maze applies. `arborl config docs` lists every key, the env groups and the "
        "names each registry holds.",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides or group=name selections")
    p.add_argument("--config", action="append", help="a YAML config file (repeatable)")
    p.set_defaults(func=_run)
