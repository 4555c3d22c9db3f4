"""Env-pool throughput: env steps per second for 64 concurrent envs in each isolation mode.

Every mode runs the same work: 64 `arborl/Maze-v0` envs (8 tasks x group 8), each round
one `pool.step` over the live envs with a random legal action (seeded), a `pool.reset`
when all episodes are done. Resets count as steps too (they are env calls). Modes:

  - inproc:      `EnvPool`, all in this process (the ceiling);
  - subprocess:  8 worker processes x 8 envs, one JSON line per worker per batch;
  - ray:         8 actors x 8 envs, 0.25 CPU each (`ray.init(num_cpus=2)`);
  - http xN:     N uvicorn env servers (N = 1, 2, 4), 64 sessions balanced over them,
                 one `/batch` request per replica per pool step (the default);
  - http x1 per-call: 1 server, one keep-alive request per env call (`batch_calls=False`,
                 the per-session REST routes), 64 concurrent from one asyncio client.

Besides throughput the table gives each mode's overhead per env call: its wall time per
call minus inproc's (which is Maze's own step plus the loop), i.e. what the transport adds.
The issue's target is <= 1 ms for http x1.

Modes run interleaved (A B C ... A B C ...) and the table shows the median of the repeats.
The numbers measure transport overhead: Maze's own `step` costs microseconds, so a real
env (a JVM, a sandbox, a simulator) hides most of the gap.

    python bench/env_pool.py                 # ~2 min on 2 busy cores
    python bench/env_pool.py --quick         # smoke run
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from common import format_table, machine_info, median, write_json

from arborl.envs import make_pool

ENV_ID = "arborl/Maze-v0"
NUM_ENVS, GROUP = 64, 8
MODES: dict[str, dict[str, Any]] = {
    "inproc": {"mode": "inproc"},
    "subprocess": {"mode": "subprocess", "num_workers": 8},
    "ray": {"mode": "ray", "num_workers": 8, "num_cpus_per_worker": 0.25},
    "http x1": {"mode": "http", "replicas": 1},
    "http x2": {"mode": "http", "replicas": 2},
    "http x4": {"mode": "http", "replicas": 4},
    "http x1 per-call": {"mode": "http", "replicas": 1, "batch_calls": False},
}
TARGET_MS = 1.0
"""Issue 20's bound on http x1's overhead per env call."""


def run_steps(pool: Any, num_steps: int, rng: random.Random) -> float:
    """Env calls per second over at least `num_steps` calls."""
    seeds = [rng.randrange(2**31) for _ in range(NUM_ENVS // GROUP)]
    _, infos = pool.reset(seeds, GROUP)
    calls, start = NUM_ENVS, time.perf_counter()
    while calls < num_steps:
        active = pool.active
        if not active:
            seeds = [rng.randrange(2**31) for _ in range(NUM_ENVS // GROUP)]
            _, infos = pool.reset(seeds, GROUP)
            calls += NUM_ENVS
            continue
        actions = {i: rng.choice(infos[i].get("available_actions") or ["up"]) for i in active}
        results, _ = pool.step(actions)
        for i in active:
            infos[i] = results[i].info
        calls += len(active)
    return calls / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-steps", type=int, default=20_000, help="env calls per measurement")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per mode")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of modes")
    p.add_argument("--quick", action="store_true", help="smoke run: 2000 steps, 1 repeat")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/env_pool.json)")
    p.add_argument("--seed", type=int, default=0, help="seed of the task and action draws")
    args = p.parse_args()
    if args.quick:
        args.num_steps, args.repeats = 2000, 1
    modes = [m.strip() for m in args.modes.split(",")]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: unknown {unknown}; known: {list(MODES)}")
    if "ray" in modes:
        from arborl.envs.remote.ray_pool import init_local_ray

        init_local_ray(num_cpus=2, log_to_driver=False)
    rng = random.Random(args.seed)
    pools, start_s = {}, {}
    for m in modes:
        t = time.perf_counter()
        pools[m] = make_pool(ENV_ID, NUM_ENVS, **MODES[m])
        start_s[m] = time.perf_counter() - t
    rates: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for m in modes:  # warm-up: connections, caches, first imports in the workers
            run_steps(pools[m], NUM_ENVS * 4, rng)
        for _ in range(args.repeats):
            for m in modes:
                rates[m].append(run_steps(pools[m], args.num_steps, rng))
    finally:
        for pool in pools.values():
            pool.close()
    base = median(rates["inproc"]) if "inproc" in rates else float("nan")
    overhead = {m: 1000 / median(rates[m]) - 1000 / base for m in modes}  # ms per call
    rows = [[m, round(median(rates[m])), median(rates[m]) / base, overhead[m], start_s[m]]
            for m in modes]  # fmt: skip
    table = format_table(
        ["mode", "env steps/s", "vs inproc", "overhead ms/call", "pool start s"], rows
    )
    print(table)
    machine = machine_info(1)
    print(f"CPU: {machine['cpu_model']}, load average {machine['loadavg']}")
    if "http x1" in overhead and "inproc" in rates:
        met = "met" if overhead["http x1"] <= TARGET_MS else "NOT met"
        print(
            f"http x1 overhead {overhead['http x1']:.3f} ms/call, target <= {TARGET_MS} ms: {met}"
        )
    result = {"env_id": ENV_ID, "num_envs": NUM_ENVS, "group_size": GROUP,
              "num_steps": args.num_steps, "repeats": args.repeats, "modes": MODES,
              "steps_per_s": rates, "overhead_ms_per_call": overhead, "target_ms": TARGET_MS,
              "pool_start_s": start_s, "machine": machine}  # fmt: skip
    print(f"wrote {write_json(result, args.out, 'env_pool')}")


if __name__ == "__main__":
    main()
