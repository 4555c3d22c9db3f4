"""Curation at scale: rows per second, time per stage, and how many planted duplicates and
leaks are caught.

    python bench/curate.py --sizes 4800 100000

Builds a synthetic ShareGPT file per size (rows in all): distinct tasks, each with a random
task text and a random episode, plus planted rows for a fifth of them: exact duplicates,
near duplicates (one word of the episode changed) and leaks (a task id, or a task text
with one word changed, again under a "val" label). Then runs `arborl.curate.curate` on it
(`--repeats` times, sizes interleaved, medians reported) and reports the wall time of each
stage, the share of planted duplicates removed (recall), the distinct rows removed by
mistake (false positives), whether every leak ended up inside one split, and how the time
per row grows with the size. Writes JSON to `bench/results/curate.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from common import format_table, machine_info, write_json

STAGES = ("_scan", "exact_dedup", "near_dedup", "assign_splits", "check_leaks")
"""`arborl.curate.pipeline` functions timed: `_scan` reads, filters and scores the rows one at
a time (and spools them), so reading and filtering are one figure."""
TARGET_ROWS_PER_S = 2000.0
"""Issue 20's target on the 4,800-row set."""

VOCAB = [f"w{i}" for i in range(3000)]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def _row(tid: str, task: str, turns: list[str], won: bool = True) -> dict:
    conv = [{"from": "human", "value": task}]
    for i, t in enumerate(turns):
        if i:
            conv.append({"from": "human", "value": f"observation {i}"})
        conv.append({"from": "gpt", "value": t})
    return {"id": tid, "conversations": conv, "won": won}


def _edit(rng: random.Random, text: str) -> str:
    words = text.split()
    words[rng.randrange(len(words))] = rng.choice(VOCAB)
    return " ".join(words)


