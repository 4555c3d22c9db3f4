"""The demo's RL step (`arborl train` defaults), timed with a breakdown of where it goes.

One `RLTrainer` with the demo config (tiny-1m char model, arborl/Maze-v0 with short
actions, 16 tasks x 8 episodes, up to 16 turns, GRPO, one optimizer step per batch) is
warm-started with the demo's SFT, then runs `--steps` RL steps. Each step is timed end to
end and split into parts by wrapping the functions that do the work (the library is not
changed for this):

  rollout/generate   `HFBackend.generate` (prefill + decode of every turn)
  rollout/env        the pool's `reset` and `step`
  rollout/prompts    `LMPolicy._prompt` (memory, chat template, tokenising)
  rollout/batch      `build_batch` (the step-view tensors)
  rollout/other      the rest of the rollout loop (parsing, records, stats)
  scoring            reference log-probs and critic values (none in the GRPO demo: old
                     log-probs are the sampler's, recorded while generating)
  advantages         rewards, advantages and their diagnostics
  update             `engine.update` (forward, backward, optimizer step)
  bookkeeping        trajectory dump, per-step metrics and `MetricsLogger.log` (metrics.jsonl
                     and TensorBoard, as `fit` does)

Each part is given in wall-clock seconds and in the process's CPU seconds: on a shared,
oversubscribed machine the wall time swings with the other jobs, while the CPU time of a
1-thread step is close to what the step takes with a core to itself.

`--threads 1 2` interleaves steps at 1 and 2 torch threads on the same trainer (A B A B),
so both see the same policy and the same machine load; the table gives medians per choice.

    python bench/rl_step.py                       # 300 SFT steps, then 2 x 8 RL steps
    python bench/rl_step.py --threads 1 --steps 4 --sft-steps 50
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from common import format_table, machine_info, median, write_json

import arborl.rollout.loop as rollout_loop
import arborl.train.rl as rl
from arborl.rollout.policies import LMPolicy
from arborl.train.config import load_train_config
from arborl.train.runlog import MetricsLogger

PARTS = (
    "rollout/generate",
    "rollout/env",
    "rollout/prompts",
    "rollout/batch",
    "rollout/other",
    "scoring",
    "advantages",
    "update",
    "bookkeeping",
    "other",
)
TARGET_S = 1.5


class Timers:
    """Seconds spent in each wrapped function since the last `reset` (re-entry counted once)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def reset(self) -> None:
        self.spent.clear()
        self.cpu.clear()

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] += time.perf_counter() - t0
                self.cpu[name] += time.process_time() - c0

        return timed


def instrument(trainer, timers: Timers) -> None:
    """Wrap the trainer's engine, pool and the rollout helpers with `timers`."""
    eng = trainer.engine
    eng.backend.generate = timers.wrap("rollout/generate", eng.backend.generate)
    eng.pool.step = timers.wrap("rollout/env", eng.pool.step)
    eng.pool.reset = timers.wrap("rollout/env", eng.pool.reset)
    eng.rollout = timers.wrap("rollout", eng.rollout)
    eng.reference_logp = timers.wrap("scoring", eng.reference_logp)
    eng.values = timers.wrap("scoring", eng.values)
    eng.update = timers.wrap("update", eng.update)
    LMPolicy._prompt = timers.wrap("rollout/prompts", LMPolicy._prompt)
    rollout_loop.build_batch = timers.wrap("rollout/batch", rollout_loop.build_batch)
    rl.batch_rewards = timers.wrap("advantages", rl.batch_rewards)
    rl.attach_advantages = timers.wrap("advantages", rl.attach_advantages)
    rl.group_diagnostics = timers.wrap("advantages", rl.group_diagnostics)
    rl.write_trajectories = timers.wrap("bookkeeping", rl.write_trajectories)


