"""`arborl sft [key=value ...]`: only the SFT warm start of `arborl train`, as its own run.

It reads the same `TrainConfig` (the model, env, agent, sft and eval sections matter) and
calls `arborl.train.sft.sft_job`, which runs the same `warm_start` that `arborl train` runs
before RL, so a
policy trained here is the one `arborl train` would start RL from. The run folder gets
config.yaml, metrics.jsonl (the SFT loss of every step), the policy in HF format under
`checkpoints/sft/policy` and summary.json with the held-out success. Continue with RL:

    arborl sft trainer.name=warm sft.steps=200
    arborl train model.name_or_path=runs/warm/checkpoints/sft/policy sft.enabled=false
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError
    from arborl.train.config import load_train_config

    overrides = list(args.overrides)
    if args.out:
        out = Path(args.out)
        overrides += [f"trainer.output_dir={out.parent}", f"trainer.name={out.name}"]
    try:
        cfg = load_train_config(overrides, files=args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from arborl.train.evaluate import format_success
    from arborl.train.runlog import RunDirBusy
    from arborl.train.sft import sft_job

    try:
        summary = sft_job(cfg)
    except RunDirBusy as e:  # another run writes that folder (raised before any work)
        print(f"error: {e}", file=sys.stderr)
        return 2
    loss = summary["sft"].get("sft/loss", float("nan"))
    print(f"\nrun: {summary['run_dir']}  ({cfg.sft.steps} SFT steps, final loss {loss:.4f})")
    print(f"policy: {summary['policy']}")
    print(format_success("held-out success after SFT", summary["after"]))
    report = Path(summary["run_dir"]) / "report.html"
    if report.exists():
        print(f"report: {report}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft",
        help="SFT warm start only (oracle demos or a trajectory file), saved for `arborl train`",
        description="Supervised fine-tuning on oracle demos of env.train_split (or the "
        "trajectory file sft.demos), with the same config keys as `arborl train`; then a "
        "held-out evaluation. The policy is saved to <run>/checkpoints/sft/policy; start RL "
        "from it with `arborl train model.name_or_path=<that dir> sft.enabled=false`.",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides or group=name selections")
    p.add_argument("--config", action="append", help="a YAML config file (repeatable)")
    p.add_argument(
        "--out", default=None, help="run directory (default: trainer.output_dir/trainer.name)"
    )
    p.set_defaults(func=_run)
