"""Learning benchmark: PPO, GRPO and GiGPO from the same SFT start at the same env-step budget.

For every (env, seed) one SFT warm start is trained (`arborl sft`, oracle demos of the train
split), and each algorithm then runs `arborl train` from that policy (`sft.enabled=false`;
PPO builds its critic from the same directory) until `trainer.max_env_steps` environment
steps were collected. All runs of an env are evaluated on the same held-out tasks
(`eval.seed` fixed), so "after SFT" is identical for the three algorithms of a seed and
every gain is a paired comparison on the same tasks. Seeds vary `sft.seed`, `model.seed`
and `trainer.seed` together (demo tasks, batch order, critic init, rollout tasks and
sampling).

The budget is checked before each RL step, so a run stops at the first step that reaches
it: the env steps actually used exceed the budget by less than one rollout batch and are
reported per run. Finished runs are reused when the work dir already holds them with the
same settings (`--fresh` retrains), so an interrupted benchmark resumes where it stopped.

    python bench/learning.py                          # the full table (~80 min on 2 cores)
    python bench/learning.py --envs maze --seeds 0 --algos grpo gigpo
    python bench/learning.py --quick                  # toy size, what tests/bench runs
    # issue 16's 5-seed tables in docs/BENCHMARKS.md (Maze+FrozenLake ~1.5 h, Sokoban ~1.3 h
    # on 2 cores; parallel calls over disjoint seeds with one --work-dir, then these calls
    # reuse every finished run):
    python bench/learning.py --envs maze --seeds 0 1 2 3 4 --env-steps 120000
    python bench/learning.py --envs frozenlake-slippery --seeds 0 1 2 3 4 --env-steps 60000
    python bench/learning.py --envs sokoban --seeds 0 1 2 3 4 --env-steps 60000
    # BabyAI GoToLocal, a real benchmark package (not run: prompts of ~320 characters make
    # an SFT step ~4 s and an RL step minutes on 2 cores; docs/BENCHMARKS.md):
    arborl env add envpkgs/babyai && arborl env setup babyai/GoToLocal-v0
    python bench/learning.py --envs babyai --seeds 0 1 2 3 4 --env-steps 60000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from common import RESULTS_DIR, format_table, machine_info, write_json

from arborl.cli.main import main as arborl_main
from arborl.train.config import load_train_config
from arborl.train.rl import RLTrainer
from arborl.train.runlog import read_metrics

ALGOS = ("ppo", "grpo", "gigpo")
ENV_SETS: dict[str, list[str]] = {
    "maze": ["env=maze"],
    "sokoban": ["env=sokoban"],
    # a long-horizon env without a package: a move slips sideways 2 times in 3, so states
    # recur across a group's episodes
    "frozenlake-slippery": ["env=frozenlake", "env.kwargs={slippery: true}"],
    # a real benchmark package (envpkgs/babyai, up to 64 turns; its venv runs the envs, so
    # `arborl env add envpkgs/babyai && arborl env setup babyai/GoToLocal-v0` first)
    "babyai": ["env=babyai"],
}
"""Bench env name -> the config overrides that select it."""
ENVS = tuple(ENV_SETS)
DEFAULT_ENVS = ("maze", "sokoban")
# Per-env defaults, chosen by measurement (docs/BENCHMARKS.md). Sokoban needs more demos and
# SFT steps than Maze (300 demos / 500 steps give tiny-1m ~0.34 held-out success, so RL has
# mixed groups to learn from). The env-step budget is ~20 RL steps on Maze and ~4 on Sokoban
# (longer episodes; a Sokoban PPO step cost ~2 min on 2 cores before PPO's critic dedup, ~45 s
# after, at load 4). A first cut at 3,000 env
# steps (1-2 RL steps) showed no learning at all: raise the budgets on a bigger machine.
DEFAULTS: dict[str, dict[str, int]] = {
    "sft_demos": {"maze": 100, "sokoban": 300, "frozenlake-slippery": 100},
    "sft_steps": {"maze": 200, "sokoban": 500, "frozenlake-slippery": 200},
    "env_steps": {"maze": 30000, "sokoban": 10000, "frozenlake-slippery": 30000},
}
QUICK_SETS = [
    "model.name_or_path=tiny-0.1m",
    "rollout.num_tasks=2",
    "rollout.group_size=2",
    "rollout.max_turns=4",
]


def per_env(values: list[str] | None, name: str, envs: list[str]) -> dict[str, int]:
    """Parse `N` (every env) or `env=N` entries on top of the defaults of `name`."""
    out = {env: DEFAULTS[name].get(env, DEFAULTS[name]["maze"]) for env in envs}
    for v in values or []:
        env, _, num = v.rpartition("=")
        if not num.isdigit() or (env and env not in envs):
            raise SystemExit(
                f"--{name.replace('_', '-')} {v!r}: expected N or ENV=N with ENV in {envs}"
            )
        for e in [env] if env else envs:
            out[e] = int(num)
    return out


def common_overrides(env: str, seed: int, args: argparse.Namespace) -> list[str]:
    """Settings every SFT and RL run of (env, seed) shares: same eval tasks, one thread."""
    sets = [
        *ENV_SETS[env],
        "trainer.num_threads=1",
        "trainer.progress=false",
        f"eval.num_episodes={args.eval_episodes}",
        f"eval.seed={args.eval_seed}",
        "eval.every=0",
        f"model.seed={seed}",
        f"sft.seed={seed}",
        f"trainer.seed={seed}",
    ]
    return sets + (QUICK_SETS if args.quick else []) + list(args.set)


def cached(run_dir: Path, overrides: list[str], fresh: bool) -> dict | None:
    """The summary of a finished run with exactly these overrides, else None (and a clean dir)."""
    marker = run_dir / "bench_overrides.json"
    summary = run_dir / "summary.json"
    if not fresh and marker.exists() and summary.exists():
        if json.loads(marker.read_text()) == overrides:
            return json.loads(summary.read_text())
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a stale or half-finished run of this benchmark's own naming
    return None


def shown_path(path: str | Path, work_dir: str | Path | None = None) -> str:
    """`path` relative to the repo when inside it, else as `<work-dir>/...` when inside
    `work_dir`, so that results name no machine's folders."""
    path = Path(path).resolve()
    repo = Path(__file__).resolve().parents[1]
    if path.is_relative_to(repo):
        return str(path.relative_to(repo))
    if work_dir is not None and path.is_relative_to(Path(work_dir).resolve()):
        rel = path.relative_to(Path(work_dir).resolve())
        return "<work-dir>" if rel == Path() else f"<work-dir>/{rel}"
    return str(path)


