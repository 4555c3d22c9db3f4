"""Where a pretrained model's RL step goes on this CPU (issue 45, requirement 2).

One `RLTrainer` per env x dtype runs the documented SmolLM2 recipe (docs/training.md, "Use
a pretrained model"): SmolLM2-135M-Instruct with LoRA (rank 16, alpha 32, q/v), scoring
the env's valid actions (`agent.action_mode=score`), GRPO over 8 tasks x 4 episodes, no
SFT, at `model.dtype=float32` and `bfloat16` (mixed precision: fp32 weights, autocast) in
the same run, on TextWorld-Express Coin Collector, BabyAI GoToLocal and ALFWorld. After
`--warmup` untimed steps, `--steps` steps run inside an `arborl.phases.Profile`: the
library's own phase marks (the rollout's and the trainer's `PhaseTimer`) charge every
moment to the innermost open phase, and forward hooks count the positions the model ran
in each. Phases (rows of the table):

  env         the pool's reset and step calls (env worker processes, IPC)
  prompts     memory, chat template and tokenising of each turn's prompt and candidates
  generate / score   the rollout's model calls (`backend.generate`, or `scored_states`:
              tensors built, forwards, log-probs back to lists)
  ref_logp    the reference (and critic value) passes; the local engine runs no
              old-logprob pass: old log-probs are the rollout's own scores
  update      `engine.update`: forward, backward, clipping, AdamW, per micro-batch
  overhead    the step's wall less the phases above: the rollout loop, batch building,
              rewards, advantages, metrics (split in the JSON's `overhead_parts`)

FLOPs count the matrix products a position goes through: 2 x N_body per decoder position
(N_body: the Linear weights of the decoder layers, LoRA's included) plus 2 x N_head per
position the LM head ran on (`logits_to_keep` runs it on fewer); attention's
context-length products are left out. The update counts (4 + 2 f) x that, f being the
trainable share of those weights: forward 2, input gradients 2, weight gradients 2 for
trained weights only. Full fine-tuning gives the usual 6 x N; LoRA with its frozen base
~4 x N (the 6 x N of a full backward would overstate LoRA's work by half); + 2 with
activation checkpointing. Each phase's GFLOP/s is set against the GEMM rate this script
measures for its dtype (`F.linear` on the decoder layer's shapes at `--gemm-tokens` rows,
the trainer's thread count).

    python bench/pretrained_step.py                    # 3 envs x fp32, bf16 (~tens of min)
    python bench/pretrained_step.py --envs twx --dtypes float32 --num-tasks 2 --group-size 2
    python bench/pretrained_step.py --model tiny-1m --envs maze --warmup 0   # smoke run

The env packages must be set up (`arborl env add envpkgs/twx && arborl env setup
twx/CoinCollector-v0`, the same for babyai/GoToLocal-v0 and alfworld/ALFWorld-v0, whose
games come from ALFWORLD_DATA or ARBORL_ALFWORLD_ARCHIVES, which the bench points at
../shared/data/alfworld beside the checkout when neither is set); an env that fails is
reported as skipped with the reason, and the others run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import tempfile
import time
from pathlib import Path

from common import format_table, machine_info, write_json

REPO = Path(__file__).resolve().parents[1]
ENVS = {  # bench name -> (env config group, default max turns)
    "twx": ("twx_coin", 15),  # the TWX recipe's 15 turns
    "babyai": ("babyai", 24),  # the BabyAI first look's 24 turns (issue 45's target step)
    "alfworld": ("alfworld", 20),  # issue 45's 20-turn evaluation
    "maze": ("maze", 8),  # built in: the smoke run's env (no package to set up)
}
RECIPE = [
    "agent.action_mode=score", "model.lora_rank=16", "model.lora_alpha=32", "algo.lr=3e-4",
    "sft.enabled=false", "eval.every=0", "trainer.progress=false", "trainer.plots=false",
    "trainer.report=false", "trainer.save_every=0", "trainer.loggers=[]",
    "trainer.save_trajectories=0",
]  # fmt: skip
ROWS = ("env", "prompts", "model", "ref_logp", "update")
"""The phases of the table; `model` is shown as generate or score, as the step ran."""
MODEL_PHASES = ("generate", "score")
REF_PHASES = ("ref_logp", "values")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--envs",
        nargs="+",
        default=["twx", "babyai", "alfworld"],
        choices=list(ENVS),
        help="envs to run (maze: built in, for smoke runs)",
    )
    ap.add_argument(
        "--dtypes",
        nargs="+",
        default=["float32", "bfloat16"],
        choices=["float32", "bfloat16"],
        help="model.dtype values, each its own trainer",
    )
    ap.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        help="model.name_or_path (tiny-1m for a quick smoke run)",
    )
    ap.add_argument("--num-tasks", type=int, default=8, help="rollout.num_tasks (recipe: 8)")
    ap.add_argument("--group-size", type=int, default=4, help="rollout.group_size (recipe: 4)")
    ap.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="rollout.max_turns for every env (default per env: twx 15, babyai 24, "
        "alfworld 20, maze 8)",
    )
    ap.add_argument("--threads", type=int, default=2, help="trainer.num_threads (and the GEMMs')")
    ap.add_argument("--warmup", type=int, default=1, help="untimed RL steps first, per trainer")
    ap.add_argument("--steps", type=int, default=1, help="profiled RL steps per trainer")
    ap.add_argument(
        "--kl-coef",
        type=float,
        default=0.0,
        help="algo.kl_coef (recipe: 0, no reference pass; > 0 measures one)",
    )
    ap.add_argument(
        "--gemm-tokens",
        type=int,
        default=512,
        help="rows of the GEMM-rate measurement (a scoring or update forward's size)",
    )
    ap.add_argument(
        "--gemm-seconds", type=float, default=1.0, help="seconds of GEMMs per dtype for the rate"
    )
    ap.add_argument(
        "--force-bf16",
        action="store_true",
        help="run bf16 steps even where bf16 GEMMs measure under half float32's rate (emulated)",
    )
    ap.add_argument(
        "--out", default=None, help="JSON path (default bench/results/pretrained_step.json)"
    )
    ap.add_argument("overrides", nargs="*", help="extra train config overrides (key=value)")
    return ap.parse_args(argv)  # fmt: skip


def machine(threads: int) -> dict:
    """`common.machine_info` (lscpu's model name as `cpu_model`), the commit and the date."""
    info = machine_info(threads)
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)  # fmt: skip
    info["commit"] = head.stdout.strip() or None
    info["dirty"] = bool(dirty.stdout.strip())
    info["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return info


def gemm_rate(shapes: list[tuple[int, int]], tokens: int, dtype: str, seconds: float) -> dict:
    """GFLOP/s of `F.linear` over `shapes` ((in, out) weights, a decoder layer's products)
    at `tokens` rows, in `dtype`, on torch's current threads; and per shape."""
    import torch
    import torch.nn.functional as F

    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    per_shape = {}
    total_flop = total_s = 0.0
    for n_in, n_out in shapes:
        x = torch.randn(tokens, n_in, generator=gen).to(dt)
        w = torch.randn(n_out, n_in, generator=gen).to(dt)
        flop = 2.0 * tokens * n_in * n_out
        F.linear(x, w)  # first call: kernel selection, packing
        reps, t0 = 0, time.perf_counter()
        while (spent := time.perf_counter() - t0) < seconds / len(shapes) or reps < 3:
            F.linear(x, w)
            reps += 1
        per_shape[f"{tokens}x{n_in}x{n_out}"] = reps * flop / spent / 1e9
        total_flop, total_s = total_flop + reps * flop, total_s + spent
    return {"gflops": total_flop / total_s / 1e9, "per_shape": per_shape, "tokens": tokens}


def layer_shapes(model) -> list[tuple[int, int]]:
    """(in, out) of a decoder layer's projections: q, k, v, o, gate, up, down."""
    c = model.config
    h, inter = c.hidden_size, c.intermediate_size
    kv = c.num_key_value_heads * (getattr(c, "head_dim", None) or h // c.num_attention_heads)
    return [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)]


def model_sizes(model) -> dict:
    """N_body (Linear weights of the decoder layers, adapters included), N_head, the
    trainable share of N_body and whether activation checkpointing is on."""
    import torch

    from arborl.models.scoring import checkpointing

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = inner.get_output_embeddings()
    linears = [m for m in inner.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    body = sum(m.weight.numel() for m in linears)
    trained = sum(m.weight.numel() for m in linears if m.weight.requires_grad)
    return {"n_body": body, "n_head": head.weight.numel(), "trainable_share": trained / body,
            "checkpointing": checkpointing(model)}  # fmt: skip


def flop_factor(sizes: dict, backward: bool) -> float:
    """FLOPs per weight and position: 2 forward; + 2 input gradients + 2 x the trainable
    share for weight gradients with a backward; + 2 for checkpointing's recompute."""
    if not backward:
        return 2.0
    return 4.0 + 2.0 * sizes["trainable_share"] + (2.0 if sizes["checkpointing"] else 0.0)


def phase_rows(prof, wall: float, sizes: dict, rate: float, mode: str) -> dict[str, dict]:
    """Per phase: wall s, share, positions (padded, real, head), FLOPs, GFLOP/s and the
    fraction of `rate`; `overhead` is `wall` less the named phases."""
    groups = {"env": ("env",), "prompts": ("prompts",), "model": MODEL_PHASES,
              "ref_logp": REF_PHASES, "update": ("update",)}  # fmt: skip
    rows = {}
    for row, names in groups.items():
        secs = sum(prof.seconds.get(n, 0.0) for n in names)
        counts = {k: sum(prof.tokens[n][k] for n in names if n in prof.tokens)
                  for k in ("positions", "real", "head", "forwards")}  # fmt: skip
        factor = flop_factor(sizes, backward=row == "update")
        flop = factor * (sizes["n_body"] * counts["positions"] + sizes["n_head"] * counts["head"])
        achieved = flop / secs / 1e9 if secs > 0 else 0.0
        rows[mode if row == "model" else row] = {
            "wall_s": secs, **{f"tokens_{k}": v for k, v in counts.items()},
            "flop_factor": factor, "gflop": flop / 1e9, "gflops": achieved,
            "gemm_fraction": achieved / rate if rate else None,
        }  # fmt: skip
    named = sum(r["wall_s"] for r in rows.values())
    rows["overhead"] = {"wall_s": wall - named, "tokens_positions": 0, "tokens_real": 0,
                        "tokens_head": 0, "tokens_forwards": 0, "flop_factor": 0.0,
                        "gflop": 0.0, "gflops": 0.0, "gemm_fraction": 0.0}  # fmt: skip
    for r in rows.values():
        r["share"] = r["wall_s"] / wall if wall > 0 else 0.0
    return rows


def build_trainer(env: str, dtype: str, args, out_dir: str):
    from arborl.train.config import load_train_config
    from arborl.train.rl import RLTrainer

    group, turns = ENVS[env]
    overrides = [
        f"env={group}", f"model.name_or_path={args.model}", f"model.dtype={dtype}", *RECIPE,
        f"rollout.num_tasks={args.num_tasks}", f"rollout.group_size={args.group_size}",
        f"rollout.max_turns={args.max_turns or turns}", f"algo.kl_coef={args.kl_coef}",
        f"trainer.num_threads={args.threads}", f"trainer.output_dir={out_dir}",
        f"trainer.name={env}-{dtype}", *args.overrides,
    ]  # fmt: skip
    return RLTrainer(load_train_config(overrides))


def profile_steps(trainer, args) -> dict:
    """`--warmup` steps, then `--steps` profiled ones: the Profile's seconds and tokens
    summed over them, the step walls and each step's episode figures."""
    from arborl import phases

    for _ in range(args.warmup):
        trainer.rl_step()
        trainer.step += 1
    models = (trainer.engine.model, getattr(trainer.engine, "ref", None))
    handles = [h for m in models if m is not None for h in phases.watch_model(m)]
    prof, steps = phases.Profile(), []
    try:
        for _ in range(args.steps):
            with prof:
                metrics = trainer.rl_step()
            trainer.step += 1
            steps.append({"wall_s": prof.wall - sum(s["wall_s"] for s in steps),
                          "mean_turns": metrics["train/mean_turns"],
                          "success": metrics["train/success"],
                          "rows": metrics.get("train/rows_with_signal", 0.0),
                          "load1": os.getloadavg()[0]})  # fmt: skip
    finally:
        for h in handles:
            h.remove()
    return {"prof": prof, "steps": steps}


def emulated_bf16(rates: dict) -> str | None:
    """Why a bf16 step is not worth running here: bf16 GEMMs at under half float32's rate
    mean no bf16 matrix unit (emulation; an AVX2-only CPU runs them at ~1 GFLOP/s), and a
    SmolLM2 step would take hours. None when bf16 is worth measuring."""
    if "float32" not in rates or "bfloat16" not in rates:
        return None
    fp32, bf16 = rates["float32"]["gflops"], rates["bfloat16"]["gflops"]
    if bf16 >= fp32 / 2:
        return None
    return (
        f"bf16 GEMMs run {bf16:.2f} GFLOP/s against float32's {fp32:.1f} on this CPU (no "
        "bf16 matrix unit: emulated), so a step would take hours; --force-bf16 runs it"
    )


def run_one(env: str, dtype: str, args, rates: dict) -> dict:
    """One trainer's profiled steps as table rows (or `skipped` with the reason)."""
    with tempfile.TemporaryDirectory(prefix="arborl-pretrained-step-") as tmp:
        try:
            trainer = build_trainer(env, dtype, args, tmp)
        except Exception as e:  # an env package not set up, Java missing, no game data...
            return {"skipped": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:400]}"}
        try:
            model = trainer.engine.model
            key = dtype
            if key not in rates:  # measured once per dtype, on the first model's shapes
                rates[key] = gemm_rate(layer_shapes(model), args.gemm_tokens, dtype,
                                       args.gemm_seconds)  # fmt: skip
            slow = emulated_bf16(rates) if dtype == "bfloat16" and not args.force_bf16 else None
            if slow:
                return {"skipped": slow, "gemm_gflops": rates[dtype]["gflops"]}
            sizes = model_sizes(model)
            run = profile_steps(trainer, args)
        except Exception as e:  # an env that starts but fails in its step: report, go on
            return {"skipped": f"failed in a step: {type(e).__name__}: {str(e)[:400]}"}
        finally:
            trainer.engine.close()
    prof = run["prof"]
    mode = trainer.cfg.agent.action_mode
    rows = phase_rows(prof, prof.wall, sizes, rates[dtype]["gflops"], mode)
    known = {"env", "prompts", *MODEL_PHASES, *REF_PHASES, "update"}
    parts = {k: v for k, v in prof.seconds.items() if k not in known}
    return {"wall_s": prof.wall, "steps": run["steps"], "phases": rows,
            "overhead_parts": parts, "model": sizes, "gemm_gflops": rates[dtype]["gflops"],
            "load1_after": os.getloadavg()[0]}  # fmt: skip


def table(results: dict) -> str:
    headers = ["env", "dtype", "phase", "wall s", "share", "tokens", "real", "GFLOP",
               "GFLOP/s", "of GEMM rate"]  # fmt: skip
    lines = []
    for env, by_dtype in results.items():
        for dtype, r in by_dtype.items():
            if "skipped" in r:
                lines.append([env, dtype, "skipped", r["skipped"], "", "", "", "", "", ""])
                continue
            for name, p in r["phases"].items():
                lines.append([env, dtype, name, p["wall_s"], p["share"], p["tokens_positions"],
                              p["tokens_real"], p["gflop"], p["gflops"], p["gemm_fraction"]])  # fmt: skip
            lines.append([env, dtype, "step", r["wall_s"], 1.0, "", "", "", "", ""])
    return format_table(headers, lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    shared = REPO.parent / "shared" / "data" / "alfworld"  # the offline archives, as tests use
    if not os.environ.get("ALFWORLD_DATA") and shared.is_dir():
        os.environ.setdefault("ARBORL_ALFWORLD_ARCHIVES", str(shared))
    load_before = list(os.getloadavg())
    rates: dict = {}
    results = {env: {} for env in args.envs}
    for env in args.envs:
        for dtype in args.dtypes:
            print(f"{env} {dtype}: building the trainer and running "
                  f"{args.warmup} + {args.steps} step(s)", flush=True)  # fmt: skip
            results[env][dtype] = r = run_one(env, dtype, args, rates)
            print("  " + r.get("skipped", f"{r.get('wall_s', 0.0):.1f} s"), flush=True)
    info = machine(args.threads)
    info["loadavg_before"] = load_before
    print(table(results))
    print("GEMM rate (GFLOP/s, F.linear on the decoder layer's shapes, "
          f"{args.gemm_tokens} rows, {args.threads} threads): "
          + ", ".join(f"{d} {r['gflops']:.1f}" for d, r in rates.items()))  # fmt: skip
    print(
        f"CPU {info['cpu_model']}, load {load_before} before, {info['loadavg']} after, "
        f"commit {info['commit']}{' (dirty)' if info['dirty'] else ''}, {info['date']}"
    )
    config = {k: v for k, v in vars(args).items() if k != "out"}
    config["recipe"] = RECIPE
    doc = {"machine": info, "config": config, "gemm": rates, "results": results}
    print("wrote", write_json(doc, args.out, "pretrained_step"))


if __name__ == "__main__":
    main()
