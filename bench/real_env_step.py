"""Real-benchmark RL in seconds (issue 30, requirement 2): a BabyAI GoToLocal GRPO step of
16 tasks x 8 episodes in generation and in scoring mode, 200 held-out episodes of BabyAI
and of TextWorld-Express Coin Collector, and the SFT step on BabyAI demos, each split into
where its time goes. Targets on 2 cores of a quiet machine: step <= 20 s, 200 episodes
<= 60 s, SFT <= 0.5 s a step.

Each env gets one `RLTrainer` (its `env=` config group, `--model`, default envbpe-tiny-0.1m,
with `agent.max_obs_chars=null`; 2 worker processes per default `env.num_workers=0` on 2
cores), an SFT warm start on oracle demos (300 steps at lr 3e-3: episodes as long as a
trained policy's, ~60% won on BabyAI, not a random one's 64 turns), then timed work:
RL steps in each mode from the same SFT weights, an evaluation per mode, and 30 SFT steps
on a copy of the policy. Parts (wall seconds, and CPU seconds of this process, which on a
busy machine is close to what a 1-thread part takes with a core to itself; env workers'
CPU is not in it):

  env           the pools' reset and step (calls into the worker processes)
  policy        the policy's `act`: generation (prefill + decode) or candidate scoring,
                prompts included
  update        the optimizer step(s): forward, backward, AdamW
  bookkeeping   the rest: batch building, rewards, advantages, trajectories, metrics
  process start starting the run's worker processes (once per run, not per step)

    ARBORL_HOME=~/.cache/arborl-test/home python bench/real_env_step.py
    python bench/real_env_step.py --quick               # 4 x 4 step, 40 episodes: a smoke run
    python bench/real_env_step.py --model envbpe-tiny-1m --view compact --threads 1

The packages must be set up (`arborl env add envpkgs/babyai && arborl env setup
babyai/GoToLocal-v0`, the same for envpkgs/twx; `--setup` does both).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from common import format_table, machine_info, write_json

import arborl.rollout.loop as rollout_loop
import arborl.train.evaluate as evaluate_mod
import arborl.train.sft as sft_mod
from arborl.envs import EnvPool, RemotePool
from arborl.envs.remote.subproc import EnvWorkers
from arborl.train.config import load_train_config
from arborl.train.engine import LocalEngine
from arborl.train.rl import RLTrainer

TARGETS = {"step": 20.0, "eval": 60.0, "sft_step": 0.5}
REPO = Path(__file__).resolve().parents[1]


class Timers:
    """Wall and CPU seconds per named part since the last `reset` (nested calls of one
    part counted once)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._inside: set[str] = set()

    def reset(self) -> None:
        self.wall.clear()
        self.cpu.clear()

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if name in self._inside:
                return fn(*args, **kwargs)
            self._inside.add(name)
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[name] += time.perf_counter() - t0
                self.cpu[name] += time.process_time() - c0
                self._inside.discard(name)

        return timed


TIMERS = Timers()


def instrument() -> None:
    """Time every pool's reset/step, every LM policy's act, and worker starts."""
    for cls in (EnvPool, RemotePool):
        cls.reset = TIMERS.wrap("env", cls.reset)
        cls.step = TIMERS.wrap("env", cls.step)
    EnvWorkers.ensure = TIMERS.wrap("process start", EnvWorkers.ensure)
    for method in ("update", "reference_logp", "values"):  # the model work of the update
        setattr(LocalEngine, method, TIMERS.wrap("update", getattr(LocalEngine, method)))

    def timed_policy(make):
        @functools.wraps(make)
        def build(*args, **kwargs):
            policy = make(*args, **kwargs)
            policy.act = TIMERS.wrap("policy", policy.act)
            return policy

        return build

    rollout_loop.make_lm_policy = timed_policy(rollout_loop.make_lm_policy)
    evaluate_mod.make_lm_policy = timed_policy(evaluate_mod.make_lm_policy)