def run_sft(env: str, seed: int, args, demos: int, steps: int) -> dict[str, Any]:
    """One SFT warm start through `arborl sft`; returns its held-out success and policy dir."""
    run_dir = Path(args.work_dir) / f"{env}-sft-s{seed}"
    overrides = common_overrides(env, seed, args) + [f"sft.num_demos={demos}", f"sft.steps={steps}"]
    t0 = time.perf_counter()
    summary = cached(run_dir, overrides, args.fresh)
    reused = summary is not None
    if summary is None:
        code = arborl_main(["sft", *overrides, "--out", str(run_dir)])
        if code != 0:
            raise SystemExit(f"arborl sft failed (exit {code}) for {env} seed {seed}: {overrides}")
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["wall_s"] = round(time.perf_counter() - t0, 1)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        (run_dir / "bench_overrides.json").write_text(json.dumps(overrides))
    after = summary["after"]
    return {
        "env": env, "seed": seed, "demos": demos, "steps": steps,
        "final_loss": summary["sft"].get("sft/loss"), "success": after["success"],
        "success_lo": after["success_lo"], "success_hi": after["success_hi"],
        "wall_s": summary.get("wall_s"), "reused": reused,
        "policy": str(run_dir / "checkpoints" / "sft" / "policy"),
    }  # fmt: skip


