"""`arborl curate CONFIG.yaml [key=value ...] [--strict] [--out DIR]`: curate training data.

    arborl curate configs/curate/default.yaml
    arborl curate configs/curate/default.yaml filters.won_only=true --out curated/maze
    arborl curate 'sources=[{path: data/*.jsonl, domain: web}]' --strict

Arguments ending in .yaml/.yml are config files (merged in order); the others are dotted
overrides. The logic lives in `arborl.curate`; this module parses flags and prints the
report table. Exit codes: 0 done, 1 a malformed row under --strict, a failed leak check or
bad input data, 2 a bad config.
"""

from __future__ import annotations

import argparse
import sys


def _split_args(items: list[str]) -> tuple[list[str], list[str]]:
    files = [a for a in items if "=" not in a and a.endswith((".yaml", ".yml"))]
    return files, [a for a in items if a not in files]


def _run(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError
    from arborl.curate import MalformedRow, load_curate_config, run_curation

    files, overrides = _split_args(args.config_or_overrides)
    bad = [a for a in overrides if "=" not in a]
    if bad:
        print(f"error: {bad[0]!r} is neither a .yaml config file nor key=value", file=sys.stderr)
        return 2
    if args.strict:
        overrides.append("strict=true")
    if args.out:
        overrides.append(f"output_dir={args.out}")
    try:
        cfg = load_curate_config(overrides, files=files)
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        report = run_curation(cfg)
    except MalformedRow as e:
        print(f"error: malformed row: {e}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(report.table())
    print(f"\nwrote {cfg.output_dir}/ (report.json, report.txt, one folder per split)")
    lc = report.leak_check
    return 1 if lc.get("task_id_overlaps") or lc.get("near_dup_overlaps") else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "curate",
        help="filter, de-duplicate, mix, split and export trajectory data (SFT, preference, RL)",
        description="Turn ShareGPT / OpenAI chat / verl parquet / arborl trajectory files into "
        "clean, leak-free SFT, preference and RL datasets with a report. Config sections: "
        "sources, filters, quality, dedup, mix, split, export (see docs/curation.md).",
    )
    p.add_argument(
        "config_or_overrides",
        nargs="*",
        metavar="CONFIG_OR_OVERRIDES",
        help="YAML config files (configs/curate/default.yaml) and key=value overrides",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first malformed row, naming file, row and field (default: skip it "
        "and count it in the report)",
    )
    p.add_argument("--out", metavar="DIR", help="output folder (overrides output_dir)")
    p.set_defaults(func=_run)
