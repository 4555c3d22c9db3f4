"""The GPU check (issue 18): one run on a single CUDA GPU measures what the CPU machines
cannot, in three stages, each with its own time limit, and writes one JSON summary.

1. **FSDP2 train step over NCCL in bf16** on a Qwen2-0.5B-shaped model built from config
   (24 blocks x 896, 14 query / 2 key-value heads, FFN 4,864, vocabulary 151,936, tied
   embeddings: 494M parameters): arborl's own sharding (`arborl.distributed.sharding`:
   `fully_shard` per block, bf16 params with fp32 reduction, explicit gather and gradient
   sync, as the Ray train ranks run it), AdamW, next-token loss on random tokens. Reports
   tokens/s, MFU against the GPU's bf16 dense peak (spec sheet) and against a measured
   8192^3 bf16 matmul, and peak memory. FLOPs per token: 6 N + 12 L d T (PaLM's count:
   weights, plus attention scores and values).
2. **vLLM on CUDA** for the same shape (arborl's char vocabulary, so it needs no tokenizer
   download): generation tokens/s with per-token logprobs, then a weight sync
   (`VLLMBackend.sync_weights`, version-checked) whose effect on the logprobs of a fixed
   sequence is measured. Runs in the vLLM venv (`tools/setup_vllm.sh`; `GPU_CHECK_VLLM_PYTHON`
   names another interpreter). A machine without one, or without network to build it, gets
   the reason in the summary.
3. **One RL step through the trainer** (`arborl train trainer.engine=ray
   ray.gpus_per_rank=1`, the trainer's CUDA path) on the same model, PPO with a
   critic (a random-init policy wins nothing, so GRPO's group advantages would all be zero
   and skip the update; GAE's are not), when Ray and the env dependencies import;
   otherwise the reason.

Without a CUDA device it says so and exits 0, unless `--smoke`, which runs stages 1 and 3
on CPU (gloo, no GPU per rank) with a tiny shape: the same code, what CI checks. Exit code 1 when a stage that
could run failed.

    python bench/gpu_check.py --out gpu_check.json      # on the GPU machine (bench/gpu_check.sh)
    python bench/gpu_check.py --smoke                   # CPU: stages 1 and 3, tiny shape
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Qwen2-0.5B's shape (its config.json): hidden, layers, heads, kv heads, ffn, vocab.
QWEN2_05B = {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "ffn": 4864, "vocab": 151936}
TINY = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 512}
# bf16 dense tensor-core peaks from the vendors' spec sheets (TFLOP/s, no sparsity).
BF16_PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "A10G": 125.0}


def qwen2_config(shape: dict):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"], intermediate_size=shape["ffn"],
        tie_word_embeddings=True, max_position_embeddings=4096,
    )  # fmt: skip


def spec_peak_tflops(device_name: str) -> float | None:
    return next((v for k, v in BF16_PEAK_TFLOPS.items() if k in device_name), None)


def measured_matmul_tflops(torch, device) -> float:
    """bf16 8192^3 matmul throughput: the achievable peak on this GPU, mean of 10."""
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * 10 / (time.perf_counter() - t0) / 1e12


def stage_train(shape: dict, batch: int, seq: int, steps: int, smoke: bool) -> dict:
    """FSDP2 (world of 1) train steps through arborl's sharding helpers; tokens/s, MFU."""
    import torch
    from transformers import AutoModelForCausalLM

    from arborl.distributed import sharding

    device = torch.device("cpu") if smoke else torch.device("cuda", 0)
    backend = sharding.init_process_group(0, 1, "127.0.0.1", sharding.free_port(), device)
    mesh = sharding.device_mesh(1, device)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(qwen2_config(shape), dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    mp = sharding.mixed_precision(device, "bfloat16")
    model = sharding.shard_model(model.to(device), mesh, mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, shape["vocab"], (batch, seq), device=device)

    def step() -> float:
        with sharding.gathered(model), sharding.sync_gradients(model):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):  # warm-up: allocator, kernels
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    losses = [step() for _ in range(steps)]
    sync()
    per_step = (time.perf_counter() - t0) / steps
    tokens = batch * seq
    flops_per_token = 6 * n_params + 12 * shape["layers"] * shape["hidden"] * seq
    achieved = flops_per_token * tokens / per_step / 1e12
    out = {
        "backend": backend, "device": str(device), "params": n_params, "batch": batch,
        "seq": seq, "steps": steps, "step_s": per_step, "tokens_per_s": tokens / per_step,
        "achieved_tflops": achieved, "losses": losses,
    }  # fmt: skip
    if device.type == "cuda":
        name = torch.cuda.get_device_name(0)
        peak, measured = spec_peak_tflops(name), measured_matmul_tflops(torch, device)
        out.update(
            gpu=name,
            peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30,
            spec_peak_tflops=peak,
            mfu_vs_spec=achieved / peak if peak else None,
            matmul_tflops=measured,
            mfu_vs_matmul=achieved / measured,
        )
    torch.distributed.destroy_process_group()
    return out


