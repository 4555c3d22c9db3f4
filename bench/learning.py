"""Learning benchmark: PPO, GRPO and GiGPO from the same SFT start at the same env-step budget.

Per env, one `arborl compare` grid (`arborl.grid.compare`): the algorithms are its arms,
and for every seed one SFT warm start (`arborl sft`, oracle demos of the train split) is
the policy each algorithm of that seed starts RL from (`sft.enabled=false`; PPO builds
its critic from the same directory), until `trainer.max_env_steps` environment steps were
collected. All runs of an env are evaluated on the same held-out tasks with the same
sampling seed (`eval.seed` fixed), so "after SFT" is identical for the algorithms of a
seed and every gain and difference is paired. Seeds vary `sft.seed`, `model.seed` and
`trainer.seed` together (demo tasks, batch order, critic init, rollout tasks and
sampling). The pairing, the intervals over seeds and the resuming are the library's; this
script picks each env's settings, prints the tables and writes the bench JSON and a plot.

The budget is checked before each RL step, so a run stops at the first step that reaches
it: the env steps actually used exceed the budget by less than one rollout batch and are
reported per run. Runs live in `<work-dir>/<env>/<algo>-s<seed>/` (`sft-s<seed>/` for the
starts); a later call collects the finished ones and resumes half-finished ones, so an
interrupted benchmark continues where it stopped; a changed setting reruns (replaces) only
the runs it touches, and `--fresh` retrains them all.

    python bench/learning.py                          # the full table (~80 min on 2 cores)
    python bench/learning.py --envs maze --seeds 0 --algos grpo gigpo
    python bench/learning.py --quick                  # toy size, what tests/bench runs
    # issue 16's 5-seed tables in docs/BENCHMARKS.md (Maze+FrozenLake ~1.5 h, Sokoban ~1.3 h
    # on 2 cores; parallel calls over disjoint seeds with one --work-dir, then these calls
    # collect every finished run):
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
import statistics
import time
from pathlib import Path

import torch
import transformers
from common import RESULTS_DIR, machine_info, write_json

from arborl.config import from_dict
from arborl.grid.compare import CompareConfig, run_grid

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


def common_overrides(env: str, args: argparse.Namespace) -> list[str]:
    """Settings every SFT and RL run of `env` shares: same eval tasks, one thread."""
    sets = [
        *ENV_SETS[env],
        "trainer.num_threads=1",
        "trainer.progress=false",
        f"eval.num_episodes={args.eval_episodes}",
        f"eval.seed={args.eval_seed}",
        "eval.every=0",
    ]
    return sets + (QUICK_SETS if args.quick else []) + list(args.set)


def env_grid(env: str, args: argparse.Namespace, budget: int, demos: int, steps: int):
    """The `arborl compare` grid of `env`: every algorithm on every seed, one SFT start per
    seed, RL until `budget` env steps."""
    rl = [
        f"trainer.max_env_steps={budget}",
        f"trainer.total_steps={budget}",  # an upper bound: max_env_steps stops the run
        "trainer.keep_checkpoints=1",
        "trainer.save_trajectories=0",
        "trainer.plots=false",
    ]
    grid = {
        "arms": {algo: [f"algo={algo}"] for algo in args.algos},
        "seeds": args.seeds,
        "base": common_overrides(env, args) + rl,
        "sft": [f"sft.num_demos={demos}", f"sft.steps={steps}"],
        "out": str(Path(args.work_dir) / env),
        "pairs": [list(p) for p in PAIRS if set(p) <= set(args.algos)],
    }
    return from_dict(CompareConfig, grid, prefix="bench.")


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


PAIRS = (("gigpo", "grpo"), ("grpo", "ppo"), ("gigpo", "ppo"))
"""Algorithm pairs compared per seed (first minus second): GiGPO's claim, then GRPO and
GiGPO against PPO."""


def bench_rows(env: str, result: dict, work_dir: str) -> dict[str, list[dict]]:
    """The grid's comparison as the bench JSON's lists, each row tagged with its env
    ("reused": the run was collected, not trained by this call) and no machine paths."""
    status = {c["run"]: c["status"] for c in result["cells"]}
    runs = []
    for r in result["runs"]:
        row = {k: v for k, v in r.items() if k not in ("path", "eval")}
        row.update(start=shown_path(r["start"], work_dir), reused=status[r["run"]] == "done")
        runs.append({"env": env, **row})
    sfts = [{"env": env, **s, "reused": status[s["run"]] == "done"} for s in result["starts"]]
    return {
        "sft": sfts,
        "runs": runs,
        "summary": [{"env": env, **a} for a in result["arms"]],
        "paired": [{"env": env, **d} for d in result["paired"]],
    }


def plot(runs: list[dict], sfts: list[dict], path: Path) -> Path:
    """Bars: mean held-out success per env and algo (plus the SFT start); dots: seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in runs))
    algos = list(dict.fromkeys(r["arm"] for r in runs))
    labels = ["SFT", *algos]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(2.2 + 2.4 * len(envs), 3.6))
    for j, label in enumerate(labels):
        xs, means = [], []
        for i, env in enumerate(envs):
            if label == "SFT":
                vals = [s["success"] for s in sfts if s["env"] == env]
            else:
                vals = [r["after"]["success"] for r in runs
                        if r["env"] == env and r["arm"] == label and r["after"]]  # fmt: skip
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
    grids = [env_grid(env, args, budgets[env], demos[env], sft_steps[env]) for env in args.envs]
    tables: dict[str, list[dict]] = {"sft": [], "runs": [], "summary": [], "paired": []}
    for env, grid in zip(args.envs, grids):
        result = run_grid(grid, fresh=args.fresh, replace=True)
        print(f"\n## {env}\n\n{result['text']}", flush=True)
        for key, rows in bench_rows(env, result, args.work_dir).items():
            tables[key] += rows
    out = Path(args.out)
    png = plot(tables["runs"], tables["sft"], out.with_suffix(".png"))
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
        **tables,
        "total_wall_s": round(time.perf_counter() - t0, 1), "machine": machine,
    }  # fmt: skip
    print(f"wrote {write_json(result, args.out, 'learning')} and {png}")


if __name__ == "__main__":
    main()
