"""Learning benchmark of issue 32 req 5: an OpenAI Agents SDK agent trained through the gateway.

The task and the agent are `bench/gateway_agent.py`'s, picked by `--task`: `lookup` (the
default: "What is the code of blue?", a per-task hidden table read by the agent's
`lookup` tool, `bench/Lookup-v0`) or `easycalc` (one-step calculator questions, "What is
27 + 45?", `bench/EasyCalc-v0`). The agent is written with the Agents SDK and run
unmodified against arborl's gateway.

1. **SFT start** (`bench/agent_sft.py`): the agent runs on `--sft-demos` train tasks
   against a gateway whose model is a script (the task's demonstrator: the right tool call,
   then the tool's result); the recorded (prompt ids, response ids) of each call are the
   SFT rows, so the policy learns the tool-calling format on exactly the prompts the
   gateway will show it. `--sft-steps` optimizer steps: the start should succeed
   sometimes, not always, so that RL groups have a signal (docs/BENCHMARKS.md has what
   each task's start does).
2. **RL** (`arborl train rollout.mode=program`, `--algo`: RAFT by default, which learned on
   every seed where GRPO did not; one `arborl compare` grid with the SFT policy as its
   start): before RL and after it, the agent runs on the same `--eval-episodes`
   held-out tasks (test split, `eval.seed` fixed) with the same sampling seed, so the gain
   is paired per task; `summary.json`'s `gain` is its mean with a paired 95% interval, and
   with several `--seeds` the grid adds the t interval over seeds. Stats, tables and
   resuming are the library's (`arborl.grid.compare`, `arborl.report.compare`).

    python bench/gateway_learning.py                 # the documented run (docs/BENCHMARKS.md)
    python bench/gateway_learning.py --algo grpo     # the same with GRPO
    python bench/gateway_learning.py --quick         # toy size, what tests/bench runs
    python bench/gateway_learning.py --task easycalc # the calculator task that did not learn

Runs go to `--work-dir` (default runs/bench-gateway-learning, git-ignored): the SFT policy in
`sft-start/policy` (kept while its settings hold: `sft-start/settings.json`), the grid in
`grid/`. Results: a table and `bench/results/gateway_learning.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import transformers
from agent_sft import record_agent_demos
from common import RESULTS_DIR, machine_info, write_json

import arborl.envs
from arborl.config import from_dict
from arborl.envs import make_pool
from arborl.grid.compare import CompareConfig, run_grid
from arborl.registry import load_entry_point
from arborl.rollout import draw_seeds
from arborl.rollout.agents import agent_tasks
from arborl.train.config import load_train_config
from arborl.train.sft import SFTExample, run_sft

sys.path.insert(0, str(Path(__file__).resolve().parent))  # agent_program.fn=gateway_agent:...
import gateway_agent  # noqa: E402

BASE = [
    "env.pool_mode=inproc",  # registered by this script at run time
    "rollout.mode=program",
    "agent_program.timeout_s=60",
    "trainer.num_threads=1",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.save_trajectories=0",
    "trainer.keep_checkpoints=1",
    "eval.every=0",
]
"""Settings of every run: the rollout mode, one thread."""


def task_settings(args: argparse.Namespace) -> list[str]:
    """`BASE` and the task's env and agent."""
    task = gateway_agent.TASKS[args.task]
    return [*BASE, f"env.id={task.env_id}", f"agent_program.fn={task.fn}",
            f"rollout.max_new_tokens={task.max_new_tokens}"]  # fmt: skip


def cut_rows(examples: list[SFTExample], num_tokens: int) -> list[SFTExample]:
    """The rows with their prompts cut to the last `num_tokens` ids: the question, or the
    tool's response, and little else (the SDK's system prompt is ~280 of ~300-380 ids)."""
    return [SFTExample(e.prompt_ids[-num_tokens:], e.response_ids) for e in examples]