def breakdown(spent: dict[str, float], total: float) -> dict[str, float]:
    """The step's seconds per part of PARTS (`other`: what no wrapper saw)."""
    roll = spent.get("rollout", 0.0)
    named = ("rollout/generate", "rollout/env", "rollout/prompts", "rollout/batch")
    out = {k: spent.get(k, 0.0) for k in named}
    out["rollout/other"] = roll - sum(out.values())
    for k in ("scoring", "advantages", "update", "bookkeeping"):
        out[k] = spent.get(k, 0.0)
    out["other"] = total - roll - sum(out[k] for k in ("scoring", "advantages", "update"))
    out["other"] -= out["bookkeeping"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=8, help="RL steps per thread choice")
    ap.add_argument("--warmup", type=int, default=2, help="RL steps first, not timed")
    ap.add_argument(
        "--threads", type=int, nargs="+", default=[1, 2], help="torch threads to compare"
    )
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT warm start (demo: 300)")
    ap.add_argument(
        "--warm-cache",
        default=None,
        help="file of the warm-started policy weights: loaded if it exists, else written "
        "after the SFT (saves the SFT on reruns; the RL steps are the same either way)",
    )
    ap.add_argument("overrides", nargs="*", help="extra train config overrides (key=value)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/rl_step.json)")
    args = ap.parse_args()

    load_before = machine_info(torch.get_num_threads())["loadavg"]
    tmp = tempfile.mkdtemp(prefix="arborl-rl-step-")
    cfg = load_train_config(
        [
            f"sft.steps={args.sft_steps}",
            f"trainer.output_dir={tmp}",
            "trainer.progress=false",
            *args.overrides,
        ]
    )
    trainer = rl.RLTrainer(cfg)
    t0 = time.perf_counter()
    cache = Path(args.warm_cache) if args.warm_cache else None
    if cache is not None and cache.exists():
        trainer.engine.model.load_state_dict(torch.load(cache))
        sft_s = None
    else:
        trainer.engine.prepare(warm_start=args.sft_steps > 0)
        sft_s = time.perf_counter() - t0
        if cache is not None:
            torch.save(trainer.engine.model.state_dict(), cache)
    logger = MetricsLogger(trainer.run, loggers=cfg.trainer.loggers, disable_bar=True)
    timers = Timers()
    instrument(trainer, timers)
    logger.log = timers.wrap("bookkeeping", logger.log)

    runs: dict[int, list[dict[str, float]]] = {n: [] for n in args.threads}
    schedule = [None] * args.warmup + [n for _ in range(args.steps) for n in args.threads]
    for n in schedule:
        torch.set_num_threads(n or args.threads[0])
        timers.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = trainer.rl_step()
        trainer.step += 1
        logger.log(trainer.step, metrics, advance=1)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        if n is None:
            continue
        row = {"total": total, **breakdown(timers.spent, total)}
        row.update({f"cpu/{k}": v for k, v in breakdown(timers.cpu, cpu).items()})
        row["cpu/total"] = cpu
        row["rows"] = metrics.get("train/rows_with_signal", 0.0)
        row["mean_turns"] = metrics["train/mean_turns"]
        row["success"] = metrics["train/success"]
        runs[n].append(row)
        print(f"threads={n} step={trainer.step} {total:.3f}s turns={row['mean_turns']:.1f}")
    logger.close()
    trainer.engine.close()

    medians = {n: {k: median([r[k] for r in rows]) for k in rows[0]} for n, rows in runs.items()}
    headers = ["part", *[f"{n} thread(s) {w}" for n in args.threads for w in ("wall s", "CPU s")]]
    table = [
        [k, *[medians[n][p + k] for n in args.threads for p in ("", "cpu/")]]
        for k in ("total", *PARTS)
    ]
    table.append(["mean turns", *[medians[n]["mean_turns"] for n in args.threads for _ in "ab"]])
    info = machine_info(args.threads[0])
    info["loadavg_before"] = load_before
    print(format_table(headers, table))
    best = min(args.threads, key=lambda n: medians[n]["total"])
    verdict = "met" if medians[best]["total"] <= TARGET_S else "NOT met"
    print(
        f"best: {best} thread(s), {medians[best]['total']:.3f} s a step (wall; "
        f"{medians[best]['cpu/total']:.3f} s of CPU); target <= {TARGET_S} s {verdict} "
        f"(load {info['loadavg']}, CPU {info.get('cpu_model')})"
    )
    print(
        "CPU s: the process's CPU time. With 1 thread on a shared machine it estimates the "
        "step's time when the process has a core to itself; wall s is what it took here."
    )
    result = {
        "machine": info,
        "config": {"sft_steps": args.sft_steps, "steps": args.steps, "overrides": args.overrides},
        "sft_s": sft_s,
        "medians": {str(n): m for n, m in medians.items()},
        "steps": {str(n): r for n, r in runs.items()},
        "best_threads": best,
        "target_s": TARGET_S,
        "met": verdict == "met",
    }
    print("wrote", write_json(result, args.out, "rl_step"))


if __name__ == "__main__":
    main()