def split(total_wall: float, total_cpu: float) -> dict[str, float]:
    """The parts of one timed piece of work; bookkeeping is what no part covers."""
    out = {"total": total_wall, "cpu/total": total_cpu}
    for part in ("env", "policy", "update", "process start"):
        out[part] = TIMERS.wall.get(part, 0.0)
        out[f"cpu/{part}"] = TIMERS.cpu.get(part, 0.0)
    out["bookkeeping"] = total_wall - sum(out[p] for p in ("env", "policy", "update"))
    out["bookkeeping"] -= out["process start"]
    out["cpu/bookkeeping"] = total_cpu - sum(
        out[f"cpu/{p}"] for p in ("env", "policy", "update", "process start")
    )
    return out


def timed(fn, *args, **kwargs):
    """(fn's result, `split` of its time)."""
    TIMERS.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, split(time.perf_counter() - t0, time.process_time() - c0)


def build_trainer(env: str, args, out_dir: str, mode: str = "generate") -> RLTrainer:
    overrides = [
        f"env={env}", f"model.name_or_path={args.model}", f"agent.action_mode={mode}",
        f"rollout.num_tasks={args.num_tasks}", f"rollout.group_size={args.group_size}",
        f"sft.steps={args.sft_steps}", f"sft.num_demos={args.num_demos}", "sft.lr=3e-3",
        "agent.max_obs_chars=null", "eval.every=0", "trainer.progress=false",
        "trainer.plots=false", "trainer.report=false", "trainer.save_every=0",
        f"trainer.output_dir={out_dir}", f"trainer.name={env}-{mode}",
    ]  # fmt: skip
    if args.threads:
        overrides.append(f"trainer.num_threads={args.threads}")
    if args.view and env == "babyai":
        overrides.append(f"env.kwargs.view={args.view}")
    return RLTrainer(load_train_config(overrides + list(args.overrides)))


def warm_start(trainer: RLTrainer, cache: Path | None) -> dict:
    """SFT the trainer's policy (or load it from `cache`); the whole warm start's time."""
    eng = trainer.engine
    if cache is not None and cache.exists():
        eng.model.load_state_dict(torch.load(cache))
        return {"cached": cache.name}  # a name, never a machine path
    _, whole = timed(eng.prepare, True)
    if cache is not None:
        torch.save(eng.model.state_dict(), cache)
    return {"sft_total": whole}


def sft_step_time(trainer: RLTrainer, num_steps: int) -> dict:
    """Seconds per step of `run_sft` on the run's demos at `sft.batch_size`, on a copy of
    the policy (the warm start is left as it is)."""
    cfg, eng = trainer.cfg, trainer.engine
    demos = sft_mod.load_demos(cfg, eng.pools)
    examples = sft_mod.build_sft_examples(demos, eng.tokenizer, cfg.agent,
                                          cfg.rollout.max_prompt_tokens)  # fmt: skip
    model = copy.deepcopy(eng.model)
    sft_cfg = dataclasses.replace(cfg.sft, steps=num_steps)
    _, t = timed(sft_mod.run_sft, model, eng.tokenizer, examples, sft_cfg, progress=False)
    lengths = [len(e.prompt_ids) + len(e.response_ids) for e in examples]
    return {"sft_step_s": t["total"] / num_steps, "sft_step_cpu_s": t["cpu/total"] / num_steps,
            "sft_steps": num_steps, "sft_batch_size": cfg.sft.batch_size,
            "sft_examples": len(examples),
            "sft_mean_tokens": sum(lengths) / len(lengths)}  # fmt: skip


def rl_steps(trainer: RLTrainer, num_steps: int) -> list[dict]:
    rows = []
    for _ in range(num_steps):
        metrics, t = timed(trainer.rl_step)
        trainer.step += 1
        t.update(mean_turns=metrics["train/mean_turns"], success=metrics["train/success"],
                 rows=metrics.get("train/rows_with_signal", 0.0))  # fmt: skip
        t["load1"] = os.getloadavg()[0]
        rows.append(t)
        print(f"  step {trainer.step}: {t['total']:.1f} s (env {t['env']:.1f}, policy "
              f"{t['policy']:.1f}, update {t['update']:.1f}, bookkeeping "
              f"{t['bookkeeping']:.1f}), turns {t['mean_turns']:.1f}, success "
              f"{t['success']:.2f}, load {t['load1']:.1f}", flush=True)  # fmt: skip
    return rows