def sft_start(args: argparse.Namespace) -> Path:
    """The SFT policy folder: trained on demos recorded through the gateway, or reused
    when `settings.json` matches.

    Two phases: `--sft-cut-steps` on the rows cut to their last `--sft-cut-tokens` prompt
    ids, then `--sft-steps` on the whole rows. The 0.1M model learns to copy (the name into
    the call, the tool's word into the answer) only with few tokens around: on whole rows it
    learned the format and guessed (docs/BENCHMARKS.md), and a cut row is ~5x cheaper. The
    whole rows then carry the format and the copies over to the SDK's real prompts."""
    out = Path(args.work_dir) / "sft-start"
    settings = {"task": args.task, "model": args.model, "demos": args.sft_demos,
                "cut_tokens": args.sft_cut_tokens, "cut_steps": args.sft_cut_steps,
                "steps": args.sft_steps, "batch": args.sft_batch, "lr": args.sft_lr,
                "seed": args.sft_seed, "set": args.set}  # fmt: skip
    marker = out / "settings.json"
    policy = out / "policy"
    if marker.exists() and json.loads(marker.read_text()) == settings and not args.fresh:
        print(f"[sft-start] reused {policy}", flush=True)
        return policy
    shutil.rmtree(out, ignore_errors=True)
    from arborl.models import save_policy
    from arborl.train.build import build_policy

    cfg = load_train_config([*task_settings(args), f"model.name_or_path={args.model}",
                             f"sft.steps={args.sft_steps}", f"sft.lr={args.sft_lr}",
                             f"sft.batch_size={args.sft_batch}", f"sft.seed={args.sft_seed}",
                             *args.set])  # fmt: skip
    model, tokenizer = build_policy(cfg)
    t0 = time.perf_counter()
    pool = make_pool(cfg.env.id, args.sft_demos, "inproc", split=cfg.env.train_split)
    try:
        seeds = draw_seeds(args.sft_demos, args.sft_seed)
        tasks = agent_tasks(pool, seeds, 1, cfg.env.train_split, cfg.env.id)
    finally:
        pool.close()
    task = gateway_agent.TASKS[args.task]
    program = load_entry_point(task.fn, "agent_program.fn")
    examples = record_agent_demos(program, tasks, task.respond, tokenizer)
    t1 = time.perf_counter()
    print(f"[sft-start] {len(examples)} rows from {len(tasks)} demos in {t1 - t0:.0f} s; "
          f"{args.sft_cut_steps} SFT steps of {args.sft_batch} rows cut to "
          f"{args.sft_cut_tokens} prompt ids, then {args.sft_steps} of whole rows", flush=True)  # fmt: skip
    phases = [(cut_rows(examples, args.sft_cut_tokens), args.sft_cut_steps),
              (examples, args.sft_steps)]  # fmt: skip
    for rows, steps in phases:
        if steps:
            stats = run_sft(model, tokenizer, rows, replace(cfg.sft, steps=steps), progress=False)
            print(f"[sft-start] {steps} steps, loss {stats['sft/first_loss']:.3f} -> "
                  f"{stats['sft/loss']:.3f}", flush=True)  # fmt: skip
    save_policy(model, tokenizer, policy)
    marker.write_text(json.dumps(settings))
    print(f"[sft-start] trained in {time.perf_counter() - t1:.0f} s", flush=True)
    return policy


