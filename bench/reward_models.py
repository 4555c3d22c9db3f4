"""Reward-model benchmark on Maze (one-letter moves): ORM accuracy, PRM-guided search, and
RL with an RM reward, all from the agent's own trajectories.

1. A quick SFT policy (`arborl sft`, tiny-1m on oracle demos) plays train-split and
   test-split tasks, several episodes per task. Preference pairs come from train tasks
   only; an outcome RM (Bradley-Terry) is trained on them and scored on pairs of the
   unseen test tasks (pairwise accuracy, target >= 0.85).
2. Monte-Carlo step labels (the SFT policy rolled out K times after each step) train a
   process RM; per-step accuracy is measured on test-task labels. The PRM's training
   trajectories are one episode each of many train tasks (`prm_task_seeds` x
   `prm_tasks_per_seed`): with several episodes of few tasks, a small PRM learns which
   mazes are hard instead of which steps are. Both RMs start from the SFT policy's body
   and see the last step only (Maze is Markov).
3. On held-out test tasks, PRM-guided beam search (`arborl.search` `beam-prm`, the PRM as
   evaluator through `RewardModelEvaluator`) against unguided sampling (`best-of-n`:
   independent episodes until the budget is spent) at equal budgets of generated tokens
   (N = budget / 32 beams, M = 2: one full-depth beam pass per budget), with three
   controls for the same beam search: random scores, a no-op filter (0 when the step left
   the observation unchanged, else 1) and the BFS-distance heuristic (`maze_value`, which
   reads the grid: a ceiling, not a learned model). A task counts as solved when the env
   reports a win within the budget (the env's own signal, available to every method).
4. RL from the SFT policy with env reward only vs env + PRM reward (`reward.sources.rm`),
   same seed, same number of RL steps, evaluated on the same held-out tasks.

Artifacts go to `bench/work/reward_models/` (reused when present; `--fresh` redoes them).

    python bench/reward_models.py                  # everything (~45 min on 2 cores)
    python bench/reward_models.py --phases orm prm # a subset
    python bench/reward_models.py --quick          # toy sizes, for a smoke test
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from common import RESULTS_DIR, format_table, machine_info, write_json

from arborl.agent import AgentConfig
from arborl.agent.settings import load_agent_settings
from arborl.cli.main import main as arborl_main
from arborl.data import read_trajectories, write_trajectories
from arborl.envs import make
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rewards.reward_model import RewardModel
from arborl.rewards.rm_data import (
    build_preference_pairs,
    monte_carlo_step_labels,
    read_pairs,
    read_step_labels,
    write_jsonl,
)
from arborl.rewards.rm_evaluator import RewardModelEvaluator
from arborl.rollout import LMPolicy, RolloutConfig, draw_seeds, run_episodes_with_policy
from arborl.train.rm import evaluate_pairs, evaluate_steps, fit_reward_model, plot_calibration
from arborl.train.rm_config import RMTrainConfig

ENV = "arborl/Maze-v0"
ENV_KWARGS = {"short_actions": True}
PHASES = ("data", "orm", "prm", "search", "confirm", "train")
FULL = {
    "sft_steps": 300, "train_tasks": 256, "test_tasks": 48, "group_size": 8,
    "rm_steps": 300, "prm_steps": 1500, "prm_task_seeds": [1000, 3000],
    "prm_tasks_per_seed": 1024, "mc_rollouts": 4, "mc_test_trajectories": 96,
    "mc_test_rollouts": 8, "search_tasks": 200, "budgets": [64, 128], "confirm_tasks": 400,
    "rl_steps": 15, "rl_eval": 300, "history_steps": 1,
}  # fmt: skip
QUICK = {
    "sft_steps": 20, "train_tasks": 6, "test_tasks": 4, "group_size": 4,
    "rm_steps": 5, "prm_steps": 5, "prm_task_seeds": [1000], "prm_tasks_per_seed": 4,
    "mc_rollouts": 2, "mc_test_trajectories": 4, "mc_test_rollouts": 2,
    "search_tasks": 2, "budgets": [64], "confirm_tasks": 2, "rl_steps": 1, "rl_eval": 8,
    "history_steps": 1,
}  # fmt: skip


def sft_policy(work: Path, p: dict, fresh: bool) -> Path:
    """The SFT policy directory (trained once with `arborl sft`)."""
    policy = work / "sft" / "checkpoints" / "sft" / "policy"
    if policy.exists() and not fresh:
        return policy
    shutil.rmtree(work / "sft", ignore_errors=True)
    code = arborl_main(["sft", f"trainer.output_dir={work}", "trainer.name=sft",
                        f"sft.steps={p['sft_steps']}", "eval.num_episodes=200",
                        "trainer.progress=false"])  # fmt: skip
    if code:
        raise SystemExit(f"arborl sft failed with exit code {code}")
    return policy


def lm_policy(policy_dir: Path, seed: int) -> tuple[LMPolicy, Any, Any, AgentConfig]:
    model, tok = load_policy(str(policy_dir))
    model.eval()
    backend = HFBackend(model, tok, max_batch_size=256)
    agent = AgentConfig(**load_agent_settings(str(policy_dir)))
    cfg = RolloutConfig(max_new_tokens=8, temperature=1.0, seed=seed)
    return LMPolicy(backend, tok, cfg, agent), backend, tok, agent


def phase_data(work: Path, p: dict, policy_dir: Path) -> dict:
    """Trajectories of the SFT policy on train and test tasks; pairs and MC step labels."""
    policy, *_ = lm_policy(policy_dir, seed=1)
    out: dict[str, Any] = {}
    for split, n, seed in (("train", p["train_tasks"], 100), ("test", p["test_tasks"], 200)):
        cfg = RolloutConfig(group_size=p["group_size"], seed=seed)
        res = run_episodes_with_policy(policy, ENV, draw_seeds(n, seed), cfg, split, ENV_KWARGS)
        write_trajectories(work / f"{split}_trajectories.jsonl", res.trajectories)
        pairs = build_preference_pairs(res.trajectories, max_pairs_per_task=16, seed=seed)
        write_jsonl(work / f"{split}_pairs.jsonl", pairs)
        out[split] = {"episodes": len(res.trajectories), "success": res.stats["success"],
                      "pairs": len(pairs), "tasks_with_pairs": len({q.task_id for q in pairs})}  # fmt: skip
    # Test-task MC labels (evaluation only), on a spread of test trajectories.
    trajs = read_trajectories(work / "test_trajectories.jsonl")
    trajs = sorted(trajs, key=lambda t: int(t.meta["traj_id"].rsplit("-", 1)[1]))
    t0 = time.perf_counter()
    mc_policy, *_ = lm_policy(policy_dir, seed=3)
    labels = monte_carlo_step_labels(trajs[: p["mc_test_trajectories"]], mc_policy, ENV_KWARGS,
                                     p["mc_test_rollouts"], max_envs=512)  # fmt: skip
    write_jsonl(work / "test_steps.jsonl", labels)
    out["test"].update(mc_trajectories=len(labels), mc_steps=sum(len(r.labels) for r in labels),
                       mc_s=round(time.perf_counter() - t0, 1))  # fmt: skip
    # PRM training labels: one episode on each of many train tasks.
    t0, records = time.perf_counter(), []
    for seed in p["prm_task_seeds"]:
        policy, *_ = lm_policy(policy_dir, seed=seed)
        cfg = RolloutConfig(group_size=1, seed=seed)
        tasks = draw_seeds(p["prm_tasks_per_seed"], seed)
        res = run_episodes_with_policy(policy, ENV, tasks, cfg, "train", ENV_KWARGS)
        mc_policy, *_ = lm_policy(policy_dir, seed=seed + 1)
        records += monte_carlo_step_labels(res.trajectories, mc_policy, ENV_KWARGS,
                                           p["mc_rollouts"], max_envs=512)  # fmt: skip
    write_jsonl(work / "train_steps.jsonl", records)
    out["train"].update(mc_trajectories=len(records), mc_steps=sum(len(r.labels) for r in records),
                        mc_s=round(time.perf_counter() - t0, 1))  # fmt: skip
    return out


def summarize_data(work: Path) -> dict:
    """The `data` figures from the files a previous run wrote (no rollouts)."""
    out: dict[str, Any] = {}
    for split in ("train", "test"):
        trajs = read_trajectories(work / f"{split}_trajectories.jsonl")
        pairs = read_pairs(work / f"{split}_pairs.jsonl")
        labels = read_step_labels(work / f"{split}_steps.jsonl")
        out[split] = {"episodes": len(trajs), "success": sum(t.won for t in trajs) / len(trajs),
                      "pairs": len(pairs), "tasks_with_pairs": len({q.task_id for q in pairs}),
                      "mc_trajectories": len(labels),
                      "mc_steps": sum(len(r.labels) for r in labels),
                      "mc_tasks": len({r.trajectory.task_id for r in labels})}  # fmt: skip
    return out


def train_rm(work: Path, kind: str, records: list, p: dict, name: str) -> RewardModel:
    """An RM started from the SFT policy's body (it already reads mazes), shown the last
    `history_steps` steps (Maze is Markov: the grid is the state)."""
    if (work / name / "arborl_rm.json").exists() and not p.get("fresh"):  # trained before
        return RewardModel.from_pretrained(work / name)
    init = str(work / "sft" / "checkpoints" / "sft" / "policy")
    model = RewardModel.from_spec(init, kind, max_length=256, include_instruction=False,
                                  max_history_steps=p["history_steps"])  # fmt: skip
    steps = p["rm_steps"] if kind == "orm" else p["prm_steps"]
    cfg = RMTrainConfig(kind=kind, data="-", steps=steps, batch_size=32, lr=1e-3)
    fit_reward_model(model, records, cfg)
    model.save_pretrained(work / name)
    return model


def phase_orm(work: Path, p: dict, plots: Path) -> dict:
    train, test = read_pairs(work / "train_pairs.jsonl"), read_pairs(work / "test_pairs.jsonl")
    if not train or not test:  # a policy that never (or always) wins gives no pairs
        return {"skipped": f"{len(train)} train / {len(test)} test pairs"}
    reused = (work / "orm" / "arborl_rm.json").exists() and not p["fresh"]
    t0 = time.perf_counter()
    orm = train_rm(work, "orm", train, p, "orm")
    train_s = None if reused else round(time.perf_counter() - t0, 1)
    m_test, pts = evaluate_pairs(orm, test)
    m_train, _ = evaluate_pairs(orm, train)
    plot_calibration({"ORM, test trajectories (target: won)": pts},
                     plots / "reward_models_orm_calibration.png")  # fmt: skip
    return {"train_pairs": len(train), "test_pairs": len(test), "train_s": train_s,
            "train_pairwise_accuracy": m_train["pairwise_accuracy"],
            "test_pairwise_accuracy": m_test["pairwise_accuracy"],
            "history_steps": p["history_steps"]}  # fmt: skip


def phase_prm(work: Path, p: dict, plots: Path) -> dict:
    train = read_step_labels(work / "train_steps.jsonl")
    test = read_step_labels(work / "test_steps.jsonl")
    reused = (work / "prm" / "arborl_rm.json").exists() and not p["fresh"]
    t0 = time.perf_counter()
    prm = train_rm(work, "prm", train, p, "prm")
    train_s = None if reused else round(time.perf_counter() - t0, 1)
    m_test, pts = evaluate_steps(prm, test)
    m_train, _ = evaluate_steps(prm, train)
    plot_calibration({"PRM, test steps (target: MC label)": pts},
                     plots / "reward_models_prm_calibration.png")  # fmt: skip
    base = sum(y >= 0.5 for _, y in pts) / len(pts)
    return {"train_trajectories": len(train), "test_steps": m_test["num_steps"],
            "train_s": train_s, "train_step_accuracy": m_train["step_accuracy"],
            "test_step_accuracy": m_test["step_accuracy"], "test_brier": m_test["step_brier"],
            "test_step_auc": m_test["step_auc"], "train_step_auc": m_train["step_auc"],
            "test_majority_baseline": max(base, 1 - base)}  # fmt: skip


def noop_filter(view) -> float:
    """0 when the node's step left the observation unchanged (a move into a wall), else 1."""
    return 0.0 if view.history and view.history[-1][0] == view.observation else 1.0


