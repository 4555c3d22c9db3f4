"""Curation at scale: time per stage and how many planted duplicates and leaks are caught.

    python bench/curate.py --sizes 1000 4000

Builds a synthetic ShareGPT file per size: distinct tasks, each with a random task text
and a random episode, plus planted exact duplicates, near duplicates (one word of the
episode changed) and leaks (a task id, or a task text with one word changed, again under
a "val" label). Then runs `arborl.curate.curate` on it and reports the wall time of each
stage, the share of planted duplicates removed (recall), the distinct rows removed by
mistake (false positives), and whether every leak ended up inside one split. Writes JSON
to `bench/results/curate.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from common import format_table, machine_info, write_json

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


def run_size(num_tasks: int, seed: int) -> dict:
    from arborl.curate import CurateConfig, SourceConfig
    from arborl.curate import pipeline as pl

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.jsonl"
        planted = build(path, num_tasks, seed)
        cfg = CurateConfig(sources=[SourceConfig(path=str(path), domain="synthetic")])
        times: dict[str, float] = {}
        originals = {name: getattr(pl, name) for name in (
            "read_sources", "apply_filters", "exact_dedup", "near_dedup", "assign_splits", "check_leaks")}  # fmt: skip

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
        "stage_s": times,
        "exact_recall": exact_caught / max(1, len(planted["exact"])),
        "near_recall": near_caught / max(1, len(planted["near"])),
        "false_positive_drops": false_pos,
        "planted_leaks": len(planted["leak_id"]) + len(planted["leak_text"]),
        "input_leaks_found": len(report.input_leaks),
        "leaks_left_across_splits": leaks_split,
        "leak_check": {k: report.leak_check[k] for k in ("task_id_overlaps", "near_dup_overlaps")},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes", type=int, nargs="+", default=[1000, 4000], help="distinct tasks per run"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument("--out", help="JSON path (default bench/results/curate.json)")
    args = p.parse_args()
    results = [run_size(n, args.seed) for n in args.sizes]
    headers = ["rows", "wall s", "rows/s", "read s", "exact s", "near s", "split s",
               "exact recall", "near recall", "false drops", "leaks", "leaks found",
               "leaks across splits"]  # fmt: skip
    rows = [[r["num_rows"], r["wall_s"], r["rows_per_s"], r["stage_s"]["read_sources"],
             r["stage_s"]["exact_dedup"], r["stage_s"]["near_dedup"],
             r["stage_s"]["assign_splits"] + r["stage_s"]["check_leaks"], r["exact_recall"],
             r["near_recall"], r["false_positive_drops"], r["planted_leaks"],
             r["input_leaks_found"], r["leaks_left_across_splits"]] for r in results]  # fmt: skip
    print(format_table(headers, rows))
    path = write_json(
        {"machine": machine_info(1), "seed": args.seed, "results": results}, args.out, "curate"
    )
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
