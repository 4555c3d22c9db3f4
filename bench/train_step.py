"""One GRPO training step, arborl against TRL's GRPOTrainer, on the same model and data.

A step is 8 prompts x 4 samples with exactly 32 new tokens each (EOS cannot end a sample
early on either side: TRL gets `min_new_tokens=32`, arborl's backend is given no EOS ids),
the same reward function, group-normalised advantages, no KL (beta=0), one epoch of one
minibatch of 32 and AdamW at lr 1e-4 with gradient clipping at 1.0.

  - arborl: `HFBackend.generate` (32 prompts, logprobs recorded while sampling), the reward
    function, `arborl.algos.grpo` advantages, a step-view `Batch` (layout of
    `arborl.rollout.batching`) and `arborl.train.update.actor_update` over
    `minibatch_schedule` (token-mean, clip 0.2).
  - TRL: `GRPOTrainer` with the config of docs/research feasibility §6, loading the same
    weights from a saved directory; a callback times each optimizer step (end to end,
    data loading and logging included).

Precision is the same on both sides: fp32 (`--dtypes float32`), or bf16 mixed precision
(`--dtypes bfloat16`): fp32 weights and AdamW, every forward and backward under
`torch.autocast` in bf16 (TRL: `bf16=True`, which autocasts the model's forward, generation
included; arborl: `arborl.models.autocast_ctx`, what `model.dtype=bfloat16` does in a run).
TRL's GRPOConfig turns gradient checkpointing on by default (a second forward in every
backward); arborl does not checkpoint, so TRL runs with it off unless
`--trl-gradient-checkpointing` (the like-for-like comparison is the default).

Each side runs `--steps` steps from the same saved weights per repeat; the first step of
each run is a warm-up and is dropped. Sides alternate (A B, B A, ...) in one process. Every
step's wall and process CPU seconds are kept (1 thread: CPU time is close to the step's time
with a core to itself, on a shared machine).

    python bench/train_step.py                          # tiny-1m and tiny-20m, fp32 + bf16
    python bench/train_step.py --models tiny-1m --dtypes float32 --quick --repeats 1
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from typing import Any

import torch
from common import format_table, machine_info, median, ratio, write_json

from arborl import algos
from arborl.data import Batch
from arborl.generation.base import SamplingParams
from arborl.generation.hf import HFBackend
from arborl.models import autocast_ctx, load_policy
from arborl.train.config import AlgoConfig
from arborl.train.update import actor_update, minibatch_schedule

NUM_PROMPTS, GROUP_SIZE, NEW_TOKENS, LR = 8, 4, 32, 1e-4
TARGET = 0.5
"""Issue 20: arborl's step at most half of TRL's."""


def make_data(num: int = 256, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(num):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        rows.append({"prompt": f"Q: {a}+{b}=? A:", "answer": str(a + b)})
    return rows


def reward_answer(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """1 if the answer appears in the completion, plus up to 0.1 for digits (a dense hint)."""
    out = []
    for text, ans in zip(completions, answer):
        digits = sum(ch.isdigit() for ch in text)
        out.append(float(ans in text) + 0.1 * min(digits, 5) / 5)
    return out


# --- arborl ----------------------------------------------------------------------------------


def arborl_step(model, tok, backend, optimizer, algo, rows, step: int, gen) -> dict[str, float]:
    """One GRPO step from arborl's pieces; returns seconds per phase."""
    c0, t0 = time.process_time(), time.perf_counter()
    prompts = [tok(r["prompt"])["input_ids"] for r in rows for _ in range(GROUP_SIZE)]
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, seed=step)
    completions = backend.generate(prompts, params)
    t1 = time.perf_counter()
    answers = [r["answer"] for r in rows for _ in range(GROUP_SIZE)]
    scores = torch.tensor(reward_answer([c.text for c in completions], answers))
    group_ids = torch.arange(len(rows)).repeat_interleave(GROUP_SIZE)
    adv = algos.grpo(scores, group_ids)  # (32,)
    batch = build_rows(prompts, completions, adv, tok.pad_token_id)
    t2 = time.perf_counter()
    model.train()
    mbs = minibatch_schedule(batch, algo, gen)
    actor_update(model, optimizer, mbs, mbs[0][:1], algo, temperature=1.0, kl_coef=0.0)
    t3, c3 = time.perf_counter(), time.process_time()
    new = [len(c.token_ids) for c in completions]
    return {
        "step_s": t3 - t0,
        "step_cpu_s": c3 - c0,
        "generate_s": t1 - t0,
        "reward_adv_batch_s": t2 - t1,
        "update_s": t3 - t2,
        "mean_new_tokens": sum(new) / len(new),
    }