def solve(
    proposer,
    evaluator,
    algo: str,
    params: dict,
    seeds: list[int],
    budget: int,
    first: int = 0,
    tokens: list[int] | None = None,
) -> list[int]:
    """1/0 per task: did the search win within `budget` tokens (search seed = task index)?
    Each search's generated tokens are appended to `tokens` when given."""
    from arborl.search import Budget, Problem, run

    won = []
    for i, s in enumerate(seeds, start=first):
        env = make(ENV, **ENV_KWARGS)
        problem = Problem(env, proposer, evaluator, seed=s, reset_options={"split": "test"})
        res = run(problem, Budget(max_tokens=budget), seed=i, algo=algo, **params)
        won.append(int(res.won))
        if tokens is not None:
            tokens.append(int(res.stats.get("tokens", 0)))
    return won


def paired_ci(a: list[int], b: list[int], reps: int = 5000) -> list[float]:
    """95% paired-bootstrap interval of mean(a) - mean(b) over the same tasks."""
    rng, n = random.Random(0), len(a)
    diffs = sorted(sum(a[j] - b[j] for j in (rng.randrange(n) for _ in range(n))) / n
                   for _ in range(reps))  # fmt: skip
    return [diffs[int(0.025 * reps)], diffs[int(0.975 * reps) - 1]]


