"""Learning on the env packages: SFT from oracle demos, then GRPO and GiGPO (issue 17, req. 6).

Per env (TextWorld-Express Coin Collector, BabyAI GoToLocal), one `arborl sft` run is the
shared warm start; GRPO and GiGPO then start from its policy with the same seeds, so the
"before RL" evaluation of both is the SFT policy on the same held-out tasks, and the
paired gain of each (`summary.json`'s `gain`) is RL's own effect. Usage:

    python bench/pkg_learning.py --work-dir runs/pkg             # run all six, one at a time
    python bench/pkg_learning.py --collect runs/pkg --out x.json  # tabulate finished runs

The packages must be registered and set up first (`arborl env add envpkgs/twx`,
`arborl env setup twx/CoinCollector-v0`, the same for `envpkgs/babyai`). The commands it
runs are printed before each run; the budgets are small because a CPU run of the 1M
char model over 160-320-character prompts costs ~1 s per SFT step and ~30 s per RL step
of 16 episodes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS_DIR, format_table, machine_info, write_json

ENVS = ("twx_coin", "babyai")
ALGOS = ("grpo", "gigpo")
COMMON = ["rollout.num_tasks=4", "rollout.group_size=4", "eval.num_episodes=32",
          "eval.every=0", "trainer.progress=false", "trainer.report=false"]  # fmt: skip
SFT = ["sft.num_demos=24", "sft.steps=200", "sft.batch_size=16", "sft.lr=3e-3"]
RL = ["sft.enabled=false", "algo.lr=3e-4", "trainer.total_steps=8", "trainer.save_every=100"]


def commands(work_dir: str) -> list[list[str]]:
    """The `arborl` command lines, in order: per env the SFT run, then one run per algo."""
    out = []
    for env in ENVS:
        common = [*COMMON, f"trainer.output_dir={work_dir}"]
        out.append(["sft", f"env={env}", *SFT, *common, f"trainer.name={env}_sft"])
        policy = f"{work_dir}/{env}_sft/checkpoints/sft/policy"
        for algo in ALGOS:
            out.append(["train", f"env={env}", f"algo={algo}", f"model.name_or_path={policy}",
                        *RL, *common, f"trainer.name={env}_{algo}"])  # fmt: skip
    return out


def run_all(work_dir: str) -> None:
    for args in commands(work_dir):
        print("$ arborl " + shlex.join(args), flush=True)
        subprocess.run([sys.executable, "-m", "arborl.cli.main", *args], check=True)


def _interval(d: dict) -> dict:
    keys = ("success", "success_lo", "success_hi", "episodes")
    return {**{k: d[k] for k in keys}, "invalid_action_rate": d.get("invalid_action_rate")}


def collect_env(work_dir: Path, env: str) -> list[dict]:
    """The rows of one env: the SFT run (held-out success after SFT) and each RL run."""
    rows = []
    sft_dir = work_dir / f"{env}_sft"
    if (sft_dir / "metrics.jsonl").exists():
        # From the per-step records: a run whose evaluation failed still logged its SFT.
        recs = [json.loads(line) for line in open(sft_dir / "metrics.jsonl")]
        losses = [r["sft/loss"] for r in recs if "sft/loss" in r]
        done = sft_dir / "summary.json"
        s = json.loads(done.read_text()) if done.exists() else None
        rows.append({"run": sft_dir.name, "env": env, "algo": "sft", "sft_steps": len(losses),
                     "sft_first_loss": losses[0], "sft_loss": losses[-1],
                     "demos_won": s["sft"].get("sft/demos_won") if s else None,
                     "demos": s["sft"].get("sft/demos") if s else None,
                     "after": _interval(s["after"]) if s else None,
                     "wall_s": _wall(sft_dir)})  # fmt: skip
    for algo in ALGOS:
        d = work_dir / f"{env}_{algo}"
        if not (d / "summary.json").exists():
            continue
        s = json.loads((d / "summary.json").read_text())
        rows.append({"run": d.name, "env": env, "algo": algo, "rl_steps": s["steps"],
                     "env_steps": s["env_steps"], "before": _interval(s["before"]),
                     "after": _interval(s["after"]), "gain": s["gain"],
                     "wall_s": s["wall_s"]})  # fmt: skip
    return rows


def _wall(run_dir: Path) -> float | None:
    """Seconds from the run's first to its last metrics record (arborl sft has no wall_s)."""
    times = [json.loads(line).get("time_s") for line in open(run_dir / "metrics.jsonl")]
    times = [t for t in times if t is not None]
    return max(times) if times else None


def collect(work_dir: str, out: str | None) -> None:
    rows = [r for env in ENVS for r in collect_env(Path(work_dir), env)]

    def ci(d: dict) -> str:
        return f"{d['success']:.3f} [{d['success_lo']:.3f}, {d['success_hi']:.3f}]"

    headers = ["run", "RL steps", "before RL", "after", "paired gain [95% CI]", "wall s"]
    table = []
    for r in rows:
        g = r.get("gain")
        gain = f"{g['gain']:+.3f} [{g['gain_lo']:+.3f}, {g['gain_hi']:+.3f}]" if g else "-"
        before = ci(r["before"]) if "before" in r else "-"
        after = ci(r["after"]) if r["after"] else "-"
        table.append([r["run"], r.get("rl_steps", "-"), before, after, gain,
                      r["wall_s"]])  # fmt: skip
    print(format_table(headers, table))
    result = {"benchmark": "pkg_learning", "commands": [shlex.join(c) for c in
              commands("runs/pkg")], "runs": rows, "machine": machine_info(1)}  # fmt: skip
    print("wrote", write_json(result, out or str(RESULTS_DIR / "pkg_learning.json"), "x"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", default="runs/pkg", help="where the six runs go")
    p.add_argument("--collect", metavar="WORK_DIR", default=None,
                   help="tabulate the runs in this folder instead of running them")  # fmt: skip
    p.add_argument(
        "--out", default=None, help="JSON path (default bench/results/pkg_learning.json)"
    )
    args = p.parse_args(argv)
    if args.collect:
        collect(args.collect, args.out)
        return
    t0 = time.perf_counter()
    run_all(args.work_dir)
    print(f"all runs: {time.perf_counter() - t0:.0f} s")
    collect(args.work_dir, args.out)


if __name__ == "__main__":
    main()