def run_rl(env: str, algo: str, seed: int, args, policy: str, budget: int) -> dict[str, Any]:
    """One RL run from the SFT policy until `budget` env steps; before/after success."""
    run_dir = Path(args.work_dir) / f"{env}-{algo}-s{seed}"
    overrides = common_overrides(env, seed, args) + [
        f"algo={algo}",
        f"model.name_or_path={policy}",
        "sft.enabled=false",
        f"trainer.max_env_steps={budget}",
        f"trainer.total_steps={budget}",  # an upper bound: max_env_steps stops the run
        "trainer.save_every=0",
        "trainer.keep_checkpoints=1",
        "trainer.save_trajectories=0",
        "trainer.plots=false",
        f"trainer.output_dir={run_dir.parent}",
        f"trainer.name={run_dir.name}",
    ]
    summary = cached(run_dir, overrides, args.fresh)
    reused = summary is not None
    if summary is None:
        summary = RLTrainer(load_train_config(overrides)).fit()
        (run_dir / "bench_overrides.json").write_text(json.dumps(overrides))
    before, after = summary["before"], summary["after"]
    return {
        **step_means(run_dir / "metrics.jsonl"),
        **train_phases(run_dir / "metrics.jsonl"),
        "env": env, "algo": algo, "seed": seed,
        "sft_success": before["success"], "success": after["success"],
        "success_lo": after["success_lo"], "success_hi": after["success_hi"],
        "gain": after["success"] - before["success"], "env_steps": summary["env_steps"],
        "rl_steps": summary["steps"], "wall_s": summary["wall_s"], "reused": reused,
        "eval_episodes": int(after["episodes"]),
    }  # fmt: skip


STEP_KEYS = {
    "shared_anchor_frac": "gigpo/shared_anchor_frac",
    "mean_anchor_group_size": "gigpo/mean_anchor_group_size",
    "groups_mixed": "rollout/groups_mixed",
    "groups_with_signal": "adv/groups_with_signal",
}
"""Per-step diagnostics averaged over a run's RL steps (the anchor statistics exist only
for gigpo runs; they say whether states recur within a group, which GiGPO needs)."""


def step_means(metrics_path: Path) -> dict[str, float]:
    """Mean of each `STEP_KEYS` diagnostic over the RL steps of a run's metrics.jsonl."""
    recs = [r for r in read_metrics(metrics_path) if "train/success" in r]
    out = {}
    for name, key in STEP_KEYS.items():
        vals = [r[key] for r in recs if r.get(key) is not None]
        if vals:
            out[name] = statistics.mean(vals)
    return out


PHASES = ("first10", "mid10", "last10")
"""Windows of RL steps whose mean rollout success (`train/success`) shows the trend of a
run: its first 10 steps, the 10 around its middle, its last 10."""