def save_char_vocab_model(shape: dict, directory: Path) -> None:
    """The stage-1 shape with arborl's char tokenizer, saved for vLLM and the trainer."""
    import torch
    from transformers import AutoModelForCausalLM

    from arborl.models import build_char_tokenizer, save_policy
    from arborl.models.loading import ModelPreset

    tok = build_char_tokenizer()
    preset = ModelPreset("qwen2", shape["hidden"], shape["layers"], shape["heads"],
                         shape["kv_heads"], shape["ffn"])  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(preset.to_config(tok), dtype=torch.float32)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    save_policy(model, tok, directory)


VLLM_STAGE = r"""
import json, sys, time, torch
from arborl.generation import SamplingParams
from arborl.generation.vllm_backend import VLLMBackend
from arborl.models import load_policy
d = sys.argv[1]
be = VLLMBackend(d, dtype="bfloat16", max_model_len=1024, gpu_memory_utilization=0.3)
model, tok = load_policy(d)
p = tok.encode("<|user|>Numbers: 1 2 7 8. Target: 58.<|end|><|assistant|>", add_special_tokens=False)
params = SamplingParams(max_new_tokens=128, temperature=1.0, seed=0)
be.generate([p] * 4, SamplingParams(max_new_tokens=8, seed=0))
t0 = time.perf_counter()
outs = be.generate([p] * 64, params)
dt = time.perf_counter() - t0
n = sum(len(o.token_ids) for o in outs)
def seq_lp():
    sp = be._vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    out = be.llm.generate([be._vllm.TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
    return torch.tensor([x[t].logprob for x, t in zip(out.prompt_logprobs[1:], p[1:])])
before = seq_lp()
state = {k: v * 1.01 if k.endswith("embed_tokens.weight") else v for k, v in model.state_dict().items()}
sync_s = be.sync_weights(state, 1)
be.check_version(1)
after = seq_lp()
print("STAGE " + json.dumps({"generated_tokens": n, "tokens_per_s": n / dt,
      "logprobs_per_token": all(len(o.logprobs) == len(o.token_ids) for o in outs),
      "sync_s": sync_s, "logprob_shift_after_sync": float((after - before).abs().max()),
      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}))
"""


