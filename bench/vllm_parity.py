"""HF backend vs vLLM on the same model, prompts and seeds: tokens/s, time to first token,
logprob agreement (vLLM's per-token logprobs against `token_logprobs` rescoring).

Run with the vLLM venv's interpreter (`make vllm` prints its path), arborl on PYTHONPATH:

  VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_ENABLE_V1_MULTIPROCESSING=0 \\
    PYTHONPATH=. $(make -s vllm)/bin/python bench/vllm_parity.py --models tiny-20m smollm2-135m-instruct

Prints a markdown table and writes bench/results/vllm_parity.json.
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from arborl.generation import HFBackend, SamplingParams
from arborl.generation.vllm_backend import VLLMBackend
from arborl.models import load_policy, save_policy, token_logprobs
from arborl.models.pretrained import resolve_checkpoint


def prompts_for(tok, n: int) -> list[list[int]]:
    texts = [f"Numbers: {i} {i + 3} {2 * i + 1}. Target: {10 + i}. Which move?" for i in range(n)]
    chats = [[{"role": "user", "content": t}] for t in texts]
    return [
        tok.encode(tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True),
                   add_special_tokens=False)
        for c in chats
    ]  # fmt: skip


def timed(backend, prompts, params) -> tuple[list, float]:
    start = time.perf_counter()
    outs = backend.generate(prompts, params)
    return outs, time.perf_counter() - start


def logprob_gap(model, prompts, outs, temperature: float) -> float:
    gaps = []
    with torch.no_grad():
        for p, o in zip(prompts, outs):
            ids = torch.tensor([list(p) + o.token_ids])
            want = token_logprobs(model, ids, temperature=temperature)[0, len(p) - 1 :]
            gaps.append(float((want - torch.tensor(o.logprobs)).abs().max()))
    return max(gaps)


def measure(name: str, num_prompts: int, new_tokens: int) -> list[dict]:
    model, tok = load_policy(name)
    model.eval()
    path = resolve_checkpoint(name)
    if not Path(path).is_dir():
        path = tempfile.mkdtemp(prefix="parity-")
        save_policy(model, tok, path)
    prompts = prompts_for(tok, num_prompts)
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    first = SamplingParams(max_new_tokens=1, temperature=1.0, seed=0)
    rows = []
    t0 = time.perf_counter()
    vllm = VLLMBackend(path, dtype="float32", max_model_len=1024, enforce_eager=True)
    startup = time.perf_counter() - t0
    for label, be in (("hf", HFBackend(model, tok, seed=0)), ("vllm", vllm)):
        timed(be, prompts[:2], first)  # warm-up
        _, ttft = timed(be, prompts, first)
        outs, dt = timed(be, prompts, params)
        n = sum(len(o.token_ids) for o in outs)
        rows.append({
            "model": name, "backend": label, "prompts": num_prompts, "tokens": n,
            "tok_per_s": n / dt, "ttft_s": ttft,
            "max_logprob_gap": logprob_gap(model, prompts, outs, 1.0),
            "startup_s": startup if label == "vllm" else 0.0,
        })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["tiny-20m"], help="presets or pretrained names")
    ap.add_argument("--num-prompts", type=int, default=16, help="prompts per batch")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens generated per prompt")
    ap.add_argument("--out", default="bench/results/vllm_parity.json", help="JSON output path")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rows = [r for m in args.models for r in measure(m, args.num_prompts, args.new_tokens)]
    print("| model | backend | tok/s | TTFT (s) | max abs logprob gap | engine start (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['backend']} | {r['tok_per_s']:.0f} | {r['ttft_s']:.2f} | "
              f"{r['max_logprob_gap']:.1e} | {r['startup_s']:.0f} |")  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
