"""`arborl report RUN_DIR [RUN_DIR ...]`: the self-contained `report.html` of a run, or of
several runs overlaid with a table of their config differences and the comparison of
`arborl compare` (arms x seeds: gains, paired differences; also printed).

    arborl report runs/demo                       # -> runs/demo/report.html
    arborl report runs/a runs/b --out compare.html

Works on a partial run dir (a crashed or running training) and shows what exists.
"""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from arborl.report import write_report

    if len(args.run_dirs) > 1 and not args.out:
        print(
            f"error: {len(args.run_dirs)} run dirs need --out FILE (e.g. --out compare.html)",
            file=sys.stderr,
        )
        return 2
    try:
        out = write_report(
            args.run_dirs,
            args.out,
            baselines=not args.no_baselines,
            max_points=args.max_points,
            episodes_per_point=args.episodes_per_point,
        )
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if len(args.run_dirs) > 1:  # the table `arborl compare` prints, also in the page
        from arborl.report import load_run
        from arborl.report.compare import compare_runs, format_comparison

        print(format_comparison(compare_runs([load_run(d) for d in args.run_dirs])) + "\n")
    print(f"report: {out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained report.html of one run, or compare several runs",
        description="Curves (held-out success with 95% intervals and random/oracle lines, "
        "training success, rewards, diagnostics, throughput), readable episodes, search "
        "trees and the config of one run dir or several (overlaid, with a config diff and, "
        "printed too, the comparison of `arborl compare`: each arm's gain over its start "
        "and the paired differences between arms, over seeds).",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a runs/<name> folder")
    p.add_argument(
        "--out",
        default=None,
        help="output HTML file (default: RUN_DIR/report.html; required for several runs)",
    )
    p.add_argument(
        "--no-baselines",
        action="store_true",
        help="do not compute random/oracle lines when a run has no baselines.json",
    )
    p.add_argument(
        "--max-points",
        type=int,
        default=400,
        help="most points drawn per curve (longer curves are thinned evenly)",
    )
    p.add_argument(
        "--episodes-per-point",
        type=int,
        default=16,
        help="most episodes shown per evaluation or training step",
    )
    p.set_defaults(func=run)