def grid(args: argparse.Namespace, policy: Path) -> CompareConfig:
    """One arm (`--algo` through the gateway) on every seed, from the SFT policy."""
    base = [*task_settings(args), f"eval.num_episodes={args.eval_episodes}",
            f"eval.seed={args.eval_seed}", f"rollout.num_tasks={args.num_tasks}",
            f"rollout.group_size={args.group_size}", f"trainer.total_steps={args.rl_steps}",
            *args.set]  # fmt: skip
    arm = [f"algo.lr={args.lr}"]
    cfg = {"arms": {args.algo: [f"algo={args.algo}", *arm]}, "seeds": args.seeds, "base": base,
           "start": str(policy), "out": str(Path(args.work_dir) / "grid")}  # fmt: skip
    return from_dict(CompareConfig, cfg, prefix="bench.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="lookup", choices=sorted(gateway_agent.TASKS),
                   help="the task and agent (bench/gateway_agent.py)")  # fmt: skip
    p.add_argument("--model", default="envbpe-tiny-0.1m", help="the policy's preset or folder")
    p.add_argument("--sft-demos", type=int, default=200, help="demo episodes recorded for SFT")
    p.add_argument("--sft-cut-tokens", type=int, default=16,
                   help="prompt ids kept in the first SFT phase's rows")  # fmt: skip
    p.add_argument("--sft-cut-steps", type=int, default=480,
                   help="SFT steps on the cut rows (0: none)")  # fmt: skip
    p.add_argument("--sft-steps", type=int, default=100, help="SFT steps on the whole rows")
    p.add_argument("--sft-batch", type=int, default=16, help="SFT rows per step")
    p.add_argument("--sft-lr", type=float, default=1e-2, help="SFT peak learning rate")
    p.add_argument("--sft-seed", type=int, default=0, help="seed of the demo tasks and batches")
    p.add_argument("--rl-steps", type=int, default=40, help="RL steps")
    p.add_argument("--num-tasks", type=int, default=16, help="tasks per RL step")
    p.add_argument("--group-size", type=int, default=4, help="agent runs per task (its group)")
    p.add_argument("--algo", default="raft", help="RL algorithm (`algo=NAME`), e.g. grpo")
    p.add_argument("--lr", type=float, default=1e-3, help="RL learning rate")
    p.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2], help="RL seeds (one run each)"
    )
    p.add_argument("--eval-episodes", type=int, default=200, help="held-out tasks per evaluation")
    p.add_argument("--eval-seed", type=int, default=12345, help="seed of the held-out tasks")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override of every run (repeatable)")  # fmt: skip
    p.add_argument("--work-dir", default=None,
                   help="run folders (default runs/bench-gateway-learning, git-ignored)")  # fmt: skip
    p.add_argument("--out", default=None,
                   help="JSON path (default bench/results/gateway_learning.json)")  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="retrain what the work dir has")
    p.add_argument("--quick", action="store_true",
                   help="toy size (8 demos, 2+2 SFT steps, one seed of 2 RL steps of 2x2, 4 eval tasks)")  # fmt: skip
    args = p.parse_args(argv)
    if args.quick:
        args.sft_demos, args.sft_cut_steps, args.sft_steps, args.rl_steps = 8, 2, 2, 2
        args.num_tasks = args.group_size = 2
        args.seeds = args.seeds[:1]
        args.eval_episodes = min(args.eval_episodes, 4)
    name = "gateway_learning_quick" if args.quick else "gateway_learning"
    runs = Path(__file__).resolve().parents[1] / "runs" / f"bench-{name.replace('_', '-')}"
    args.work_dir = str(Path(args.work_dir or runs).resolve())
    args.out = args.out or str(RESULTS_DIR / f"{name}.json")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    task = gateway_agent.TASKS[args.task]
    arborl.envs.register(task.env_id, entry_point=task.env)
    load_before = machine_info(1)["loadavg"]
    t0 = time.perf_counter()
    policy = sft_start(args)
    t_sft = time.perf_counter() - t0
    result = run_grid(grid(args, policy), fresh=args.fresh, replace=True)
    print(f"\n{result['text']}", flush=True)
    machine = machine_info(1)
    machine["loadavg_before"] = load_before
    runs = [{k: v for k, v in r.items() if k not in ("path", "eval", "start")}
            for r in result["runs"]]  # fmt: skip
    out = {
        "benchmark": "gateway_learning",
        "quick": args.quick,
        "setup": {k: v for k, v in vars(args).items() if k not in ("work_dir", "out")},
        "runs": runs,
        "summary": result["arms"],
        "sft_wall_s": round(t_sft, 1),
        "total_wall_s": round(time.perf_counter() - t0, 1),
        "machine": machine,
    }
    print(f"wrote {write_json(out, args.out, 'gateway_learning')}")
    return out


if __name__ == "__main__":
    main()
