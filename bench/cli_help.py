"""How fast `arborl --help` and every `arborl <cmd> [<sub>] --help` answer, each a fresh
process, as a user runs them.

    python bench/cli_help.py --repeats 5

Walks the parser for every command and subcommand, then runs each `--help` `--repeats`
times as a subprocess of the installed `arborl` script (commands interleaved, so a burst
of machine load hits them all alike) and reports the median wall time, the target
(<= 0.5 s, issue 20) and a plain `python -c pass` start as the floor. Writes JSON to
`bench/results/cli_help.json`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import cpu_model, format_table, write_json

TARGET_S = 0.5


def commands() -> list[list[str]]:
    """Every command line whose --help the table times, top level first."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's arborl
    from arborl.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser, words: list[str]):
        yield words
        for action in parser._actions:  # argparse keeps subcommands in a private action
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*words, name])

    return list(walk(build_parser(), []))


def entry_point() -> list[str]:
    """The `arborl` console script beside this Python (what `pip install` made), else the
    module it runs."""
    script = Path(sys.executable).with_name("arborl")
    if script.exists():
        return [str(script)]
    found = shutil.which("arborl")
    return [found] if found else [sys.executable, "-m", "arborl.cli.main"]


def time_once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="runs per command (median reported)")
    p.add_argument("--out", help="JSON path (default bench/results/cli_help.json)")
    args = p.parse_args()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    base = entry_point()
    lines = commands()
    load_before = list(os.getloadavg())
    floor: list[float] = []
    times: dict[str, list[float]] = {" ".join(w): [] for w in lines}
    for _ in range(args.repeats):
        floor.append(time_once([sys.executable, "-c", "pass"], env))
        for words in lines:
            times[" ".join(words)].append(time_once([*base, *words, "--help"], env))
    load_after = list(os.getloadavg())
    rows, results = [], []
    for words, ts in times.items():
        med = statistics.median(ts)
        results.append({"command": f"arborl {words}".strip(), "median_s": med, "runs_s": ts})
        rows.append([f"arborl {words} --help".replace("  ", " "), med, max(ts),
                     "yes" if med <= TARGET_S else "NO"])  # fmt: skip
    print(format_table(["command", "median s", "max s", f"<= {TARGET_S} s"], rows))
    worst = max(results, key=lambda r: r["median_s"])
    print(f"python -c pass (interpreter start): {statistics.median(floor):.3f} s; slowest "
          f"median: {worst['command']} --help {worst['median_s']:.3f} s; target "
          f"{'met' if worst['median_s'] <= TARGET_S else 'NOT met'}")  # fmt: skip
    print(f"cpu: {cpu_model()}; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {args.repeats} runs each")  # fmt: skip
    path = write_json({"machine": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
                                   "python": sys.version.split()[0],
                                   "loadavg_before": load_before, "loadavg_after": load_after},
                       "entry_point": [Path(a).name for a in base], "repeats": args.repeats, "target_s": TARGET_S,
                       "python_start_s": statistics.median(floor), "results": results},
                      args.out, "cli_help")  # fmt: skip
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