def build(path: Path, num_tasks: int, seed: int) -> dict[str, list[str]]:
    """Write the dataset; return the ids of planted rows by kind."""
    rng = random.Random(seed)
    tasks = [
        (f"t{i}", _text(rng, 30), [_text(rng, 25) for _ in range(3)]) for i in range(num_tasks)
    ]
    rows = [{**_row(*t), "split": "train"} for t in tasks]
    planted: dict[str, list[str]] = {"exact": [], "near": [], "leak_id": [], "leak_text": []}
    for k, (tid, task, turns) in enumerate(rng.sample(tasks, num_tasks // 5)):
        kind = ("exact", "near", "leak_id", "leak_text")[k % 4]
        if kind == "exact":
            rows.append(_row(f"{tid}-x", task, turns))
        elif kind == "near":
            rows.append(_row(f"{tid}-n", task, turns[:-1] + [_edit(rng, turns[-1])]))
        elif kind == "leak_id":  # same id, a different (failed) episode, labelled val
            rows.append({**_row(tid, task, [_text(rng, 25)], won=False), "split": "val"})
        else:  # new id, task text one word off, a different episode, labelled val
            rows.append(
                {**_row(f"{tid}-v", _edit(rng, task), [_text(rng, 25)], False), "split": "val"}
            )
        planted[kind].append(tid)
    rng.shuffle(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return planted


def tasks_for(num_rows: int) -> int:
    """Distinct tasks whose file has `num_rows` rows (a fifth of them get a planted row)."""
    tasks = round(num_rows / 1.2)
    while tasks + tasks // 5 < num_rows:
        tasks += 1
    while tasks + tasks // 5 > num_rows:
        tasks -= 1
    return tasks


def run_once(path: Path, planted: dict[str, list[str]]) -> dict:
    from arborl.curate import CurateConfig, SourceConfig
    from arborl.curate import pipeline as pl

    cfg = CurateConfig(sources=[SourceConfig(path=str(path), domain="synthetic")])
    times: dict[str, float] = {}
    originals = {name: getattr(pl, name) for name in STAGES}

    def timed(name, fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            times[name] = times.get(name, 0.0) + time.perf_counter() - t0
            return out

        return wrapper

    for name, fn in originals.items():
        setattr(pl, name, timed(name, fn))
    try:
        t0 = time.perf_counter()
        records, report = pl.curate(cfg)
        total = time.perf_counter() - t0
    finally:
        for name, fn in originals.items():
            setattr(pl, name, fn)
    dropped = {(d["task_id"], d["stage"]) for d in report.dropped}
    exact_caught = sum((f"{t}-x", "dedup_exact") in dropped or (t, "dedup_exact") in dropped
                       for t in planted["exact"])  # fmt: skip
    near_caught = sum((f"{t}-n", "dedup_near") in dropped or (t, "dedup_near") in dropped
                      for t in planted["near"])  # fmt: skip
    planted_ids = {f"{t}-x" for t in planted["exact"]} | {f"{t}-n" for t in planted["near"]}
    planted_ids |= set(planted["exact"]) | set(planted["near"])
    false_pos = sum(d["task_id"] not in planted_ids for d in report.dropped)
    split_of = {}
    for r in records:
        split_of.setdefault(r.traj.task_id.removesuffix("-v"), set()).add(r.split)
    leaks_split = sum(
        len(split_of.get(t, ())) > 1 for t in planted["leak_id"] + planted["leak_text"]
    )
    n_rows = sum(report.counts["read"].values())
    return {
        "num_rows": n_rows,
        "wall_s": total,
        "rows_per_s": n_rows / total,
        "stage_s": {name: times.get(name, 0.0) for name in STAGES},
        "other_s": total - sum(times.values()),
        "exact_recall": exact_caught / max(1, len(planted["exact"])),
        "near_recall": near_caught / max(1, len(planted["near"])),
        "false_positive_drops": false_pos,
        "planted_leaks": len(planted["leak_id"]) + len(planted["leak_text"]),
        "input_leaks_found": len(report.input_leaks),
        "leaks_left_across_splits": leaks_split,
        "leak_check": {k: report.leak_check[k] for k in ("task_id_overlaps", "near_dup_overlaps")},
    }


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall time, with every time replaced by its median."""
    mid = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    out = {**mid, "repeats": len(runs), "wall_s_all": [r["wall_s"] for r in runs]}
    out["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    out["rows_per_s"] = out["num_rows"] / out["wall_s"]
    out["stage_s"] = {k: statistics.median(r["stage_s"][k] for r in runs) for k in STAGES}
    out["other_s"] = statistics.median(r["other_s"] for r in runs)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[4800, 100000],
                   help="rows per synthetic file (distinct tasks plus a fifth planted)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per size, interleaved across sizes; medians are reported")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument("--out", help="JSON path (default bench/results/curate.json)")
    args = p.parse_args()
    load_before = list(os.getloadavg())
    runs: dict[int, list[dict]] = {n: [] for n in args.sizes}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for n in args.sizes:
            path = Path(tmp) / f"data-{n}.jsonl"
            files[n] = (path, build(path, tasks_for(n), args.seed))
        for _ in range(args.repeats):
            for n in args.sizes:
                runs[n].append(run_once(*files[n]))
    results = [median_run(runs[n]) for n in args.sizes]
    base = results[0]
    for r in results:  # time per row against the smallest size: 1.0 is linear growth
        r["us_per_row"] = 1e6 * r["wall_s"] / r["num_rows"]
        r["per_row_vs_smallest"] = r["us_per_row"] / base["us_per_row"]
    headers = ["rows", "wall s", "rows/s", "us/row", "vs smallest", "read+filter s",
               "exact s", "near s", "split s", "leak check s", "other s", "exact recall",
               "near recall", "false drops", "leaks", "leaks found", "leaks across splits"]  # fmt: skip
    rows = [[r["num_rows"], r["wall_s"], r["rows_per_s"], r["us_per_row"],
             r["per_row_vs_smallest"], *(r["stage_s"][k] for k in STAGES), r["other_s"],
             r["exact_recall"], r["near_recall"], r["false_positive_drops"],
             r["planted_leaks"], r["input_leaks_found"], r["leaks_left_across_splits"]]
            for r in results]  # fmt: skip
    print(format_table(headers, rows))
    machine = {**machine_info(1), "loadavg_before": load_before}
    print(f"cpu: {machine['cpu_model']}; load average before {load_before[0]:.2f}, "
          f"after {machine['loadavg'][0]:.2f}; medians of {args.repeats} runs")  # fmt: skip
    for r in results:
        if r["num_rows"] == 4800:
            ok = r["rows_per_s"] >= TARGET_ROWS_PER_S and r["false_positive_drops"] == 0
            ok = ok and r["exact_recall"] == r["near_recall"] == 1.0
            print(f"target (4,800 rows: >= {TARGET_ROWS_PER_S:.0f} rows/s, recall 1.000, no "
                  f"false drops): {'met' if ok else 'NOT met'} ({r['rows_per_s']:.0f} rows/s)")  # fmt: skip
    path = write_json(
        {"machine": machine, "seed": args.seed, "repeats": args.repeats, "results": results},
        args.out, "curate",
    )  # fmt: skip
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
