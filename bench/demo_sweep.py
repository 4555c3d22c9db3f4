"""The demo recipe sweep (issue 16, requirement 4): `arborl train` on its defaults (tiny-1m,
Maze, SFT then GRPO) against candidate changes, one at a time, each from its own SFT start.

Every candidate is a list of config overrides on top of the defaults; each run is scored
by its held-out success before RL (its own SFT start) and after RL on the same held-out
mazes (`eval.seed` fixed), so the RL gain is a paired comparison. Sweep with fewer eval
episodes (default 200), then confirm the winner at the demo's 500:

    python bench/demo_sweep.py                               # every candidate, 200 episodes
    python bench/demo_sweep.py --candidates default lr3e-4 --seeds 0 1
    python bench/demo_sweep.py --candidates lr3e-4 --eval-episodes 500   # confirm
    python bench/demo_sweep.py --collect runs/a runs/b --out results.json  # tabulate runs

`--collect` reads finished or still-running `arborl train` run folders (their config.yaml
and metrics.jsonl): each run's settings that differ from the demo defaults, its held-out
success at every evaluation, and the policy entropy and share of mixed groups at its
first and last RL steps, so runs launched by hand (or killed early) are tabulated from
what they wrote, not retyped.

Wall time on a loaded machine says little: the table reports RL steps and seconds per RL
step; judge a recipe's quiet wall time as RL steps x the quiet per-step time of the
default (measured on an idle machine). Finished runs are reused (`--fresh` reruns).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from common import RESULTS_DIR, format_table, machine_info, write_json

from arborl.config import from_dict, to_dict
from arborl.grid.compare import CompareConfig, run_grid
from arborl.train.config import load_train_config
from arborl.train.runlog import read_metrics

CANDIDATES: dict[str, list[str]] = {
    "default": [],
    "lr3e-4": ["algo.lr=3e-4"],
    "lr1e-3": ["algo.lr=1e-3"],
    "epochs2-mb64": ["algo.ppo_epochs=2", "algo.minibatch_size=64"],
    "mb32-lr2e-4": ["algo.minibatch_size=32", "algo.lr=2e-4"],
    "sft100": ["sft.steps=100"],
    "sft150-demos100": ["sft.steps=150", "sft.num_demos=100"],
    "gigpo": ["algo=gigpo"],
    "tasks8x16": ["rollout.num_tasks=8", "rollout.group_size=16"],
    "tasks32x4": ["rollout.num_tasks=32", "rollout.group_size=4"],
    "temp1.2": ["rollout.temperature=1.2"],
    "kl0.01": ["algo.kl_coef=0.01"],
    "steps120": ["trainer.total_steps=120"],
    # 2026-12-02 (docs/training.md, "The recipe sweep"): a stronger SFT start, then RL
    "sft-only-demos200": ["sft.num_demos=200", "trainer.total_steps=0"],
    "sft-only-demos200-sft600": ["sft.num_demos=200", "sft.steps=600", "trainer.total_steps=0"],
    "sft-only-demos500": ["sft.num_demos=500", "trainer.total_steps=0"],
    "sft-only-demos1000-sft600": ["sft.num_demos=1000", "sft.steps=600", "trainer.total_steps=0"],
    "demos200": ["sft.num_demos=200"],
    "demos200-gigpo": ["sft.num_demos=200", "algo=gigpo"],
    "demos200-lr1e-3": ["sft.num_demos=200", "algo.lr=1e-3"],
    "demos200-gigpo-lr1e-3": ["sft.num_demos=200", "algo=gigpo", "algo.lr=1e-3"],
    "demos200-gigpo-potential": [
        "sft.num_demos=200",
        "algo=gigpo",
        "reward.sources={env: 1.0, potential: 1.0}",
    ],
    "demos200-gigpo-potential-lr3e-4": [
        "sft.num_demos=200",
        "algo=gigpo",
        "algo.lr=3e-4",
        "reward.sources={env: 1.0, potential: 1.0}",
    ],
    "demos200-ppo-potential": [
        "sft.num_demos=200",
        "algo=ppo",
        "reward.sources={env: 1.0, potential: 1.0}",
    ],
}
"""Candidate name -> overrides on top of the demo defaults (one change each; combine the
winners in a new entry)."""


def sweep_grid(args: argparse.Namespace) -> CompareConfig:
    """The candidates x seeds as an `arborl compare` grid in which every run trains its
    own SFT start (start=own: candidates change SFT), each compared with "default" on the
    seeds where they share a start."""
    base = [
        f"eval.num_episodes={args.eval_episodes}", "eval.every=0",
        "trainer.save_trajectories=0", "trainer.plots=false", "trainer.progress=false",
        *args.set,
    ]  # fmt: skip
    pairs = [[c, "default"] for c in args.candidates if c != "default"]
    grid = {
        "arms": {c: CANDIDATES[c] for c in args.candidates},
        "seeds": args.seeds,
        "base": base,
        "start": "own",
        "out": str(Path(args.work_dir) / f"e{args.eval_episodes}"),
        "pairs": pairs if "default" in args.candidates else [],
    }
    return from_dict(CompareConfig, grid, prefix="sweep.")


def candidate_row(r: dict, args: argparse.Namespace) -> dict:
    """One run of the sweep as its table shows it (from the grid's comparison row)."""
    before, after = r["before"], r["after"]
    return {
        "candidate": r["arm"], "seed": r["seed"], "overrides": CANDIDATES[r["arm"]],
        "before": before["success"], "before_lo": before["success_lo"],
        "before_hi": before["success_hi"], "after": after["success"],
        "after_lo": after["success_lo"], "after_hi": after["success_hi"],
        "gain": after["success"] - before["success"],
        "separated": after["success_lo"] > before["success_hi"], "rl_steps": r["steps"],
        "wall_s": r["wall_s"], "s_per_rl_step": r["wall_s"] / max(r["steps"], 1),
        "loadavg": list(os.getloadavg()), "eval_episodes": args.eval_episodes,
    }  # fmt: skip


BOOKKEEPING = ("trainer.", "eval.every", "eval.save_episodes")
"""Settings that change what a run writes, not what it learns (left out of --collect's
list of differences)."""


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "kwargs" and k != "sources":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def collect_run(run_dir: Path) -> dict:
    """One run folder's settings (differences from the demo defaults) and results."""
    import yaml

    cfg = _flat(yaml.safe_load((run_dir / "config.yaml").read_text()))
    base = _flat(to_dict(load_train_config([])))  # the demo: env=maze applies
    diff = sorted(
        f"{k}={cfg[k]}" for k in cfg if cfg[k] != base.get(k) and not k.startswith(BOOKKEEPING)
    )
    recs = read_metrics(run_dir / "metrics.jsonl")
    evals = [
        (r["step"], r["eval/success"], r["eval/success_lo"], r["eval/success_hi"])
        for r in recs if "eval/success" in r
    ] + [
        (r["step"], r["eval/final_success"], r["eval/final_success_lo"],
         r["eval/final_success_hi"])
        for r in recs if "eval/final_success" in r and cfg["trainer.total_steps"] > 0
    ]  # fmt: skip
    rl = [r for r in recs if "train/success" in r]

    def at(rows: list[dict], key: str) -> float | None:
        vals = [r[key] for r in rows if key in r]
        return sum(vals) / len(vals) if vals else None

    first, last = rl[:5], rl[-5:]
    return {
        "run": run_dir.name, "differences": diff, "rl_steps": len(rl),
        "planned_rl_steps": cfg["trainer.total_steps"],
        "eval_episodes": cfg["eval.num_episodes"], "every_episodes": cfg["eval.every_episodes"],
        "evals": [
            {"step": s, "success": v, "success_lo": lo, "success_hi": hi}
            for s, v, lo, hi in evals
        ],
        "entropy_first5": at(first, "actor/entropy"), "entropy_last5": at(last, "actor/entropy"),
        "groups_mixed_first5": at(first, "rollout/groups_mixed"),
        "groups_mixed_last5": at(last, "rollout/groups_mixed"),
        "finished": (run_dir / "summary.json").exists(),
    }  # fmt: skip


def collect(run_dirs: list[str], out: str | None) -> None:
    rows = [collect_run(Path(d)) for d in run_dirs]

    def curve(r: dict) -> str:
        return ", ".join(f"{e['step']}: {e['success']:.3f}" for e in r["evals"])

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    headers = ["run", "differences from the demo defaults", "RL steps", "held-out success by step",
               "entropy first/last", "mixed groups first/last"]  # fmt: skip
    table = [
        [r["run"], " ".join(r["differences"]) or "(defaults)",
         f"{r['rl_steps']}/{r['planned_rl_steps']}", curve(r),
         f"{num(r['entropy_first5'])}/{num(r['entropy_last5'])}",
         f"{num(r['groups_mixed_first5'])}/{num(r['groups_mixed_last5'])}"]
        for r in rows
    ]  # fmt: skip
    print(format_table(headers, table))
    result = {"benchmark": "demo_sweep_collect", "runs": rows, "machine": machine_info(1)}
    print("wrote", write_json(result, out or str(RESULTS_DIR / "demo_sweep_collect.json"), "x"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES),
                   help="which candidates to run (default: all)")  # fmt: skip
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds per candidate")
    p.add_argument("--eval-episodes", type=int, default=200,
                   help="held-out mazes per evaluation (200 to sweep, 500 to confirm)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra override for every run (repeatable)")  # fmt: skip
    p.add_argument("--work-dir", default="runs/bench-demo-sweep", help="where runs go")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/demo_sweep.json)")
    p.add_argument("--fresh", action="store_true", help="rerun finished runs")
    p.add_argument("--collect", nargs="+", metavar="RUN_DIR", default=None,
                   help="tabulate these run folders instead of running candidates")  # fmt: skip
    args = p.parse_args(argv)
    if args.collect:
        collect(args.collect, args.out)
        return
    t0 = time.perf_counter()
    result = run_grid(sweep_grid(args), fresh=args.fresh, replace=True)
    print("\n" + result["text"] + "\n")
    rows = [candidate_row(r, args) for r in result["runs"] if r["after"] and r["before"]]
    headers = ["candidate", "seed", "before RL", "after RL", "95% CI after", "gain",
               "separated", "RL steps", "s/RL step", "load"]  # fmt: skip
    table = [
        [r["candidate"], r["seed"], r["before"], r["after"],
         f"[{r['after_lo']:.3f}, {r['after_hi']:.3f}]", f"{r['gain']:+.3f}", r["separated"],
         r["rl_steps"], r["s_per_rl_step"], f"{r['loadavg'][0]:.1f}"]
        for r in rows
    ]  # fmt: skip
    print(format_table(headers, table))
    result = {
        "benchmark": "demo_sweep", "setup": vars(args), "runs": rows,
        "paired": result["paired"],
        "total_wall_s": round(time.perf_counter() - t0, 1), "machine": machine_info(1),
    }  # fmt: skip
    print("wrote", write_json(result, args.out or str(RESULTS_DIR / "demo_sweep.json"), "x"))


if __name__ == "__main__":
    main()
