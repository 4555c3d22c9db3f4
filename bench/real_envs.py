"""Speed and cost of the real-benchmark env packages (envpkgs/*), for sizing worker pools.

For each env: reset time and steps/s of the oracle's actions in-process (inside the
package's own venv, the env object called directly), steps/s through a subprocess pool
of `--num-workers` workers driven from this process, and the peak RSS of one env's
process. The packages must be set up (`arborl env setup ID`); set-up time is what
`arborl env setup` printed, not re-measured here. Each row records the load average
before and after it; the JSON (default `bench/results/real_envs.json`) also has the CPU.

    ARBORL_HOME=~/.cache/arborl-test/home python bench/real_envs.py --envs sciworld/ScienceWorld-v0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

from common import cpu_facts, write_json

from arborl.envs import make_pool
from arborl.envs.packages.isolate import interpreter_for

ENVS = {
    "babyai/GoToLocal-v0": "babyai_env:GoToLocalEnv",
    "twx/CoinCollector-v0": "twx_env:CoinCollectorEnv",
    "sciworld/ScienceWorld-v0": "sciworld_env:ScienceWorldEnv",
    "alfworld/ALFWorld-v0": "alfworld_env:ALFWorldEnv",
}
"""Benchmarked id -> entry point (run in-process inside the package's venv)."""

INPROC = """
import importlib, json, resource, sys, time
mod, cls = sys.argv[1].split(":")
t0 = time.perf_counter()
env = getattr(importlib.import_module(mod), cls)(split="test")
make_s = time.perf_counter() - t0
resets, steps, step_s = [], 0, 0.0
for seed in range(int(sys.argv[2])):
    t = time.perf_counter(); env.reset(seed=seed); resets.append(time.perf_counter() - t)
    done = False
    t = time.perf_counter()
    while not done:
        _, _, term, trunc, _ = env.step(env.oracle_action()); steps += 1; done = term or trunc
    step_s += time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"make_s": make_s, "reset_s": sum(resets) / len(resets),
                  "steps_per_s": steps / step_s, "rss_mb": rss}))
"""


def inproc(env_id: str, entry: str, episodes: int) -> dict:
    interp = interpreter_for(env_id)
    out = subprocess.run([str(interp.python), "-c", INPROC, entry, str(episodes)],
                         capture_output=True, text=True, check=True, cwd=interp.manifest.root)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def pooled(env_id: str, num_workers: int, episodes: int) -> float:
    """Oracle steps/s (resets excluded) over a subprocess pool of `num_workers`."""
    pool = make_pool(env_id, num_workers, mode="subprocess", split="test", timeout_s=300)
    steps, step_s = 0, 0.0
    try:
        for start in range(0, episodes, num_workers):
            pool.reset(seeds=list(range(start, start + num_workers)))
            t = time.perf_counter()
            while pool.active:
                acts = {i: pool[i].oracle_action() for i in pool.active}
                pool.step(acts)
                steps += len(acts)
            step_s += time.perf_counter() - t
    finally:
        pool.close()
    return steps / step_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", nargs="*", default=list(ENVS), help="env ids to measure")
    p.add_argument("--episodes", type=int, default=4, help="oracle episodes per measurement")
    p.add_argument("--num-workers", type=int, default=2, help="subprocess pool size")
    p.add_argument("--json", default=None, help="JSON file (default bench/results/real_envs.json)")
    args = p.parse_args()
    rows = []
    print(
        "| env | make s | reset s | steps/s in-process | steps/s subprocess x"
        f"{args.num_workers} | RSS MB |\n|---|---|---|---|---|---|"
    )
    for env_id in args.envs:
        load_before = os.getloadavg()[0]
        r = inproc(env_id, ENVS[env_id], args.episodes)
        r["env"], r["pool_steps_per_s"] = env_id, pooled(env_id, args.num_workers, args.episodes)
        r["loadavg_before_after"] = [load_before, os.getloadavg()[0]]
        rows.append(r)
        print(f"| {env_id} | {r['make_s']:.2f} | {r['reset_s']:.3f} | {r['steps_per_s']:.1f} | "
              f"{r['pool_steps_per_s']:.1f} | {r['rss_mb']:.0f} |", flush=True)  # fmt: skip
    doc = {"machine": cpu_facts(), "episodes": args.episodes, "num_workers": args.num_workers,
           "rows": rows}  # fmt: skip
    print(f"wrote {write_json(doc, args.json, 'real_envs')}")


if __name__ == "__main__":
    main()
