"""Async vs lockstep rollouts over envs with heavy-tailed step latency (issue 20, req. 4).

64 episodes (16 tasks x group 4) of `bench/SlowMaze-v0` (Maze whose step sleeps a
lognormal latency, mean 100 ms, sigma 1.0: see bench/latency_env.py), one env per
subprocess worker (`make_pool(..., "subprocess")`, 64 workers), played by the `tiny-1m`
and `tiny-0.1m` presets with `arborl.rollout.run_rollout` (the demo's settings: short
Maze actions, 8 new tokens a turn, prompts of the observation only, "demo"; or prompts
with the instruction and every past turn, "full"), in two schedules:

  - lockstep: each turn generates for every live episode, then steps them all, so a turn
    lasts as long as its slowest env step (the longest of 64 draws is ~0.5 s);
  - async (`rollout.async_envs=true`): each episode goes back to generation as soon as its
    own step returns, and env steps overlap generation.

Both run the same seeds in one process, interleaved (L A L A ...), on one pool; the table
shows medians of env steps per second and checks that both schedules produced the same
trajectories (actions and rewards per episode). Target: async >= 2x lockstep. Async can
only hide env time, so its gain is bounded by (generate + env) / generate of lockstep: the
"generate s" column says how much of each rollout was generation.

    python bench/async_rollout.py              # ~4 min on 2 busy cores
    python bench/async_rollout.py --prompts full --max-turns 8 \
        --out bench/results/async_rollout_full_prompts.json   # generation-bound case
    python bench/async_rollout.py --quick      # smoke run
    python bench/async_rollout.py --env alfworld/ALFWorld-v0 --presets tiny-1m \
        --num-tasks 4 --max-turns 8 --out bench/results/async_rollout_alfworld.json

`--env` plays a real env instead (a package env's workers run in its own venv; its own
step latency, CPU-bound or not, replaces the sleep; `--split` picks its tasks).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import latency_env
import torch
from common import format_table, machine_info, median, ratio, write_json

from arborl.agent import AgentConfig
from arborl.envs import make_pool
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import RolloutConfig, run_rollout

TARGET = 2.0
"""Issue 20's bound: async throughput / lockstep throughput."""
AGENTS = {
    "demo": AgentConfig(memory="last_k", memory_k=0, include_instruction=False),
    "full": AgentConfig(),
}
"""Prompt settings: the demo's (`arborl train`'s default agent: the observation only, ~60
tokens) or the instruction and every past turn (prompts grow ~100 tokens a turn, so the
generation time grows with them and dominates the rollout)."""


class TimedBackend:
    """Forwards to a backend and adds up the seconds spent in `generate`."""

    def __init__(self, inner: HFBackend) -> None:
        self.inner, self.seconds = inner, 0.0
        self.max_length, self.eos_token_ids = inner.max_length, inner.eos_token_ids

    def generate(self, prompts, params):
        t = time.perf_counter()
        try:
            return self.inner.generate(prompts, params)
        finally:
            self.seconds += time.perf_counter() - t


def signature(result) -> list:
    """Per episode: its actions and rewards (what must not depend on the schedule)."""
    return [[(t.action, t.reward) for t in ep.turns] for ep in result.episodes]