def train_phases(metrics_path: Path) -> dict[str, float]:
    """Mean `train/success` of each `PHASES` window of a run's RL steps."""
    vals = [r["train/success"] for r in read_metrics(metrics_path) if "train/success" in r]
    if not vals:
        return {}
    mid = max(0, len(vals) // 2 - 5)
    windows = {"first10": vals[:10], "mid10": vals[mid : mid + 10], "last10": vals[-10:]}
    return {f"train_success_{k}": statistics.mean(v) for k, v in windows.items()}


PHASE_KEYS = tuple(f"train_success_{k}" for k in PHASES)

PAIRS = (("gigpo", "grpo"), ("grpo", "ppo"), ("gigpo", "ppo"))
"""Algorithm pairs compared per seed (first minus second): GiGPO's claim, then GRPO and
GiGPO against PPO."""


def paired_differences(runs: list[dict]) -> list[dict]:
    """Per env and `PAIRS` entry: held-out success of a minus b on each seed both ran (the
    same SFT start and held-out tasks), their mean and sd, and on how many seeds a led."""
    out = []
    for env in dict.fromkeys(r["env"] for r in runs):
        by = {(r["algo"], r["seed"]): r["success"] for r in runs if r["env"] == env}
        for a, b in PAIRS:
            seeds = sorted({s for (x, s) in by if x == a} & {s for (x, s) in by if x == b})
            if not seeds:
                continue
            diffs = [by[(a, s)] - by[(b, s)] for s in seeds]
            out.append({
                "env": env, "a": a, "b": b, "seeds": seeds, "diffs": diffs,
                "mean": statistics.mean(diffs),
                "sd": statistics.stdev(diffs) if len(diffs) > 1 else float("nan"),
                "seeds_ahead": sum(d > 0 for d in diffs),
            })  # fmt: skip
    return out


def summarize(runs: list[dict]) -> list[dict]:
    """Per (env, algo): mean success after SFT and after RL, and the mean gain over seeds."""
    out = []
    for env in dict.fromkeys(r["env"] for r in runs):
        for algo in dict.fromkeys(r["algo"] for r in runs if r["env"] == env):
            rs = [r for r in runs if r["env"] == env and r["algo"] == algo]
            gains = [r["gain"] for r in rs]
            out.append({
                "env": env, "algo": algo, "seeds": [r["seed"] for r in rs],
                "mean_sft_success": statistics.mean(r["sft_success"] for r in rs),
                "mean_success": statistics.mean(r["success"] for r in rs),
                "mean_gain": statistics.mean(gains),
                "sd_gain": statistics.stdev(gains) if len(gains) > 1 else float("nan"),
                "gains": gains, "mean_env_steps": statistics.mean(r["env_steps"] for r in rs),
                **{k: statistics.mean(r[k] for r in rs) for k in STEP_KEYS if k in rs[0]},
                **{k: statistics.mean(r[k] for r in rs) for k in PHASE_KEYS if k in rs[0]},
            })  # fmt: skip
    return out


def plot(runs: list[dict], sfts: list[dict], path: Path) -> Path:
    """Bars: mean held-out success per env and algo (plus the SFT start); dots: seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in runs))
    algos = list(dict.fromkeys(r["algo"] for r in runs))
    labels = ["SFT", *algos]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(2.2 + 2.4 * len(envs), 3.6))
    for j, label in enumerate(labels):
        xs, means = [], []
        for i, env in enumerate(envs):
            if label == "SFT":
                vals = [s["success"] for s in sfts if s["env"] == env]
            else:
                vals = [r["success"] for r in runs if r["env"] == env and r["algo"] == label]
            x = i - 0.4 + width * (j + 0.5)
            xs.append(x)
            means.append(statistics.mean(vals) if vals else float("nan"))
            ax.scatter([x] * len(vals), vals, color="black", s=10, zorder=3)
        ax.bar(xs, means, width * 0.9, label=label, color=f"C{j if j else 7}")
    ax.set_xticks(range(len(envs)), envs)
    ax.set_ylabel("held-out success (sampled, T=1)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, ncols=len(labels), loc="upper right")
    ax.set_title("after SFT and after RL at equal env steps (bars: mean, dots: seeds)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--envs", nargs="+", default=list(DEFAULT_ENVS), choices=ENVS,
        help="envs to run (default maze sokoban)",
    )  # fmt: skip
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS, help="algorithms")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds per env/algo")
    p.add_argument(
        "--env-steps", nargs="+", default=None,
        help="RL budget in env steps: N for every env or ENV=N (default maze=30000 "
        "sokoban=10000 frozenlake-slippery=30000)",
    )  # fmt: skip
    p.add_argument(
        "--sft-demos", nargs="+", default=None,
        help="oracle demo episodes for SFT: N or ENV=N (default maze=100 sokoban=300 "
        "frozenlake-slippery=100)",
    )  # fmt: skip
    p.add_argument(
        "--sft-steps", nargs="+", default=None,
        help="SFT optimizer steps: N or ENV=N (default maze=200 sokoban=500 "
        "frozenlake-slippery=200)",
    )  # fmt: skip
    p.add_argument("--eval-episodes", type=int, default=200, help="held-out tasks per evaluation")
    p.add_argument("--eval-seed", type=int, default=12345, help="seed of the held-out tasks")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="extra config override for every SFT and RL run (repeatable), e.g. algo.lr=1e-4",
    )  # fmt: skip
    p.add_argument(
        "--work-dir", default=None,
        help="where run folders go (default runs/bench-learning, git-ignored)",
    )  # fmt: skip
    p.add_argument("--out", default=None, help="JSON path (default bench/results/learning.json)")
    p.add_argument("--fresh", action="store_true", help="retrain runs the work dir already has")
    p.add_argument(
        "--quick", action="store_true",
        help="toy size (tiny-0.1m, 2x2 rollouts, 4-turn episodes, 1 seed): checks the script",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.quick:
        args.seeds = args.seeds if args.seeds != [0, 1, 2] else [0]
        args.eval_episodes = min(args.eval_episodes, 8)
        for name, default in (("env_steps", "16"), ("sft_demos", "4"), ("sft_steps", "4")):
            if getattr(args, name) is None:
                setattr(args, name, [default])
    name = "learning_quick" if args.quick else "learning"
    repo_runs = Path(__file__).resolve().parents[1] / "runs"
    args.work_dir = str(
        Path(args.work_dir or repo_runs / f"bench-{name.replace('_', '-')}").resolve()
    )
    args.out = args.out or str(RESULTS_DIR / f"{name}.json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()  # one load/save bar per run is noise
    budgets = per_env(args.env_steps, "env_steps", args.envs)
    demos = per_env(args.sft_demos, "sft_demos", args.envs)
    sft_steps = per_env(args.sft_steps, "sft_steps", args.envs)
    load_before = machine_info(1)["loadavg"]
    t0 = time.perf_counter()
    sfts, runs = [], []
    for env in args.envs:
        for seed in args.seeds:
            sft = run_sft(env, seed, args, demos[env], sft_steps[env])
            sfts.append(sft)
            for algo in args.algos:
                runs.append(run_rl(env, algo, seed, args, sft["policy"], budgets[env]))
                r = runs[-1]
                print(f"[{env} {algo} s{seed}] {r['sft_success']:.3f} -> {r['success']:.3f} "
                      f"({r['env_steps']} env steps, {r['wall_s']} s)", flush=True)  # fmt: skip
    summary = summarize(runs)
    headers = ["env", "algo", "seed", "after SFT", "after RL", "95% CI", "env steps", "wall s"]
    rows = [
        [r["env"], r["algo"], r["seed"], r["sft_success"], r["success"],
         f"[{r['success_lo']:.3f}, {r['success_hi']:.3f}]", r["env_steps"], round(r["wall_s"])]
        for r in runs
    ]  # fmt: skip
    print("\n" + format_table(headers, rows))
    rows = [
        [s["env"], s["algo"], len(s["seeds"]), s["mean_sft_success"], s["mean_success"],
         f"{s['mean_gain']:+.3f}", " ".join(f"{g:+.3f}" for g in s["gains"])]
        for s in summary
    ]  # fmt: skip
    for row, s in zip(rows, summary):  # gigpo rows only: how often states recur in a group
        row.append(f"{s['shared_anchor_frac']:.2f}" if "shared_anchor_frac" in s else "-")
    headers = ["env", "algo", "seeds", "mean after SFT", "mean after RL", "mean gain", "gain/seed"]
    headers.append("shared anchors")
    print("\n" + format_table(headers, rows))
    pairs = paired_differences(runs)
    rows = [
        [d["env"], f"{d['a']} - {d['b']}", " ".join(f"{x:+.3f}" for x in d["diffs"]),
         f"{d['mean']:+.3f}", f"{d['seeds_ahead']}/{len(d['seeds'])}"]
        for d in pairs
    ]  # fmt: skip
    print("\n" + format_table(["env", "comparison", "per seed", "mean", "seeds ahead"], rows))
    rows = [[s["env"], s["algo"], *(s.get(k, float("nan")) for k in PHASE_KEYS)] for s in summary]
    print("\n" + format_table(["env", "algo", "train success, first 10 steps", "middle 10",
                                "last 10"], rows))  # fmt: skip
    out = Path(args.out)
    png = plot(runs, sfts, out.with_suffix(".png"))
    machine = machine_info(1)
    machine["loadavg_before"] = load_before
    result = {
        "benchmark": "learning",
        "quick": args.quick,
        "setup": {
            "envs": args.envs, "algos": args.algos, "seeds": args.seeds,
            "env_steps_budget": budgets, "sft_demos": demos, "sft_steps": sft_steps,
            "eval_episodes": args.eval_episodes, "eval_seed": args.eval_seed,
            "extra_overrides": args.set, "work_dir": shown_path(args.work_dir, args.work_dir),
        },
        "sft": [{**s, "policy": shown_path(s["policy"], args.work_dir)} for s in sfts], "runs": runs, "summary": summary,
        "paired": pairs,
        "total_wall_s": round(time.perf_counter() - t0, 1), "machine": machine,
    }  # fmt: skip
    print(f"wrote {write_json(result, args.out, 'learning')} and {png}")


if __name__ == "__main__":
    main()