def build_rows(prompts, completions, adv: torch.Tensor, pad_id: int) -> Batch:
    """Step-view rows: prompt left-padded to P, response right-padded to A."""
    p_len = max(len(p) for p in prompts)
    a_len = max(len(c.token_ids) for c in completions)
    n = len(prompts)
    input_ids = torch.full((n, p_len + a_len), pad_id, dtype=torch.long)  # (R, P+A)
    attention_mask = torch.zeros((n, p_len + a_len), dtype=torch.long)
    response_mask = torch.zeros((n, a_len))  # (R, A)
    old_logp = torch.zeros((n, a_len))
    for r, (p, c) in enumerate(zip(prompts, completions)):
        a = len(c.token_ids)
        input_ids[r, p_len - len(p) : p_len] = torch.tensor(p)
        input_ids[r, p_len : p_len + a] = torch.tensor(c.token_ids)
        attention_mask[r, p_len - len(p) : p_len + a] = 1
        response_mask[r, :a] = 1.0
        old_logp[r, :a] = torch.tensor(c.logprobs)
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "old_logp": old_logp,
        "adv": adv.float(),
        "weight": torch.ones(n),
    }
    info = {"view": "step", "prompt_length": p_len, "response_length": a_len}
    return Batch.from_dict(tensors, {}, info)


def run_arborl(
    model_dir: str, tok, data: list[dict], steps: int, dtype: str
) -> list[dict[str, float]]:
    model, _ = load_policy(model_dir)  # the same saved weights TRL loads
    backend = HFBackend(model, tok, seed=0)
    backend.eos_token_ids = []  # never stop early: exactly NEW_TOKENS per sample
    algo = AlgoConfig(
        name="grpo", ppo_epochs=1, minibatch_size=NUM_PROMPTS * GROUP_SIZE, lr=LR,
        loss_agg="token-mean", clip_low=0.2, clip_high=0.2, grad_clip=1.0,
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    out = []
    for step in range(steps):
        rows = data[(step * NUM_PROMPTS) % len(data) :][:NUM_PROMPTS]
        with autocast_ctx(dtype):  # a no-op for float32; model.dtype=bfloat16 in a run
            out.append(arborl_step(model, tok, backend, optimizer, algo, rows, step, gen))
    return out


# --- TRL -------------------------------------------------------------------------------------


def run_trl(
    model_dir: str, tok, data: list[dict], steps: int, out_dir: str, dtype: str, checkpointing: bool
) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.last = self.begin = self.begin_cpu = 0.0
            self.cycle: list[float] = []  # on_step_end to on_step_end (everything per step)
            self.inner: list[float] = []  # on_step_begin to on_step_end
            self.inner_cpu: list[float] = []  # the same in process CPU seconds

        def on_train_begin(self, args, state, control, **kw):
            self.last = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.begin, self.begin_cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            self.inner_cpu.append(time.process_time() - self.begin_cpu)
            self.cycle.append(now - self.last)
            self.inner.append(now - self.begin)
            self.last = now

    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=dtype == "bfloat16",  # autocast, fp32 weights (as arborl's model.dtype)
        gradient_checkpointing=checkpointing,  # TRL's default is True
        per_device_train_batch_size=NUM_PROMPTS * GROUP_SIZE,
        num_generations=GROUP_SIZE,
        gradient_accumulation_steps=1,
        max_completion_length=NEW_TOKENS,
        generation_kwargs={"min_new_tokens": NEW_TOKENS},
        temperature=1.0,
        learning_rate=LR,
        beta=0.0,
        max_steps=steps,
        logging_steps=1,  # TRL's own `step_time` metric per step
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=reward_answer,
        args=args,
        train_dataset=Dataset.from_list(data),
        processing_class=tok,
        callbacks=[timer],
    )
    trainer.remove_callback(PrinterCallback)  # no log dict per step on stdout
    trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    lengths = [h["completions/mean_length"] for h in logs]
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    return {
        "inner_s": timer.inner,
        "inner_cpu_s": timer.inner_cpu,
        "cycle_s": timer.cycle,
        "trl_step_time_s": [h["step_time"] for h in logs if "step_time" in h],
        "mean_new_tokens": sum(lengths) / len(lengths) if lengths else float("nan"),
        "optimizer": f"{type(opt).__name__}(fused={opt.defaults.get('fused')})",
    }


# --- driver ----------------------------------------------------------------------------------