def vllm_python() -> tuple[str | None, str]:
    """(interpreter, why not): GPU_CHECK_VLLM_PYTHON, else the venv tools/setup_vllm.sh builds."""
    given = os.environ.get("GPU_CHECK_VLLM_PYTHON")
    if given:
        return given, ""
    try:
        done = subprocess.run(["bash", str(ROOT / "tools" / "setup_vllm.sh")],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, "building the vLLM venv took over 5 min (no network on this machine?)"
    if done.returncode != 0:
        return None, f"building the vLLM venv failed: {done.stderr.strip()[-500:]}"
    return str(Path(done.stdout.strip().splitlines()[-1]) / "bin" / "python"), ""


def run_stage(cmd: list[str], timeout_s: float, env: dict | None = None) -> dict:
    """Run a stage's subprocess; its last `STAGE {json}` line, or why there is none."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **(env or {})}, cwd=ROOT)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"status": "failed", "why": f"over its {timeout_s:.0f} s limit"}
    lines = [x for x in done.stdout.splitlines() if x.startswith("STAGE ")]
    if done.returncode != 0 or not lines:
        return {"status": "failed", "why": done.stderr.strip()[-1500:]}
    return {"status": "ok", **json.loads(lines[-1].removeprefix("STAGE "))}


def stage_vllm(model_dir: Path, timeout_s: float) -> dict:
    python, why = vllm_python()
    if python is None:
        return {"status": "skipped", "why": why}
    return run_stage([python, "-c", VLLM_STAGE, str(model_dir)], timeout_s,
                     {"PYTHONPATH": str(ROOT)})  # fmt: skip


def stage_trainer(model_dir: Path, out_dir: Path, timeout_s: float, gpus: float = 1.0) -> dict:
    missing = [m for m in ("ray", "gymnasium") if not _importable(m)]
    if missing:
        return {"status": "skipped", "why": f"not importable here: {', '.join(missing)} "
                "(install arborl's requirements with a CUDA torch)"}  # fmt: skip
    args = [
        sys.executable, "-m", "arborl.cli.main", "train", "trainer.engine=ray",
        f"ray.gpus_per_rank={gpus}", f"model.name_or_path={model_dir}", "sft.enabled=false",
        "algo=ppo", "trainer.total_steps=1", "rollout.num_tasks=8", "rollout.group_size=4",
        "eval.num_episodes=8", f"trainer.output_dir={out_dir}", "trainer.name=gpu",
        "trainer.plots=false", "trainer.report=false", "trainer.progress=false",
    ]  # fmt: skip
    t0 = time.perf_counter()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "why": f"over its {timeout_s:.0f} s limit"}
    if done.returncode != 0:
        return {"status": "failed", "why": done.stderr.strip()[-1500:]}
    rows = [json.loads(x) for x in (out_dir / "gpu" / "metrics.jsonl").read_text().splitlines()]
    step = next((r for r in rows if "time/update_s" in r), {})
    return {"status": "ok", "wall_s": time.perf_counter() - t0,
            "step": {k: v for k, v in step.items() if k.startswith(("time/", "actor/", "critic/"))}}  # fmt: skip


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="stages 1 and 3 on CPU, tiny shape")
    ap.add_argument("--batch", type=int, default=8, help="sequences per train step")
    ap.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    ap.add_argument("--steps", type=int, default=5, help="timed train steps (after 2 warm-ups)")
    ap.add_argument("--stage-timeout", type=float, default=150, help="seconds per stage 2/3")
    ap.add_argument("--out", default=None, help="JSON summary path")
    args = ap.parse_args()
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device; nothing to measure here (exit 0).")
        return 0
    t0 = time.perf_counter()
    summary: dict = {"torch": torch.__version__}
    shape = TINY if args.smoke else QWEN2_05B
    batch, seq = (2, 64) if args.smoke else (args.batch, args.seq)
    summary["train"] = {"status": "ok", **stage_train(shape, batch, seq, args.steps, args.smoke)}
    print("train:", json.dumps(summary["train"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "qwen2-shape"
        save_char_vocab_model(shape, model_dir)
        if not args.smoke:  # the smoke leaves vLLM to tests/generation/test_vllm_real.py
            summary["vllm"] = stage_vllm(model_dir, args.stage_timeout)
            print("vllm:", json.dumps(summary["vllm"]), flush=True)
        gpus = 0.0 if args.smoke else 1.0
        summary["trainer"] = stage_trainer(model_dir, Path(tmp) / "runs", args.stage_timeout, gpus)
        print("trainer:", json.dumps(summary["trainer"]), flush=True)
    summary["wall_s"] = time.perf_counter() - t0
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    failed = [k for k, v in summary.items() if isinstance(v, dict) and v.get("status") == "failed"]
    print(f"gpu_check: {time.perf_counter() - t0:.0f} s; failed stages: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
