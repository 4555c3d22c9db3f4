"""The demo recipe sweep (issue 16, requirement 4): `arborl train` on its defaults (tiny-1m,
Maze, SFT then GRPO) against candidate changes, one at a time, each from its own SFT start.

Every candidate is a list of config overrides on top of the defaults; each run is scored
by its held-out success before RL (its own SFT start) and after RL on the same held-out
mazes (`eval.seed` fixed), so the RL gain is a paired comparison. Sweep with fewer eval
episodes (default 200), then confirm the winner at the demo's 500:

    python bench/demo_sweep.py                               # every candidate, 200 episodes
    python bench/demo_sweep.py --candidates default lr3e-4 --seeds 0 1
    python bench/demo_sweep.py --candidates lr3e-4 --eval-episodes 500   # confirm

Wall time on a loaded machine says little: the table reports RL steps and seconds per RL
step; judge a recipe's quiet wall time as RL steps x the quiet per-step time of the
default (measured on an idle machine). Finished runs are reused (`--fresh` reruns).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from common import RESULTS_DIR, format_table, machine_info, write_json

from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer

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
}
"""Candidate name -> overrides on top of the demo defaults (one change each; combine the
winners in a new entry)."""


def run_candidate(name: str, seed: int, args) -> dict:
    run_dir = Path(args.work_dir) / f"{name}-s{seed}-e{args.eval_episodes}"
    overrides = [
        *CANDIDATES[name], f"trainer.seed={seed}", f"sft.seed={seed}", f"model.seed={seed}",
        f"eval.num_episodes={args.eval_episodes}", "eval.every=0", "trainer.save_every=0",
        "trainer.save_trajectories=0", "trainer.plots=false", "trainer.progress=false",
        f"trainer.output_dir={run_dir.parent}", f"trainer.name={run_dir.name}", *args.set,
    ]  # fmt: skip
    marker = run_dir / "sweep_overrides.json"
    if not args.fresh and marker.exists() and json.loads(marker.read_text()) == overrides:
        summary = json.loads((run_dir / "summary.json").read_text())
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        summary = RLTrainer(load_train_config(overrides)).fit()
        marker.write_text(json.dumps(overrides))
    before, after = summary["before"], summary["after"]
    return {
        "candidate": name, "seed": seed, "overrides": CANDIDATES[name],
        "before": before["success"], "before_lo": before["success_lo"],
        "before_hi": before["success_hi"], "after": after["success"],
        "after_lo": after["success_lo"], "after_hi": after["success_hi"],
        "gain": after["success"] - before["success"],
        "separated": after["success_lo"] > before["success_hi"], "rl_steps": summary["steps"],
        "wall_s": summary["wall_s"], "s_per_rl_step": summary["wall_s"] / max(summary["steps"], 1),
        "loadavg": list(os.getloadavg()), "eval_episodes": args.eval_episodes,
    }  # fmt: skip


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
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for name in args.candidates:
        for seed in args.seeds:
            rows.append(run_candidate(name, seed, args))
            r = rows[-1]
            print(f"[{name} s{seed}] {r['before']:.3f} -> {r['after']:.3f} "
                  f"({r['rl_steps']} RL steps, {r['wall_s']} s)", flush=True)  # fmt: skip
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
        "total_wall_s": round(time.perf_counter() - t0, 1), "machine": machine_info(1),
    }  # fmt: skip
    print("wrote", write_json(result, args.out or str(RESULTS_DIR / "demo_sweep.json"), "x"))


if __name__ == "__main__":
    main()