def evaluation(trainer: RLTrainer, num_episodes: int) -> dict:
    ev, t = timed(trainer.engine.evaluate, num_episodes)
    t.update(success=ev.success, mean_turns=ev.means.get("mean_turns", 0.0))
    t["load1"] = os.getloadavg()[0]
    print(f"  eval {num_episodes}: {t['total']:.1f} s (env {t['env']:.1f}, policy "
          f"{t['policy']:.1f}), success {t['success']:.3f}, turns {t['mean_turns']:.1f}, "
          f"load {t['load1']:.1f}", flush=True)  # fmt: skip
    return t


def bench_env(env: str, args, out_dir: str, cache_dir: Path | None, with_steps: bool) -> dict:
    """SFT, then (BabyAI) RL steps in each mode from the same SFT policy, and the held-out
    evaluation in each mode."""
    print(f"{env}:", flush=True)
    result: dict = {}
    TIMERS.reset()
    t0 = time.perf_counter()
    trainer = build_trainer(env, args, out_dir)
    result["start"] = {"total": time.perf_counter() - t0, **dict(TIMERS.wall)}
    try:
        view = f"-{args.view}" if args.view and env == "babyai" else ""  # BabyAI's only
        cache = cache_dir / f"{env}{view}-{args.model}-{args.sft_steps}.pt" if cache_dir else None
        result["warm_start"] = warm_start(trainer, cache)
        result["sft"] = sft_step_time(trainer, args.sft_time_steps)
        print(f"  SFT: {result['sft']['sft_step_s']:.3f} s a step (batch "
              f"{result['sft']['sft_batch_size']}, {result['sft']['sft_mean_tokens']:.0f} "
              "tokens an example)", flush=True)  # fmt: skip
        eng = trainer.engine
        saved = copy.deepcopy((eng.model.state_dict(), eng.opt.state_dict(),
                               eng.sched.state_dict()))  # fmt: skip
        for mode in args.modes:
            eng.model.load_state_dict(saved[0])
            eng.opt.load_state_dict(saved[1])
            eng.sched.load_state_dict(saved[2])
            trainer.cfg.agent.action_mode = mode  # the engine and its policies read it
            print(f" mode {mode}:", flush=True)
            if with_steps:
                result[f"steps/{mode}"] = rl_steps(trainer, args.steps)
            eng.model.load_state_dict(saved[0])  # evaluate the SFT policy in each mode
            result[f"eval/{mode}"] = evaluation(trainer, args.eval_episodes)
        result["process_starts"] = eng.pools.workers.num_starts if eng.pools.workers else 0
    finally:
        trainer.engine.close()
    return result


def lscpu() -> dict:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "Flags")
    facts = {}
    for line in out.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in keep and k.strip() != "Flags":
            facts[k.strip()] = v.strip()
    return facts


def setup_packages() -> None:
    from arborl.envs.packages.isolate import setup_env
    from arborl.envs.packages.userdata import add_package

    for name in ("babyai", "twx"):
        setup_env(add_package(REPO / "envpkgs" / name))


