"""Ray mode: rollout throughput (1 vs 2 workers), train-step time (1 vs 2 FSDP2 ranks), and
per-rank memory of parameters + gradients + AdamW states (FSDP2 over 2 ranks vs 1 rank).

The workload is the demo's: Maze, 16 tasks x 8 episodes per rollout, the `tiny-1m` policy
(memory also for `tiny-20m`). Every figure comes from the real worker classes of
`arborl.distributed` on a local Ray instance:

  - rollout: one `rollout` call over `RolloutRole` workers, the 16 tasks split between them
    (weights pushed through the object store first); tokens/s and env steps/s of the call;
  - train step: `update_actor` (one full-batch PPO step, as the demo) over a fixed rollout
    batch on a `TrainRole` group of N ranks (gloo); seconds per step;
  - memory: `memory_bytes` after a step, i.e. this rank's share of parameters, gradients
    and AdamW moments (a 1-rank group holds everything, as an unsharded trainer would).
    Transient buffers (FSDP2's per-block all-gather, activations) are not included.

Settings alternate (1, 2, 1, 2, ...) and medians are reported. On a 2-core machine the 2
processes compete with each other (and with anything else running), so speed-ups here are
a floor, not what separate cores or machines give.

    python bench/distributed.py                  # full run, writes bench/results/distributed.json
    python bench/distributed.py --quick          # 1 repeat, small rollout
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import torch
from common import format_table, machine_info, median, write_json

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

OVERRIDES = ["trainer.progress=false", "algo.drop_zero_adv=false"]


def _cfg(model: str, extra=()):
    from arborl.train.config import load_train_config

    return load_train_config([*OVERRIDES, f"model.name_or_path={model}", *extra])


def _rollout_batch(cfg):
    """A real demo-sized rollout batch with seeded advantages (the untrained policy's
    groups have no reward spread), ready for `update_actor`."""
    from arborl.generation.hf import HFBackend
    from arborl.models import load_policy
    from arborl.rollout import draw_seeds, run_rollout
    from arborl.train.rl import attach_advantages, batch_rewards

    model, tok = load_policy(cfg.model.name_or_path, seed=0)
    res = run_rollout(HFBackend(model, tok, max_batch_size=128), tok, cfg.env.id,
                      draw_seeds(cfg.rollout.num_tasks, 0), cfg.rollout, cfg.agent,
                      env_kwargs=cfg.env.kwargs)  # fmt: skip
    rewards, _ = batch_rewards(res.batch, len(res.trajectories), cfg.reward.sources)
    train, _ = attach_advantages(res.batch, rewards, cfg.algo, None)
    train["adv"] = torch.randn(len(train), generator=torch.Generator().manual_seed(0))
    from arborl.train.engine import ACTOR_KEYS

    return train.select(*ACTOR_KEYS), model


def _train_group(ray, cfg, n: int):
    from arborl.distributed.dispatch import WorkerGroup
    from arborl.distributed.workers import TrainRole

    actor = ray.remote(TrainRole).options(num_cpus=0.5)
    group = WorkerGroup(TrainRole, [actor.remote(cfg, r, n, None) for r in range(n)])
    addr, port = group.call("rendezvous_address")
    group.call("setup", addr, port)
    return group


def _rollout_group(ray, cfg, n: int, state):
    from arborl.distributed.dispatch import WorkerGroup
    from arborl.distributed.workers import RolloutRole

    actor = ray.remote(RolloutRole).options(num_cpus=0.5)
    group = WorkerGroup(RolloutRole, [actor.remote(cfg, w, None) for w in range(n)])
    group.call("set_weights", ray.put(state), 0)
    return group


def bench_rollout(ray, cfg, repeats: int) -> list[dict]:
    from arborl.distributed.engine import shares
    from arborl.distributed.sharding import state_to_numpy
    from arborl.models import load_policy
    from arborl.rollout import draw_seeds

    model, _ = load_policy(cfg.model.name_or_path, seed=0)
    state = state_to_numpy(model.state_dict())
    groups = {n: _rollout_group(ray, cfg, n, state) for n in (1, 2)}
    times: dict[int, list] = {1: [], 2: []}
    out = {}
    for rep in range(repeats + 1):  # repeat 0 warms up
        for n, group in groups.items():
            seeds = draw_seeds(cfg.rollout.num_tasks, 100 + rep)
            parts = [{"seeds": s, "group_offset": o, "seed": rep} for o, s in shares(seeds, n)]
            t0 = time.perf_counter()
            res = group.call("rollout", parts, 0)
            wall = time.perf_counter() - t0
            tokens = sum(sum(e.generated_tokens for e in r["episodes"]) for r in res)
            steps = sum(len(r["batch"]) for r in res)
            if rep:
                times[n].append((wall, tokens, steps))
    for n, rows in times.items():
        wall = median([w for w, _, _ in rows])
        out[n] = {
            "workers": n,
            "rollout_s": wall,
            "tokens_per_s": median([t / w for w, t, _ in rows]),
            "env_steps_per_s": median([s / w for w, _, s in rows]),
        }
    for g in groups.values():
        for h in g.handles:
            ray.kill(h)
    return list(out.values())


def bench_train(ray, cfg, repeats: int, batch) -> list[dict]:
    groups = {n: _train_group(ray, cfg, n) for n in (1, 2)}
    times: dict[int, list] = {1: [], 2: []}
    tokens = int(batch.tensors["attention_mask"].sum())
    for rep in range(repeats + 1):
        for n, group in groups.items():
            t0 = time.perf_counter()
            group.call("update_actor", [batch], batch[:1], 1.0, 0.0)
            if rep:
                times[n].append(time.perf_counter() - t0)
    out = []
    for n, group in groups.items():
        mem = group.call("memory_bytes")
        out.append(
            {
                "ranks": n,
                "step_s": median(times[n]),
                "tokens_per_s": tokens / median(times[n]),
                "rows": len(batch),
                "per_rank_mib": [sum(m.values()) / 2**20 for m in mem],
                "per_rank_detail_bytes": mem,
            }
        )
        for h in group.handles:
            ray.kill(h)
    return out


def bench_memory(ray, model_name: str) -> list[dict]:
    cfg = _cfg(model_name, ["rollout.num_tasks=2", "rollout.group_size=2", "rollout.max_turns=2"])
    batch, _ = _rollout_batch(cfg)
    rows = []
    for n in (1, 2):
        group = _train_group(ray, cfg, n)
        group.call("update_actor", [batch], batch[:1], 1.0, 0.0)
        mem = group.call("memory_bytes")
        rows.append(
            {
                "model": model_name,
                "ranks": n,
                "per_rank_mib": [sum(m.values()) / 2**20 for m in mem],
            }
        )
        for h in group.handles:
            ray.kill(h)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--repeats", type=int, default=3, help="timed repeats per setting (after 1 warm-up)"
    )
    p.add_argument("--quick", action="store_true", help="1 repeat, 4 rollout tasks (smoke test)")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/distributed.json)")
    args = p.parse_args()
    torch.set_num_threads(1)
    import ray

    repeats = 1 if args.quick else args.repeats
    extra = ["rollout.num_tasks=4"] if args.quick else []
    cfg = _cfg("tiny-1m", extra)
    from arborl.envs.remote.ray_pool import init_local_ray

    init_local_ray(num_cpus=2, log_to_driver=False)
    try:
        t0 = time.perf_counter()
        rollout = bench_rollout(ray, cfg, repeats)
        batch, _ = _rollout_batch(replace(cfg, rollout=replace(cfg.rollout, seed=1)))
        train = bench_train(ray, cfg, repeats, batch)
        memory = bench_memory(ray, "tiny-1m") + (
            [] if args.quick else bench_memory(ray, "tiny-20m")
        )
        wall = time.perf_counter() - t0
    finally:
        ray.shutdown()
    print(format_table(["rollout workers", "rollout s", "tokens/s", "env steps/s"],
                       [[r["workers"], r["rollout_s"], r["tokens_per_s"], r["env_steps_per_s"]]
                        for r in rollout]))  # fmt: skip
    print()
    print(format_table(["train ranks", "step s", "tokens/s", "rows"],
                       [[r["ranks"], r["step_s"], r["tokens_per_s"], r["rows"]] for r in train]))  # fmt: skip
    print()
    print(format_table(["model", "ranks", "params+grads+AdamW MiB per rank"],
                       [[m["model"], m["ranks"], " / ".join(f"{x:.2f}" for x in m["per_rank_mib"])]
                        for m in memory]))  # fmt: skip
    result = {
        "bench": "distributed",
        "settings": {
            "model": cfg.model.name_or_path,
            "num_tasks": cfg.rollout.num_tasks,
            "group_size": cfg.rollout.group_size,
            "repeats": repeats,
        },  # fmt: skip
        "machine": machine_info(1),
        "rollout": rollout,
        "train_step": train,
        "memory": memory,
        "wall_s": wall,
    }
    print(f"\nwrote {write_json(result, args.out, 'distributed')}")


if __name__ == "__main__":
    main()
