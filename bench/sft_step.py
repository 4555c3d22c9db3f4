"""One SFT step of the demo (`arborl train`'s warm start) against a minimal PyTorch loop.

Both sides train their own copy of the same tiny-1m weights on the same batches: 64
(prompt, response) pairs drawn from the demo's SFT examples (50 oracle Maze episodes,
prompts built by the agent code), AdamW at the demo's lr and weight decay.

  - arborl: `arborl.train.sft` as `run_sft` runs it: `collate`, `sft_loss`, backward,
    gradient clipping at 1.0, `optimizer.step()`, the LR schedule.
  - minimal: a hand-written loop a reader would write first: the batch collated once
    outside the timer, `model(...)`, cross-entropy on the response tokens, backward,
    `optimizer.step()`.

Wall and process CPU seconds are both given (on a shared machine the CPU time of a
1-thread step is close to its time with a core to itself).
Steps alternate (arborl, minimal, arborl, ...) in one process at 1 torch thread; the first
`--warmup` steps of each side are dropped; medians.

    python bench/sft_step.py
    python bench/sft_step.py --steps 10
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from common import format_table, machine_info, median, ratio, write_json

from arborl.models import load_policy
from arborl.train.config import load_train_config
from arborl.train.sft import build_sft_examples, collate, load_demos, sft_loss

TARGET_S, TARGET_RATIO = 0.2, 1.3


def arborl_step(model, opt, examples, pad_id) -> None:
    batch = collate(examples, pad_id)
    loss, _ = sft_loss(model, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def minimal_step(model, opt, batch) -> None:
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]  # (B, T-1, V)
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    )
    loss = (nll * mask.reshape(-1)).sum() / mask.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per side first")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (demo: 1)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/sft_step.json)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_before = machine_info(args.threads)["loadavg"]

    cfg = load_train_config([])
    model, tok = load_policy(cfg.model.name_or_path, seed=cfg.model.seed)
    examples = build_sft_examples(load_demos(cfg), tok, cfg.agent)
    gen = torch.Generator().manual_seed(0)
    models = {"arborl": model, "minimal": copy.deepcopy(model)}
    opts = {
        k: torch.optim.AdamW(m.parameters(), lr=cfg.sft.lr, weight_decay=cfg.sft.weight_decay)
        for k, m in models.items()
    }
    for m in models.values():
        m.train()
    times: dict[str, list[float]] = {"arborl": [], "minimal": []}
    cpu: dict[str, list[float]] = {"arborl": [], "minimal": []}
    tokens = []
    for step in range(args.warmup + args.steps):
        idx = torch.randint(len(examples), (cfg.sft.batch_size,), generator=gen).tolist()
        chosen = [examples[i] for i in idx]
        tokens.append(sum(len(e.prompt_ids) + len(e.response_ids) for e in chosen))
        ready = collate(chosen, tok.pad_token_id)
        for side in ("arborl", "minimal") if step % 2 == 0 else ("minimal", "arborl"):
            t0, c0 = time.perf_counter(), time.process_time()
            if side == "arborl":
                arborl_step(models[side], opts[side], chosen, tok.pad_token_id)
            else:
                minimal_step(models[side], opts[side], ready)
            if step >= args.warmup:
                times[side].append(time.perf_counter() - t0)
                cpu[side].append(time.process_time() - c0)

    med = {k: median(v) for k, v in times.items()}
    med_cpu = {k: median(v) for k, v in cpu.items()}
    r = ratio(med["arborl"], med["minimal"])
    info = machine_info(args.threads)
    info["loadavg_before"] = load_before
    rows = [
        ["arborl", med["arborl"], med_cpu["arborl"], r],
        ["minimal PyTorch loop", med["minimal"], med_cpu["minimal"], 1.0],
    ]
    print(format_table(["side", "wall s / step", "CPU s / step", "x minimal (wall)"], rows))
    met = med["arborl"] <= TARGET_S and r <= TARGET_RATIO
    print(
        f"batch {cfg.sft.batch_size} pairs, {median(tokens) / cfg.sft.batch_size:.1f} tokens each; "
        f"target <= {TARGET_S} s and <= {TARGET_RATIO}x minimal: {'met' if met else 'NOT met'} "
        f"(load {info['loadavg']}, CPU {info['cpu_model']})"
    )
    result = {
        "machine": info,
        "config": {"steps": args.steps, "warmup": args.warmup, "batch_size": cfg.sft.batch_size},
        "median_s": med,
        "median_cpu_s": med_cpu,
        "ratio": r,
        "times": times,
        "cpu_times": cpu,
        "tokens_per_pair": median(tokens) / cfg.sft.batch_size,
        "targets": {"s_per_step": TARGET_S, "ratio": TARGET_RATIO},
        "met": met,
    }
    print("wrote", write_json(result, args.out, "sft_step"))


if __name__ == "__main__":
    main()
