"""Test-time scaling: success rate against search budget for every search algorithm.

What is measured: for each algorithm id and each budget N in (1, 4, 16, 64), one search
per task on `--num-tasks` held-out tasks (the same task seeds for every cell), and the
fraction of tasks where the search reached a state the env reports as `won`. The budget
unit is one episode's worth of env steps: a search with budget N may take N x T env steps
(tree nodes plus rollout steps), T = the env's turn limit, so budget 1 is what a single
episode may spend. Best-of-N and self-consistency draw n = N samples. Searches stop at
the env's win signal (no hidden answer is read; the evaluator sees observations only).
A `flat` row gives the same policy's single-episode success on the same tasks.

Proposer: the policy (`LMProposer`: k distinct actions from 2k samples of one token,
temperature 1: Maze moves are one letter with `short_actions`),
or with `--proposer actions` the env's available_actions. Evaluator: the env's built-in
heuristic (Maze: 1 / (1 + BFS distance A->G on the grid shown)), or `--evaluator none`.

    python bench/search_scaling.py --policy runs/search-demo-sft/checkpoints/sft/policy
    python bench/search_scaling.py --quick          # 4 tasks, budgets 1 4, smoke test

Writes bench/results/search_scaling.json (+ .png plot) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import format_table, machine_info, write_json

from arborl.search import Budget
from arborl.search.builders import make_evaluator, make_problem, make_proposer, search_tasks

BUDGETS = (1, 4, 16, 64)
# Parameters for a 4-action env; best-of-n / self-consistency get n = budget.
PARAMS = {
    "tot-bfs": {"breadth": 2, "beam": 2},
    "tot-dfs": {"breadth": 2, "threshold": 0.0, "max_per_state": 2},
    "dfsdt": {"width": 2, "give_up_value": 0.0},
    "mcts": {"width": 2, "c": 0.2},
    "got": {"program": [["generate", 2], ["aggregate"], ["score"], ["keep_best", 2]]},
    "beam-prm": {"num_beams": 4, "beam_width": 2},
    "best-of-n": {},
    "self-consistency": {},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--policy",
        default="runs/search-demo-sft/checkpoints/sft/policy",
        help="policy checkpoint dir or preset (ignored with --proposer actions)",
    )
    p.add_argument("--env", default="arborl/Maze-v0", help="env id")
    p.add_argument(
        "--env-kwargs",
        default="short_actions=true",
        help="comma-separated k=v env kwargs (YAML values)",
    )
    p.add_argument(
        "--proposer",
        default="policy",
        choices=("policy", "ranked", "actions"),
        help="where candidate actions come from",
    )
    p.add_argument("--evaluator", default="heuristic", help="heuristic, rollout, judge, none")
    p.add_argument("--num-tasks", type=int, default=30, help="held-out tasks per cell")
    p.add_argument(
        "--budgets",
        type=int,
        nargs="+",
        default=list(BUDGETS),
        help="budgets in episodes' worth of env steps",
    )
    p.add_argument("--algos", nargs="+", default=list(PARAMS), help="search ids (in run order)")
    p.add_argument("--split", default="test", help="task split")
    p.add_argument("--seed", type=int, default=0, help="task draw and search seed")
    p.add_argument("--max-new-tokens", type=int, default=1, help="tokens per proposed action")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/...)")
    p.add_argument("--name", default="search_scaling", help="result file stem")
    p.add_argument("--quick", action="store_true", help="4 tasks, budgets 1 4")
    return p.parse_args(argv)


def env_kwargs(spec: str) -> dict:
    import yaml

    out = {}
    for item in filter(None, spec.split(",")):
        k, _, v = item.partition("=")
        out[k] = yaml.safe_load(v)
    return out


def flat_success(backend, tok, agent, args, seeds, kwargs) -> float:
    """The policy alone: one sampled episode per task, on the same task seeds."""
    from arborl.rollout import LMPolicy, RolloutConfig, run_episodes_with_policy

    cfg = RolloutConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=args.seed)
    policy = LMPolicy(backend, tok, cfg, agent)
    res = run_episodes_with_policy(policy, args.env, seeds, cfg, args.split, kwargs)
    return res.stats["success"]


def load_parts(args):
    """(proposer, evaluator, backend, tokenizer, agent config) for the run."""
    from arborl.agent import AgentConfig
    from arborl.agent.settings import load_agent_settings

    backend = tok = None
    agent = AgentConfig(**load_agent_settings(args.policy))
    if args.proposer in ("policy", "ranked"):
        from arborl.generation import make_backend

        backend, tok = make_backend(args.policy, seed=args.seed)
    proposer = make_proposer(
        args.proposer, backend, tok, agent_cfg=agent, max_new_tokens=args.max_new_tokens
    )
    evaluator = make_evaluator(args.evaluator, args.env, backend, tok)
    return proposer, evaluator, backend, tok, agent


def run_cells(args, proposer, evaluator, seeds, kwargs, horizon, on_cell=None) -> list[dict]:
    """One search per task for every (algorithm, budget) cell; `on_cell(cells)` after each
    (the JSON is rewritten as cells finish, so a cut run keeps what it measured)."""
    cells = []
    for algo in args.algos:
        for n in args.budgets:
            params = dict(PARAMS.get(algo, {}))
            if algo in ("best-of-n", "self-consistency"):
                params["n"] = n
            problems = [
                make_problem(
                    args.env, proposer, evaluator, seed=s, split=args.split, env_kwargs=kwargs
                )
                for s in seeds
            ]
            budget = Budget(max_nodes=n * horizon)
            _, s = search_tasks(algo, params, problems, budget, seed=args.seed)
            cells.append({"algo": algo, "budget": n, "max_nodes": n * horizon, **s})
            print(
                f"{algo:17s} budget {n:3d}: success {s['success']:.3f} "
                f"nodes {s['mean_nodes']:.1f} calls {s['mean_model_calls']:.1f} "
                f"({s['wall_s']:.1f}s)",
                flush=True,
            )
            if on_cell is not None:
                on_cell(cells)
    return cells


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.quick:
        args.num_tasks, args.budgets = 4, [1, 4]
    torch.set_num_threads(1)
    from arborl.envs import make
    from arborl.rollout import draw_seeds

    kwargs = env_kwargs(args.env_kwargs)
    horizon = make(args.env, **kwargs).max_turns
    seeds = draw_seeds(args.num_tasks, args.seed)
    proposer, evaluator, backend, tok, agent = load_parts(args)
    start = time.perf_counter()
    flat = flat_success(backend, tok, agent, args, seeds, kwargs) if backend else None

    def record(cells: list[dict]) -> dict:
        table = format_table(
            ["algo", *[f"N={n}" for n in args.budgets]],
            [
                [a, *[c["success"] for c in cells if c["algo"] == a]]
                for a in dict.fromkeys(c["algo"] for c in cells)
            ],
        )
        result = {
            "what": "success rate vs search budget (N x env turn limit env steps per task)",
            "env": args.env,
            "env_kwargs": kwargs,
            "horizon": horizon,
            "policy": args.policy if args.proposer != "actions" else None,
            "proposer": args.proposer,
            "evaluator": args.evaluator,
            "split": args.split,
            "num_tasks": args.num_tasks,
            "seed": args.seed,
            "budgets": args.budgets,
            "max_new_tokens": args.max_new_tokens,
            "params": PARAMS,
            "flat_success": flat,
            "cells": cells,
            "table": table,
            "wall_s": time.perf_counter() - start,
            "machine": machine_info(1),
        }
        write_json(result, args.out, args.name)
        return result

    result = record(run_cells(args, proposer, evaluator, seeds, kwargs, horizon, record))
    print(result["table"])
    if flat is not None:
        print(f"flat policy (one episode per task): {flat:.3f}")
    path = write_json(result, args.out, args.name)
    plot(result, path.with_suffix(".png"))
    print(f"wrote {path.name} and {path.with_suffix('.png').name} in {path.parent.name}/")
    return result


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for algo in dict.fromkeys(c["algo"] for c in result["cells"]):
        pts = [(c["budget"], c["success"]) for c in result["cells"] if c["algo"] == algo]
        ax.plot(*zip(*pts), marker="o", label=algo)
    if result["flat_success"] is not None:
        ax.axhline(result["flat_success"], color="k", ls="--", lw=1, label="flat policy")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget N (episodes' worth of env steps)")
    ax.set_ylabel(f"success ({result['num_tasks']} tasks)")
    ax.set_title(f"search scaling on {result['env']} ({result['proposer']} proposer)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