def report(results: dict, args) -> list[list]:
    rows = []
    b = results.get("babyai", {})
    for mode in args.modes:
        steps = b.get(f"steps/{mode}")
        if steps:  # the step of median wall time (steps differ in how many rows train)
            mid = sorted(steps, key=lambda t: t["total"])[(len(steps) - 1) // 2]
            what = f"GRPO step {args.num_tasks}x{args.group_size} BabyAI (median of {len(steps)})"
            rows.append([what, mode, mid])
    for env, name in (("babyai", "BabyAI"), ("twx_coin", "TWX Coin Collector")):
        for mode in args.modes:
            ev = results.get(env, {}).get(f"eval/{mode}")
            if ev:
                rows.append([f"eval {args.eval_episodes} {name}", mode, ev])
    table = []
    for what, mode, t in rows:
        target = TARGETS["step" if what.startswith("GRPO") else "eval"]
        table.append([what, mode, t["total"], t["cpu/total"], t["env"], t["policy"],
                      t["update"], t["bookkeeping"], t["process start"], target,
                      "yes" if t["total"] <= target else "NO"])  # fmt: skip
    sft = b.get("sft") or {}
    if "sft_step_s" in sft:
        table.append([f"SFT step (batch {sft['sft_batch_size']}) BabyAI", "-", sft["sft_step_s"],
                      sft["sft_step_cpu_s"], 0.0, 0.0, sft["sft_step_s"], 0.0, 0.0,
                      TARGETS["sft_step"],
                      "yes" if sft["sft_step_s"] <= TARGETS["sft_step"] else "NO"])  # fmt: skip
    if "start" in b:
        table.append(["run start BabyAI (model, pools, workers)", "-", b["start"]["total"], "",
                      "", "", "", "", b["start"].get("process start", 0.0), "", ""])  # fmt: skip
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="envbpe-tiny-0.1m", help="model preset or checkpoint")
    ap.add_argument("--view", default=None, help="BabyAI observation view (text, compact)")
    ap.add_argument("--modes", nargs="+", default=["generate", "score"], help="agent.action_mode")
    ap.add_argument("--num-tasks", type=int, default=16, help="tasks per RL step")
    ap.add_argument("--group-size", type=int, default=8, help="episodes per task")
    ap.add_argument(
        "--steps", type=int, default=3, help="RL steps per mode (the median is reported)"
    )
    ap.add_argument("--eval-episodes", type=int, default=200, help="held-out episodes per eval")
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT warm start steps per env")
    ap.add_argument("--num-demos", type=int, default=50, help="oracle demos for the SFT")
    ap.add_argument("--sft-time-steps", type=int, default=30, help="SFT steps timed (on a copy)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    ap.add_argument("--envs", nargs="+", default=["babyai", "twx_coin"], help="config groups")
    ap.add_argument("--warm-cache", default=None, help="folder for SFT'd weights (reruns skip SFT)")
    ap.add_argument("--quick", action="store_true", help="4x4 step, 40 episodes, 20 SFT steps")
    ap.add_argument("--setup", action="store_true", help="add and set up the two packages first")
    ap.add_argument("overrides", nargs="*", help="extra train config overrides (key=value)")
    ap.add_argument(
        "--out", default=None, help="JSON path (default bench/results/real_env_step.json)"
    )
    args = ap.parse_args()
    if args.quick:
        args.num_tasks, args.group_size, args.eval_episodes, args.sft_steps = 4, 4, 40, 20
        args.sft_time_steps, args.steps = 5, 2
    if args.setup:
        setup_packages()
    info = machine_info(args.threads or torch.get_num_threads())
    info["lscpu"], info["loadavg_before"] = lscpu(), list(os.getloadavg())
    instrument()
    out_dir = tempfile.mkdtemp(prefix="arborl-real-env-step-")
    cache_dir = Path(args.warm_cache) if args.warm_cache else None
    if cache_dir:
        cache_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for env in args.envs:
        results[env] = bench_env(env, args, out_dir, cache_dir, with_steps=env == "babyai")
    info["loadavg_after"] = list(os.getloadavg())
    headers = ["what", "mode", "wall s", "CPU s", "env", "policy (gen/score)", "update",
               "bookkeeping", "process start", "target s", "met"]  # fmt: skip
    table = report(results, args)
    print(format_table(headers, table))
    print(f"CPU: {info['lscpu'].get('Model name', info.get('cpu_model'))}, "
          f"{info['cpu_count']} CPUs, torch threads {info['torch_num_threads']}; load "
          f"{info['loadavg_before'][0]:.1f} before, {info['loadavg_after'][0]:.1f} after "
          "(1-min average). Wall seconds on a loaded machine overstate; the 'CPU s' "
          "column is this process only (env workers excluded).")  # fmt: skip
    paths = ("warm_cache", "out")  # names only in the JSON, never a machine path
    shown = {k: (Path(v).name if k in paths and v else v) for k, v in vars(args).items()}
    result = {"machine": info, "args": shown, "headers": headers, "table": table,
              "results": results, "targets": TARGETS}  # fmt: skip
    print("wrote", write_json(result, args.out, "real_env_step"))


if __name__ == "__main__":
    main()