def run_case(pool, model, tok, cfg, agent, seeds: list[int], seed: int) -> tuple[dict, list]:
    """One rollout: its figures and its per-episode signature."""
    backend = TimedBackend(HFBackend(model, tok, seed=0))
    t = time.perf_counter()
    res = run_rollout(backend, tok, pool, seeds, replace(cfg, seed=seed), agent)
    wall = time.perf_counter() - t
    steps = sum(len(ep.turns) for ep in res.episodes)
    figures = {"wall_s": wall, "env_steps": steps, "steps_per_s": steps / wall,
               "generate_s": backend.seconds, "generate_calls": res.stats["generate_calls"]}  # fmt: skip
    return figures, signature(res)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", default="tiny-0.1m,tiny-1m",
                   help="comma-separated policy presets (default tiny-0.1m,tiny-1m)")  # fmt: skip
    p.add_argument("--prompts", default="demo",
                   help=f"comma-separated prompt settings of {list(AGENTS)} (default demo)")  # fmt: skip
    p.add_argument("--num-tasks", type=int, default=16, help="tasks per rollout (default 16)")
    p.add_argument("--group-size", type=int, default=4, help="episodes per task (default 4)")
    p.add_argument("--max-turns", type=int, default=None,
                   help="turn limit (default: the env's own, 16 for Maze, as in the demo)")  # fmt: skip
    p.add_argument("--mean-s", type=float, default=0.1, help="mean env step latency, seconds")
    p.add_argument(
        "--env",
        default=latency_env.ENV_ID,
        help=f"env id (default {latency_env.ENV_ID}; a real one ignores --mean-s)",
    )
    p.add_argument(
        "--env-kwargs", default=None, help="JSON env kwargs of --env (default: SlowMaze's, or none)"
    )
    p.add_argument("--split", default="test", help="task split of --env (default test)")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=120.0,
        help="seconds one env call may take before its worker is restarted",
    )
    p.add_argument("--wait-s", type=float, default=RolloutConfig.async_wait_s,
                   help="rollout.async_wait_s of the async runs (default: the config's)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    p.add_argument("--quick", action="store_true", help="smoke run: 4 tasks, 1 repeat")
    p.add_argument("--out", default=None, help="JSON (default bench/results/async_rollout.json)")
    args = p.parse_args()
    if args.quick:
        args.num_tasks, args.repeats = 4, 1
    torch.set_num_threads(1)
    # The workers import latency_env from here (they inherit PYTHONPATH).
    bench_dir = str(Path(__file__).resolve().parent)
    paths = [bench_dir, os.environ.get("PYTHONPATH")]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    latency_env.register_env()
    num_envs = args.num_tasks * args.group_size
    presets = [x.strip() for x in args.presets.split(",") if x.strip()]
    memories = [x.strip() for x in args.prompts.split(",") if x.strip()]
    if unknown := sorted(set(memories) - set(AGENTS)):
        raise SystemExit(f"--prompts: unknown {unknown}; known: {list(AGENTS)}")
    models = {name: load_policy(name, seed=0) for name in presets}
    for model, _ in models.values():
        model.eval()
    t = time.perf_counter()
    if args.env_kwargs is not None:
        env_kwargs = json.loads(args.env_kwargs)
    elif args.env == latency_env.ENV_ID:
        env_kwargs = {"mean_s": args.mean_s, "short_actions": True}  # as configs/env/maze.yaml
    else:
        env_kwargs = {}
    pool = make_pool(args.env, num_envs, "subprocess", split=args.split,
                     timeout_s=args.timeout_s, **env_kwargs)  # fmt: skip
    pool_start_s = time.perf_counter() - t
    base = RolloutConfig(num_tasks=args.num_tasks, group_size=args.group_size,
                         max_turns=args.max_turns, max_new_tokens=8)  # fmt: skip
    modes = {"lockstep": base, "async": replace(base, async_envs=True, async_wait_s=args.wait_s)}
    policies = [f"{name} {mem}" for name in presets for mem in memories]
    cases = [(pol, m) for pol in policies for m in modes]
    runs: dict[str, list[dict]] = {f"{pol} {m}": [] for pol, m in cases}
    identical: dict[str, list[bool]] = {pol: [] for pol in policies}
    try:
        for r in range(args.repeats):  # interleaved: L A L A ... per repeat
            seeds = [1000 * r + k for k in range(args.num_tasks)]
            for pol in policies:
                name, mem = pol.split(" ")
                sigs = {}
                for m, cfg in modes.items():
                    figures, sigs[m] = run_case(pool, *models[name], cfg, AGENTS[mem], seeds, r)
                    runs[f"{pol} {m}"].append(figures)
                    print(f"repeat {r} {pol} {m}: {figures['env_steps']} env steps in "
                          f"{figures['wall_s']:.2f}s ({figures['generate_s']:.2f}s generating)",
                          flush=True)  # fmt: skip
                identical[pol].append(sigs["lockstep"] == sigs["async"])
    finally:
        pool.close()

    def med(key: str, field: str) -> float:
        return median([x[field] for x in runs[key]])

    rows, speedup = [], {}
    for pol, m in cases:
        key = f"{pol} {m}"
        vs = ratio(med(key, "steps_per_s"), med(f"{pol} lockstep", "steps_per_s"))
        if m == "async":
            speedup[pol] = vs
        rows.append([pol, m, med(key, "steps_per_s"), med(key, "wall_s"),
                     med(key, "generate_s"), med(key, "generate_calls"), vs])  # fmt: skip
    headers = ["policy prompts", "schedule", "env steps/s", "rollout s", "generate s", "generate calls",
               "vs lockstep"]  # fmt: skip
    print(format_table(headers, rows))
    machine = machine_info(1)
    print(f"CPU: {machine['cpu_model']}, load average {machine['loadavg']}")
    for pol in policies:
        met = "met" if speedup[pol] >= TARGET else "NOT met"
        print(f"{pol}: async / lockstep = {speedup[pol]:.2f}x (target >= {TARGET}x: {met}); "
              f"same trajectories in both schedules: {identical[pol]}")  # fmt: skip
    slow = args.env == latency_env.ENV_ID
    result = {"env_id": args.env, "env_kwargs": env_kwargs, "split": args.split,
              "mean_latency_s": args.mean_s if slow else None, "sigma": 1.0 if slow else None,
              "num_envs": num_envs, "num_workers": num_envs, "presets": presets,
              "prompts": {k: {f: getattr(AGENTS[k], f) for f in ("memory", "memory_k",
                          "include_instruction")} for k in memories},
              "max_turns": args.max_turns, "max_new_tokens": base.max_new_tokens,
              "async_wait_s": args.wait_s,
              "repeats": args.repeats, "runs": runs, "speedup": speedup, "target": TARGET,
              "identical_trajectories": identical, "pool_start_s": pool_start_s,
              "machine": machine}  # fmt: skip
    print(f"wrote {write_json(result, args.out, 'async_rollout')}")


if __name__ == "__main__":
    main()