def phase_confirm(work: Path, p: dict, policy_dir: Path) -> dict:
    """A replication on `confirm_tasks` further test tasks (those after the search phase's)
    at the largest budget: sampling vs distinct-candidate beam search with the PRM and with
    random scores, paired per task."""
    from arborl.search import FunctionEvaluator, LMProposer

    _, backend, tok, agent = lm_policy(policy_dir, seed=4)
    sampler = LMProposer(backend, tok, agent, max_new_tokens=8, temperature=1.0, oversample=1)
    distinct = LMProposer(backend, tok, agent, max_new_tokens=8, temperature=1.0, distinct=True)
    prm = RewardModelEvaluator(RewardModel.from_pretrained(work / "prm"), name="prm")
    rng = random.Random(0)
    noise = FunctionEvaluator(lambda v: rng.random(), name="random")
    budget, first = max(p["budgets"]), p["search_tasks"]
    seeds = draw_seeds(first + p["confirm_tasks"], 777)[first:]
    beam = {"num_beams": max(2, budget // 32), "beam_width": 2}
    won = {"sampling": solve(sampler, None, "best-of-n", {"n": 10_000}, seeds, budget, first),
           "beam distinct, PRM": solve(distinct, prm, "beam-prm", beam, seeds, budget, first),
           "beam distinct, random": solve(distinct, noise, "beam-prm", beam, seeds, budget, first)}  # fmt: skip
    prm_won, base = won["beam distinct, PRM"], won["sampling"]
    return {"tasks": len(seeds), "first_task": first, "budget": budget,
            "solve_rate": {k: sum(v) / len(v) for k, v in won.items()},
            "prm_minus_sampling": sum(prm_won) / len(seeds) - sum(base) / len(seeds),
            "prm_minus_sampling_ci": paired_ci(prm_won, base),
            "prm_minus_random_ci": paired_ci(prm_won, won["beam distinct, random"]),
            "only_prm_won": sum(a and not b for a, b in zip(prm_won, base)),
            "only_sampling_won": sum(b and not a for a, b in zip(prm_won, base))}  # fmt: skip


def phase_search(work: Path, p: dict, policy_dir: Path) -> dict:
    """Solve rate at equal token budgets: unguided sampling vs beam search scored by the
    PRM, by random numbers, by a no-op filter, and by the BFS heuristic (a ceiling)."""
    from arborl.envs.builtin.maze import heuristic as maze_value
    from arborl.search import FunctionEvaluator, LMProposer

    _, backend, tok, agent = lm_policy(policy_dir, seed=4)
    # oversample=1: every generated token is a candidate step (sampling's k=1 wastes none)
    proposer = LMProposer(backend, tok, agent, max_new_tokens=8, temperature=1.0, oversample=1)
    # distinct: each of a node's M candidates barred from an earlier one's first token
    distinct = LMProposer(backend, tok, agent, max_new_tokens=8, temperature=1.0, distinct=True)
    prm = RewardModelEvaluator(RewardModel.from_pretrained(work / "prm"), name="prm")
    rng = random.Random(0)
    evaluators = {
        "PRM": prm,
        "random scores": FunctionEvaluator(lambda v: rng.random(), name="random"),
        "no-op filter": FunctionEvaluator(noop_filter, name="noop"),
        "BFS heuristic (ceiling)": FunctionEvaluator(maze_value, name="bfs"),
    }
    seeds = draw_seeds(p["search_tasks"], 777)
    rows: dict[str, dict[str, float]] = {}
    for budget in p["budgets"]:
        beams = max(2, budget // 32)  # 2 tokens a step, 16 steps: one full-depth pass
        methods = {"sampling (best-of-n, unguided)": ("best-of-n", {"n": 10_000}, None, proposer)}
        for cands, prop in (("sampled", proposer), ("distinct", distinct)):
            for label, ev in evaluators.items():
                methods[f"beam-prm M=2 {cands}, {label}"] = (
                    "beam-prm", {"num_beams": beams, "beam_width": 2}, ev, prop)  # fmt: skip
        for name, (algo, params, evaluator, prop) in methods.items():
            t0, spent = time.perf_counter(), []
            wins = sum(solve(prop, evaluator, algo, params, seeds, budget, tokens=spent))
            tokens = sum(spent)
            row = rows.setdefault(name, {})
            row[str(budget)] = wins / len(seeds)
            row[f"num_beams_{budget}"] = beams if algo == "beam-prm" else None
            row[f"tokens_{budget}"] = tokens / len(seeds)
            row[f"wall_s_{budget}"] = round(time.perf_counter() - t0, 1)
            print(f"  search budget={budget} {name}: {wins}/{len(seeds)}", flush=True)
    return {"tasks": len(seeds), "budgets": p["budgets"], "solve_rate": rows}


def phase_train(work: Path, p: dict, policy_dir: Path) -> dict:
    """RL from the SFT policy: env reward vs env + PRM reward, same seed and steps.
    (A `rollout.x=` override rebuilds the section from RolloutConfig's own defaults, not
    TrainConfig's, so group_size and max_new_tokens are set again explicitly.)"""
    arms = {"env": ["reward.sources={env: 1.0}"],
            "env + rm (PRM, w=1)": ["reward.sources={env: 1.0, rm: 1.0}",
                                    f"reward.rm_model={work / 'prm'}"]}  # fmt: skip
    out = {}
    for i, (name, sets) in enumerate(arms.items()):
        run_name = f"rl_{i}"
        shutil.rmtree(work / run_name, ignore_errors=True)
        t0 = time.perf_counter()
        code = arborl_main(["train", f"model.name_or_path={policy_dir}", "sft.enabled=false",
                            f"trainer.total_steps={p['rl_steps']}", "rollout.num_tasks=8", "rollout.group_size=8",
                            "rollout.max_new_tokens=8",
                            f"eval.num_episodes={p['rl_eval']}", "eval.every=0",
                            f"trainer.output_dir={work}", f"trainer.name={run_name}",
                            "trainer.progress=false", "trainer.plots=false",
                            "trainer.save_trajectories=0", *sets])  # fmt: skip
        if code:
            raise SystemExit(f"arborl train ({name}) failed with exit code {code}")
        s = json.loads((work / run_name / "summary.json").read_text())
        out[name] = {"before": s["before"]["success"], "after": s["after"]["success"],
                     "after_ci": [s["after"]["success_lo"], s["after"]["success_hi"]],
                     "env_steps": s["env_steps"], "rl_steps": s["steps"],
                     "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
    return out


def print_tables(result: dict) -> None:
    if "orm" in result and "skipped" not in result["orm"]:
        o = result["orm"]
        print(format_table(["ORM", "pairs", "pairwise acc"],
                           [["train tasks", o["train_pairs"], o["train_pairwise_accuracy"]],
                            ["test tasks", o["test_pairs"], o["test_pairwise_accuracy"]]]))  # fmt: skip
    if "prm" in result:
        r = result["prm"]
        print(format_table(["PRM", "step acc", "brier", "AUC", "majority"],
                           [["test steps", r["test_step_accuracy"], r["test_brier"],
                             r.get("test_step_auc"), r["test_majority_baseline"]]]))  # fmt: skip
    if "search" in result:
        s = result["search"]
        rows = [[m, *[v[str(b)] for b in s["budgets"]]] for m, v in s["solve_rate"].items()]
        print(format_table(["method", *[f"{b} tokens" for b in s["budgets"]]], rows))
    if "confirm" in result:
        c = result["confirm"]
        rows = [[m, v] for m, v in c["solve_rate"].items()]
        print(format_table([f"replication, {c['tasks']} tasks, {c['budget']} tokens", "solve"],
                           rows))  # fmt: skip
        print(f"PRM beam - sampling: {c['prm_minus_sampling']:+.3f}, paired 95% CI "
              f"{c['prm_minus_sampling_ci']}")  # fmt: skip
    if "train" in result:
        rows = [[k, v["before"], v["after"], v["env_steps"]] for k, v in result["train"].items()]
        print(format_table(["reward", "before", "after", "env steps"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                    help="which parts to run (default all)")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="toy sizes (a smoke test)")
    ap.add_argument(
        "--fresh", action="store_true", help="retrain the SFT policy and RMs, redo data"
    )
    ap.add_argument("--work", default=None, help="work dir (default bench/work/reward_models)")
    ap.add_argument(
        "--out", default=None, help="JSON path (default bench/results/reward_models.json)"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = {**(QUICK if args.quick else FULL), "fresh": args.fresh}
    root = Path(__file__).resolve().parent
    default_work = root / "work" / ("reward_models_quick" if args.quick else "reward_models")
    work = Path(args.work) if args.work else default_work
    work.mkdir(parents=True, exist_ok=True)
    plots = work if args.quick else RESULTS_DIR  # a smoke test never touches the results
    out = args.out or (str(work / "reward_models.json") if args.quick else None)
    previous = Path(out) if out else RESULTS_DIR / "reward_models.json"
    result = json.loads(previous.read_text()) if previous.exists() and not args.quick else {}
    result.update({"env": ENV, "env_kwargs": ENV_KWARGS, "params": p, "machine": machine_info(1)})
    t0 = time.perf_counter()
    policy_dir = sft_policy(work, p, args.fresh)
    if "data" in args.phases or not (work / "train_pairs.jsonl").exists() or args.fresh:
        result["data"] = phase_data(work, p, policy_dir)
    else:  # figures of the files on disk, not of an older results file
        result["data"] = summarize_data(work)
    if "orm" in args.phases:
        result["orm"] = phase_orm(work, p, plots)
    if "prm" in args.phases or ("search" in args.phases and not (work / "prm").exists()):
        result["prm"] = phase_prm(work, p, plots)
    if "search" in args.phases:
        result["search"] = phase_search(work, p, policy_dir)
    if "confirm" in args.phases:
        result["confirm"] = phase_confirm(work, p, policy_dir)
    if "train" in args.phases:
        result["train"] = phase_train(work, p, policy_dir)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print_tables(result)
    # Re-read before writing: runs of different phases may share the results file.
    if previous.exists() and not args.quick:
        result = {**json.loads(previous.read_text()), **result}
    path = write_json(result, out, "reward_models")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
