"""What a 1.5B-parameter policy with 128 ALFWorld episodes per RL step needs on GPUs: an
ESTIMATE, from stated assumptions, the FSDP2 bytes measured by `bench/distributed.py` and
the growth measured by `bench/scaling.py`. Nothing here runs on a GPU.

Memory per train rank = sharded state (parameters, gradients, AdamW states; the bytes per
parameter are read from `bench/results/distributed.json`, divided by the ranks) + the
full bf16 parameters and fp32-accumulated gradients that arborl's FSDP2 update keeps
unsharded inside a minibatch (docs/distributed.md) + the activations of one micro-batch
(`algo.micro_batch_tokens`). Rollout adds a bf16 copy of the weights and the KV cache of
the live episodes. Time uses FLOP counts (6 x params x tokens for forward + backward, 2 x
params x tokens per forward) at an assumed utilisation, plus ALFWorld's measured step cost.

    python bench/gpu_estimate.py            # prints the table, writes bench/results/gpu_estimate.json
    python bench/gpu_estimate.py --gpus 4 8 16 --micro-batch-tokens 8192
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from common import RESULTS_DIR, format_table, write_json

GIB = 2**30

MODEL = {
    "name": "Qwen2.5-1.5B-like",
    "params": 1.54e9,
    "layers": 28,
    "hidden": 1536,
    "kv_heads": 2,
    "head_dim": 128,
    "ffn": 8960,
    "vocab": 151_936,
}
"""The assumed 1.5B shape (Qwen2.5-1.5B's published config: GQA with 2 KV heads)."""

WORKLOAD = {
    "episodes": 128,
    "turns": 20,  # ALFWorld episodes: ~10-30 turns with a 50-step cap (real_envs.md)
    "turns_range": (10, 30),
    "prompt_tokens": 1500,  # observation + task + recent history: ~1-2k tokens
    "prompt_range": (1000, 2000),
    "response_tokens": 100,  # a short thought + one admissible command
    "env_step_s": 0.052,  # 19.3 steps/s in-process, docs/BENCHMARKS.md (real envs, load 1-4)
    "env_step_s_loaded": 0.2,  # 5 steps/s, research notes (busy 2-core box)
}
"""128 ALFWorld episodes per step, step view (one training row per turn)."""

GPU = {
    "name": "H100 80GB",
    "memory_gib": 80,
    "bf16_tflops": 989,  # dense peak
    "mfu": 0.35,  # assumed utilisation of an HF model under FSDP2
    "decode_token_s_hf": 0.025,  # one batched decode step of HF generate (launch bound)
    "decode_token_s_vllm": 0.006,  # one batched decode step of vLLM
}
"""The assumed GPU and the utilisation figures (not measured here: no GPU)."""


def fsdp_bytes_per_param(path: Path) -> dict[str, float]:
    """Bytes per parameter of params, grads and AdamW state at rest, from the measured run."""
    doc = json.loads(path.read_text())
    one = next(r for r in doc["train_step"] if r["ranks"] == 1)
    d = one["per_rank_detail_bytes"][0]
    n = d["params"] / 4  # fp32 parameters
    return {k: v / n for k, v in d.items()}


def activation_bytes_per_token(m: dict[str, Any]) -> float:
    """bf16 activations a llama layer stack saves for backward, per token (no checkpointing,
    flash/SDPA attention: nothing quadratic in the sequence). Per layer: two norm inputs and
    outputs (4h), q and its RoPE copy (2h), k, v and k's RoPE copy (3 kv), the attention
    output (h), gate, up, act(gate) and their product (4 ffn)."""
    kv = m["kv_heads"] * m["head_dim"]
    per_layer = 7 * m["hidden"] + 3 * kv + 4 * m["ffn"]
    return 2 * per_layer * m["layers"]


def estimate(
    gpus: list[int],
    micro_tokens: int,
    env_workers: int,
    bpp: dict[str, float],
    scaling: dict | None,
) -> dict[str, Any]:
    """The memory and time rows of the estimate."""
    m, w, g = MODEL, WORKLOAD, GPU
    p = m["params"]
    rows_per_step = w["episodes"] * w["turns"]
    tokens_per_row = w["prompt_tokens"] + w["response_tokens"]
    tokens = rows_per_step * tokens_per_row
    act_tok = activation_bytes_per_token(m)
    kv_tok = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2  # K and V, bf16
    logits_tok = m["vocab"] * (2 + 4 + 4)  # bf16 logits, fp32 copy, fp32 log-softmax
    live_ctx = w["episodes"] * (w["prompt_range"][1] + w["response_tokens"])
    out: dict[str, Any] = {
        "assumptions": {
            "model": m,
            "workload": w,
            "gpu": g,
            "micro_batch_tokens": micro_tokens,
            "env_workers": env_workers,
        },
        "fsdp_bytes_per_param": bpp,
        "tokens_per_step": tokens,
        "tokens_per_step_range": [
            w["episodes"] * t * (pr + w["response_tokens"])
            for t, pr in zip(w["turns_range"], w["prompt_range"], strict=True)
        ],
        "activation_mib_per_token": act_tok / 2**20,
        "kv_cache_gib": live_ctx * kv_tok / GIB,
        "rows": [],
    }
    state = p * sum(bpp.values())
    # inside a minibatch: all-gathered bf16 params + unsharded grads, which FSDP2 accumulates
    # in the fp32 reduce dtype while gradient sync is off (arborl syncs once per minibatch)
    unsharded = p * (2 + 4)
    # logits only on response positions (`logits_to_keep`): a micro-batch's share of them
    resp_share = w["response_tokens"] / tokens_per_row
    act = micro_tokens * (act_tok + resp_share * logits_tok)
    rollout = p * 2 + out["kv_cache_gib"] * GIB  # bf16 weights for generation + KV cache
    flops_update = 6 * p * tokens
    flops_forward = 2 * p * tokens  # prefill of every turn's prompt (generation)
    for n in gpus:
        train_gib = (state / n + unsharded + act) / GIB
        colocated = train_gib + rollout / GIB
        update_s = flops_update / (n * g["bf16_tflops"] * 1e12 * g["mfu"])
        prefill_s = flops_forward / (n * g["bf16_tflops"] * 1e12 * g["mfu"])
        decode_steps = w["turns"] * w["response_tokens"]  # lockstep: sequential per turn
        env_cpu_s = rows_per_step * w["env_step_s"]  # CPU-seconds of env steps
        # lockstep turns: each turn waits for the worker with the most envs to step them
        env_s = w["turns"] * -(-w["episodes"] // env_workers) * w["env_step_s"]
        out["rows"].append(
            {
                "gpus": n,
                "sharded_state_gib": state / n / GIB,
                "unsharded_params_grads_gib": unsharded / GIB,
                "activations_gib": act / GIB,
                "train_rank_gib": train_gib,
                "colocated_rank_gib": colocated,
                "fits": colocated < g["memory_gib"] * 0.9,
                "update_s": update_s,
                "prefill_s": prefill_s,
                "decode_s_hf": decode_steps * g["decode_token_s_hf"],
                "decode_s_vllm": decode_steps * g["decode_token_s_vllm"],
                "env_cpu_s": env_cpu_s,
                "env_wall_s": env_s,
                "step_s_hf": update_s + prefill_s + decode_steps * g["decode_token_s_hf"] + env_s,
                "step_s_vllm": update_s
                + prefill_s
                + decode_steps * g["decode_token_s_vllm"]
                + env_s,
            }
        )
    if scaling is not None:
        out["cpu_extrapolation"] = cpu_extrapolation(scaling, tokens_per_row)
    return out


def cpu_extrapolation(scaling: dict, tokens_per_row: int) -> dict[str, Any]:
    """The measured growth laws carried to the 1.5B workload on this CPU (illustration of
    why it needs GPUs): base step x (episodes ratio)^a x (turns ratio)^b x (params
    ratio)^c x (tokens per row ratio), the last taken as linear (not measured)."""
    res, slopes = scaling["results"], scaling["slopes"]
    base = next(r for r in res["episodes"] if r.get("episodes") == 128 and "error" not in r)
    mod = [r for r in res["model"] if "error" not in r]
    big = max(mod, key=lambda r: r["params"])
    small = min(mod, key=lambda r: r["params"])
    w = WORKLOAD
    maze_tokens = 60  # a Maze prompt + response of the demo: ~50 + 8 tokens
    t = base["step_s"]
    t *= (w["episodes"] / base["episodes"]) ** slopes["episodes"]["step_s"]
    t *= (w["turns"] / base["mean_turns"]) ** slopes["turns"]["step_s"]
    t *= (MODEL["params"] / small["params"]) ** slopes["model"]["step_s"]
    t *= tokens_per_row / maze_tokens
    return {
        "base_step_s": base["step_s"],
        "slopes": {a: slopes[a]["step_s"] for a in ("episodes", "turns", "model")},
        "largest_measured_params": big["params"],
        "step_s": t,
        "step_h": t / 3600,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8], help="GPU counts")
    ap.add_argument("--micro-batch-tokens", type=int, default=16384, help="algo.micro_batch_tokens")
    ap.add_argument("--env-workers", type=int, default=32, help="subprocess env workers (CPUs)")
    ap.add_argument(
        "--distributed", type=Path, default=RESULTS_DIR / "distributed.json",
        help="bench/distributed.py's JSON (FSDP2 bytes per rank)",
    )  # fmt: skip
    ap.add_argument(
        "--scaling", type=Path, default=RESULTS_DIR / "scaling.json",
        help="bench/scaling.py's JSON (measured growth); skipped when absent",
    )  # fmt: skip
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/)")
    args = ap.parse_args()
    bpp = fsdp_bytes_per_param(args.distributed)
    scaling = json.loads(args.scaling.read_text()) if args.scaling.exists() else None
    est = estimate(args.gpus, args.micro_batch_tokens, args.env_workers, bpp, scaling)
    print(
        f"tokens per step {est['tokens_per_step'] / 1e6:.2f}M "
        f"(range {est['tokens_per_step_range'][0] / 1e6:.2f}-"
        f"{est['tokens_per_step_range'][1] / 1e6:.2f}M); activations "
        f"{est['activation_mib_per_token']:.2f} MiB/token; KV cache {est['kv_cache_gib']:.1f} GiB"
    )
    keys = [
        "gpus", "sharded_state_gib", "unsharded_params_grads_gib", "activations_gib",
        "train_rank_gib", "colocated_rank_gib", "fits", "update_s", "prefill_s",
        "decode_s_hf", "decode_s_vllm", "env_cpu_s", "env_wall_s", "step_s_hf", "step_s_vllm",
    ]  # fmt: skip
    print(format_table(keys, [[r[k] for k in keys] for r in est["rows"]]))
    if "cpu_extrapolation" in est:
        c = est["cpu_extrapolation"]
        print(f"this CPU, extrapolated from the measured slopes: {c['step_h']:.1f} h per step")
    path = write_json(est, args.out, "gpu_estimate")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
