"""Break the RL loop on purpose, once per kind of bug, and check the sanity suite catches it.

Issue 16 asks that a sign error, a wrong mask or a dropped gradient anywhere in the loop
makes `tests/learning/` fail. For each break this script checks out the current commit into
a temporary git worktree, applies one edit to its `arborl/train/update.py` (each edit must
match exactly once, so a refactor that moves the code makes the script stop with the name
of the break rather than run an unbroken suite), runs `pytest tests/learning` there with
that worktree first on the import path, and records passed/failed counts. A last run with
no edit shows the suite passes in the same conditions. The repo itself is never edited.

    python bench/sanity_breaks.py                    # all three breaks plus the control
    python bench/sanity_breaks.py --breaks sign      # one
    python bench/sanity_breaks.py --tests tests/learning/test_sanity.py::test_bandit

Prints a table and writes bench/results/sanity_breaks.json. Each run is the suite's time
(about 1 min on 2 quiet cores).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = "arborl/train/update.py"

BREAKS: dict[str, tuple[str, str, str]] = {
    # name: (what it breaks, exact text, its replacement)
    "sign": (
        "advantage sign flipped in the actor loss",
        '    adv = mb.tensors["adv"] * mb.tensors["weight"]',
        '    adv = -mb.tensors["adv"] * mb.tensors["weight"]',
    ),
    "mask": (
        "response mask off by one (trains the end token, not the action's first)",
        '    mask = mb.tensors["response_mask"][:, :a]',
        '    mask = torch.nn.functional.pad(mb.tensors["response_mask"][:, : a - 1], (1, 0))',
    ),
    "gradient": (
        "gradients dropped before the actor's optimizer step",
        "            skipped += 1\n            continue\n        optimizer.step()\n"
        "        totals = dict(",
        "            skipped += 1\n            continue\n        optimizer.zero_grad()\n"
        "        optimizer.step()\n        totals = dict(",
    ),
}
"""Each break: a description, the exact text of `TARGET` it replaces, and what replaces it."""


def apply_break(path: Path, name: str) -> None:
    """Replace the break's text in `path`; stop when it does not match exactly once."""
    _, old, new = BREAKS[name]
    text = path.read_text()
    count = text.count(old)
    if count != 1:
        raise SystemExit(
            f"break {name!r}: its text occurs {count} times in {TARGET} (expected 1); "
            f"update BREAKS in {Path(__file__).name} to the current code"
        )
    path.write_text(text.replace(old, new))


def counts(output: str) -> dict[str, int]:
    """passed/failed/error counts from pytest's last summary line."""
    last = output.strip().splitlines()[-1] if output.strip() else ""
    found = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?)", last)}
    return {
        "passed": found.get("passed", 0),
        "failed": found.get("failed", 0),
        "errors": found.get("error", 0) + found.get("errors", 0),
    }


def run_suite(tree: Path, tests: list[str]) -> dict:
    """pytest `tests` in the worktree `tree`, importing its arborl first."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider"],
        cwd=tree, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    return {**counts(out), "wall_s": round(wall, 1), "summary": out.strip().splitlines()[-1:]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--breaks", nargs="+", choices=list(BREAKS), default=list(BREAKS),
        help="which breaks to try (default all)",
    )  # fmt: skip
    p.add_argument("--tests", nargs="+", default=["tests/learning"], help="pytest targets")
    p.add_argument("--no-control", action="store_true", help="skip the unbroken run")
    p.add_argument(
        "--out", default=None, help="JSON path (default bench/results/sanity_breaks.json)"
    )
    args = p.parse_args(argv)

    from common import format_table, machine_info, write_json

    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    load_before = machine_info(1)["loadavg"]
    rows = []
    names = [*args.breaks, *([] if args.no_control else [None])]
    with tempfile.TemporaryDirectory(prefix="arborl-breaks-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), commit],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
        try:
            for name in names:
                target = tree / TARGET
                subprocess.run(["git", "checkout", "--", TARGET], cwd=tree, check=True)
                if name is not None:
                    apply_break(target, name)
                print(f"running {args.tests} with break {name or 'none'} ...", flush=True)
                res = run_suite(tree, args.tests)
                rows.append({"break": name or "none (control)",
                             "what": BREAKS[name][0] if name else "the committed code", **res})  # fmt: skip
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO)
            shutil.rmtree(tree, ignore_errors=True)
    table = format_table(
        ["break", "what", "passed", "failed", "errors", "wall s"],
        [
            [r["break"], r["what"], r["passed"], r["failed"], r["errors"], round(r["wall_s"])]
            for r in rows
        ],
    )
    print(table)
    caught = all(r["failed"] + r["errors"] > 0 for r in rows if r["break"] in BREAKS)
    control = [r for r in rows if r["break"] not in BREAKS]
    print(
        "every break caught:",
        caught,
        "| control clean:",
        all(r["failed"] + r["errors"] == 0 for r in control),
    )
    result = {
        "benchmark": "sanity_breaks", "commit": commit, "tests": args.tests, "rows": rows,
        "every_break_caught": caught, "machine": {**machine_info(1), "loadavg_before": load_before},
    }  # fmt: skip
    print(f"wrote {write_json(result, args.out, 'sanity_breaks')}")


if __name__ == "__main__":
    main()