def bench_model(
    name: str, dtype: str, steps: int, repeats: int, data: list[dict], checkpointing: bool
) -> dict[str, Any]:
    model, tok = load_policy(name)
    num_params = sum(p.numel() for p in model.parameters())
    arborl_runs, trl_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        model.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        del model
        for rep in range(repeats):
            order = ("arborl", "trl") if rep % 2 == 0 else ("trl", "arborl")
            for side in order:
                if side == "arborl":
                    arborl_runs.append(run_arborl(model_dir, tok, data, steps, dtype))
                    s = [r["step_s"] for r in arborl_runs[-1]]
                else:
                    trl_dir = os.path.join(tmp, "trl")
                    trl_runs.append(
                        run_trl(model_dir, tok, data, steps, trl_dir, dtype, checkpointing)
                    )
                    s = trl_runs[-1]["inner_s"]
                print(
                    f"{name} {dtype} rep {rep} {side:6s} steps " + " ".join(f"{x:.3f}" for x in s),
                    flush=True,
                )
    keep = slice(1, None) if steps > 1 else slice(None)  # drop the warm-up step
    a_steps = [r for run in arborl_runs for r in run[keep]]
    arborl = {k: median([r[k] for r in a_steps]) for k in a_steps[0]}
    trl = {
        # on_step_begin -> on_step_end: generation, rewards, loss, backward, clip, AdamW step.
        "step_s": median([x for t in trl_runs for x in t["inner_s"][keep]]),
        "step_cpu_s": median([x for t in trl_runs for x in t["inner_cpu_s"][keep]]),
        # on_step_end -> on_step_end: the above plus data loading and logging.
        "step_cycle_s": median([x for t in trl_runs for x in t["cycle_s"][keep]]),
        # TRL's own `step_time` metric: `training_step` only (no clip / optimizer step).
        "trl_step_time_s": median([x for t in trl_runs for x in t["trl_step_time_s"][keep]]),
        "mean_new_tokens": median([t["mean_new_tokens"] for t in trl_runs]),
        "optimizer": trl_runs[0]["optimizer"],
        "gradient_checkpointing": checkpointing,
    }
    # Paired ratios: each repeat's arborl median over the TRL median of the same repeat.
    paired = [
        median([r["step_s"] for r in a[keep]]) / median(t["inner_s"][keep])
        for a, t in zip(arborl_runs, trl_runs)
    ]
    return {
        "model": name,
        "dtype": dtype,
        "num_params": num_params,
        "arborl": arborl,
        "trl": trl,
        "ratio_arborl_over_trl": ratio(arborl["step_s"], trl["step_s"]),
        "ratio_cpu": ratio(arborl["step_cpu_s"], trl["step_cpu_s"]),
        "ratio_over_trl_cycle": ratio(arborl["step_s"], trl["step_cycle_s"]),
        "ratio_paired_median": median(paired),
        "ratio_paired": paired,
        "raw": {"arborl": arborl_runs, "trl": trl_runs},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=["tiny-1m", "tiny-20m"], help="arborl presets to bench"
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        default=["float32", "bfloat16"],
        choices=["float32", "bfloat16"],
        help="precisions, the same on both sides (bfloat16: autocast, fp32 weights)",
    )
    parser.add_argument(
        "--trl-gradient-checkpointing", action="store_true",
        help="keep TRL's default gradient checkpointing (arborl does not checkpoint)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=4, help="steps per run (first is dropped)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (same for both)")
    parser.add_argument("--quick", action="store_true", help="toy size: 2 steps per run")
    parser.add_argument(
        "--out", default=None, help="JSON path (default bench/results/train_step.json)"
    )
    args = parser.parse_args()
    if args.quick:
        args.steps = 2
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = list(os.getloadavg())
    data = make_data()
    ckpt = args.trl_gradient_checkpointing
    results = [
        bench_model(m, d, args.steps, args.repeats, data, ckpt)
        for m in args.models
        for d in args.dtypes
    ]
    out = {
        "benchmark": "train_step",
        "setup": {
            "prompts": NUM_PROMPTS,
            "group_size": GROUP_SIZE,
            "new_tokens": NEW_TOKENS,
            "lr": LR,
            "steps_per_run": args.steps,
            "repeats": args.repeats,
            "quick": args.quick,
            "trl_gradient_checkpointing": ckpt,
        },
        "machine": {**machine_info(args.threads), "loadavg_before": load_before},
        "models": results,
    }
    rows = []
    for r in results:
        a, t = r["arborl"], r["trl"]
        rows.append(
            [r["model"], r["dtype"], f"{r['num_params'] / 1e6:.2f}M", a["step_s"], a["step_cpu_s"],
             a["generate_s"], a["update_s"], t["step_s"], t["step_cpu_s"],
             r["ratio_arborl_over_trl"], r["ratio_paired_median"], r["ratio_cpu"],
             f"{a['mean_new_tokens']:.0f}/{t['mean_new_tokens']:.0f}"]
        )  # fmt: skip
    headers = ["model", "dtype", "params", "arborl s/step", "arborl CPU s", "arborl gen s",
               "arborl update s", "TRL s/step", "TRL CPU s", "ratio", "paired ratio",
               "CPU ratio", "new tok (a/TRL)"]  # fmt: skip
    print(format_table(headers, rows))
    print(f"load average after: {out['machine']['loadavg']}; CPU {out['machine']['cpu_model']}")
    met = all(r["ratio_arborl_over_trl"] <= TARGET for r in results)
    print(f"target <= {TARGET}x TRL's step on every row: {'met' if met else 'NOT met'}")
    print(f"wrote {write_json(out, args.out, 'train_step')}")


if __name__ == "__main__":
    main()
