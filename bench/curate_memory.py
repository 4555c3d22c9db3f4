"""Peak memory of `arborl curate` as the input grows (issue 34, review-2 defect 6).

    python bench/curate_memory.py                                  # 5, 20, 50, 200 MB
    python bench/curate_memory.py --sizes-mb 200 --data maze --modes near
    python bench/curate_memory.py --repo /path/to/other/checkout   # the same, another tree

Writes a JSON Lines input of each size into a temporary folder, runs `arborl curate` on it
in a subprocess (one run per measurement, so nothing is shared between them) and reads the
child's peak resident set size from `os.wait4` (the kernel's `ru_maxrss`). Data kinds:
`maze` is the review's file (2 KB rows of seven maze words: every row is a near duplicate
of another, the worst case for the near-dedup candidate checks) and `distinct` has rows of
random words from 3,000 (almost no near duplicates). Modes: `exact` (exact dedup only, the
split's text check off, SFT export: the review's first run), `near` (the same plus near
dedup: its second run) and `full` (near dedup, the split's prompt check, all four exports).
`kb_per_added_row` is the peak's growth from the next smaller size (the first from a
0.1 MB input) over the rows added: what each more row costs, fixed costs (imports, the
bounded caches) left out.
Writes JSON to `bench/results/curate_memory.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import cpu_facts, format_table, write_json

REPO = Path(__file__).resolve().parents[1]
MAZE_WORDS = ["up", "down", "left", "right", "wall", "goal", "free"]
VOCAB = [f"w{i}" for i in range(3000)]


def _maze_row(rng: random.Random, i: int) -> dict:
    obs = " ".join(rng.choice(MAZE_WORDS) for _ in range(250))
    return {"id": f"r{i}", "messages": [
        {"role": "system", "content": "Solve the maze."},
        {"role": "user", "content": f"task {i} " + obs}, {"role": "assistant", "content": "up"},
        {"role": "user", "content": obs[:500]}, {"role": "assistant", "content": "left"}],
        "metadata": {"won": i % 2 == 0}}  # fmt: skip


def _distinct_row(rng: random.Random, i: int) -> dict:
    text = lambda n: " ".join(rng.choice(VOCAB) for _ in range(n))  # noqa: E731
    return {"id": f"r{i}", "messages": [
        {"role": "system", "content": "Answer the question."},
        {"role": "user", "content": f"task {i}: " + text(120)},
        {"role": "assistant", "content": text(60)},
        {"role": "user", "content": text(60)}, {"role": "assistant", "content": text(30)}],
        "metadata": {"won": i % 3 != 0}}  # fmt: skip


ROWS = {"maze": _maze_row, "distinct": _distinct_row}


def make_input(path: Path, kind: str, size_mb: float, seed: int = 1) -> int:
    """Write `size_mb` MB of `kind` rows to `path`; returns the number of rows."""
    rng, written, i = random.Random(seed), 0, 0
    with open(path, "w") as f:
        while written < size_mb * 2**20:
            line = json.dumps(ROWS[kind](rng, i)) + "\n"
            f.write(line)
            written += len(line)
            i += 1
    return i


def config(data: Path, mode: str, max_memory_mb: int | None) -> str:
    near = "false" if mode == "exact" else "true, threshold: 0.85"
    check = "prompt" if mode == "full" else '"off"'
    kinds = "[sft, preference, rl, trajectories]" if mode == "full" else "[sft]"
    return (f"sources: [{{path: {data}, domain: bench}}]\n"
            f"dedup: {{exact: true, near: {near}}}\n"
            f"split: {{ratios: {{train: 0.9, test: 0.1}}, text_check: {check}, seed: 0}}\n"
            f"export: {{kinds: {kinds}, sft_format: openai, sft_won_only: true}}\n"
            + (f"max_memory_mb: {max_memory_mb}\n" if max_memory_mb is not None else ""))  # fmt: skip


def run_curate(repo: Path, cfg: Path, out: Path, timeout_s: float) -> dict:
    """One `arborl curate` in a fresh process: its peak RSS (MB), wall time and rc."""
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "arborl.cli.main", "curate", str(cfg), "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    deadline = t0 + timeout_s
    while True:  # wait4 gives this child's own rusage (getrusage(CHILDREN) is the max of all)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")[-500:]
    proc.stderr.close()
    kept = None
    if (out / "report.json").exists():
        kept = json.loads((out / "report.json").read_text())["num_kept"]
    return {"peak_rss_mb": usage.ru_maxrss / 1024, "wall_s": round(wall, 1),
            "rc": proc.returncode, "kept": kept, "stderr_tail": err if proc.returncode else ""}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[5, 20, 50, 200],
                   help="input sizes in MB (default 5 20 50 200)")  # fmt: skip
    p.add_argument("--data", nargs="+", default=["maze", "distinct"], choices=list(ROWS),
                   help="row kinds (default both)")  # fmt: skip
    p.add_argument(
        "--modes",
        nargs="+",
        default=["exact", "near", "full"],
        choices=["exact", "near", "full"],
        help="curate settings (default all)",
    )
    p.add_argument(
        "--repo", default=str(REPO), help="the checkout whose arborl runs (default: this one)"
    )
    p.add_argument(
        "--max-memory-mb",
        type=int,
        default=None,
        help="curate's max_memory_mb (default: its own default; 0 spools every row)",
    )
    p.add_argument("--timeout-s", type=float, default=1800, help="per run (default 1800)")
    p.add_argument("--out", help="JSON path (default bench/results/curate_memory.json)")
    args = p.parse_args()
    repo = Path(args.repo).resolve()
    load_before = list(os.getloadavg())
    results, rows = [], []
    with tempfile.TemporaryDirectory(prefix="curate-memory-") as tmp:
        tmp = Path(tmp)
        for kind in args.data:
            prev: dict[str, tuple[float, int]] = {}  # mode -> (peak MB, rows) one size down
            for size in [0.1, *args.sizes_mb]:
                data = tmp / f"{kind}-{size}.jsonl"
                num_rows = make_input(data, kind, size)
                for mode in args.modes:
                    cfg = tmp / f"{mode}.yaml"
                    cfg.write_text(config(data, mode, args.max_memory_mb))
                    r = run_curate(repo, cfg, tmp / f"out-{kind}-{size}-{mode}", args.timeout_s)
                    last, prev[mode] = prev.get(mode), (r["peak_rss_mb"], num_rows)
                    if last is None:  # the 0.1 MB run: the fixed costs
                        continue
                    per_row = (r["peak_rss_mb"] - last[0]) * 1024 / (num_rows - last[1])
                    input_mb = data.stat().st_size / 2**20
                    results.append({"data": kind, "mode": mode, "input_mb": round(input_mb, 1),
                                    "rows": num_rows, **r,
                                    "kb_per_added_row": round(per_row, 2)})  # fmt: skip
                    rows.append([kind, mode, round(input_mb, 1), num_rows, r["peak_rss_mb"],
                                 r["peak_rss_mb"] / input_mb, per_row, r["wall_s"], r["rc"]])  # fmt: skip
                    print(format_table(["data", "mode", "input MB", "rows", "peak RSS MB",
                                        "peak / input", "KB per added row", "wall s", "rc"],
                                       rows[-1:]).splitlines()[-1], flush=True)  # fmt: skip
                data.unlink()
    table = format_table(["data", "mode", "input MB", "rows", "peak RSS MB", "peak / input",
                          "KB per added row", "wall s", "rc"], rows)  # fmt: skip
    print(table)
    where = "." if repo == REPO else repo.name  # never this machine's absolute path
    out = {"repo": where, "commit": _commit(repo), "max_memory_mb": args.max_memory_mb,
           "machine": {**cpu_facts(),
           "cpu_count": os.cpu_count(), "loadavg_before": load_before,
           "loadavg_after": list(os.getloadavg())}, "results": results}  # fmt: skip
    print(f"wrote {write_json(out, args.out, 'curate_memory')}")


def _commit(repo: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip() or None


if __name__ == "__main__":
    main()
