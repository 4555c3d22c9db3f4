"""HF backend vs vLLM on the same model, prompts and seeds: tokens/s, time to first token,
logprob agreement (vLLM's per-token logprobs against `token_logprobs` rescoring), for
the in-process engine and for arborl's `OpenAIBackend` against vLLM's OpenAI server
(`launch_vllm_server`, one request per seeded row).

Run with the vLLM venv's interpreter (`make vllm` prints its path), arborl on PYTHONPATH:

  VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_ENABLE_V1_MULTIPROCESSING=0 \\
    PYTHONPATH=. $(make -s vllm)/bin/python bench/vllm_parity.py --models tiny-20m smollm2-135m-instruct

Prints a markdown table and writes bench/results/vllm_parity.json.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from arborl.generation import HFBackend, SamplingParams, make_backend
from arborl.generation.vllm_backend import VLLMBackend
from arborl.generation.vllm_serve import launch_vllm_server
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


def measure(name: str, num_prompts: int, new_tokens: int, serve: bool) -> list[dict]:
    model, tok = load_policy(name)
    model.eval()
    path = resolve_checkpoint(name)
    if not Path(path).is_dir():
        path = tempfile.mkdtemp(prefix="parity-")
        save_policy(model, tok, path)
    prompts = prompts_for(tok, num_prompts)
    t0 = time.perf_counter()
    vllm = VLLMBackend(path, dtype="float32", max_model_len=1024, enforce_eager=True)
    startup = {"hf": 0.0, "vllm": time.perf_counter() - t0}
    backends = [("hf", HFBackend(model, tok, seed=0)), ("vllm", vllm)]
    rows = [
        row(name, label, be, model, prompts, startup[label], new_tokens) for label, be in backends
    ]
    del vllm, backends  # drop our references; the in-process engine may keep its KV cache
    if serve:
        t0 = time.perf_counter()
        log = Path(tempfile.mkdtemp(prefix="vllm-serve-")) / "server.log"
        with launch_vllm_server(sys.executable, path, log, api_key="bench") as url:
            started = time.perf_counter() - t0
            remote, _ = make_backend(url, tokenizer=path, api_key="bench")
            rows.append(
                row(name, "openai -> vllm serve", remote, model, prompts, started, new_tokens)
            )
            remote.close()
    return rows


def row(name: str, label: str, backend, model, prompts, startup: float, new_tokens: int) -> dict:
    """Warm up, then time the first token and a whole generation of `prompts`."""
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    first = SamplingParams(max_new_tokens=1, temperature=1.0, seed=0)
    timed(backend, prompts[:2], first)  # warm-up
    _, ttft = timed(backend, prompts, first)
    outs, dt = timed(backend, prompts, params)
    n = sum(len(o.token_ids) for o in outs)
    return {
        "model": name, "backend": label, "prompts": len(prompts), "tokens": n,
        "tok_per_s": n / dt, "ttft_s": ttft, "max_logprob_gap": logprob_gap(model, prompts, outs, 1.0),
        "startup_s": startup,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["tiny-20m"], help="presets or pretrained names")
    ap.add_argument("--num-prompts", type=int, default=16, help="prompts per batch")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens generated per prompt")
    ap.add_argument("--no-serve", action="store_true", help="skip the vLLM-server row")
    ap.add_argument("--out", default="bench/results/vllm_parity.json", help="JSON output path")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rows = [
        r
        for m in args.models
        for r in measure(m, args.num_prompts, args.new_tokens, not args.no_serve)
    ]
    print("| model | backend | tok/s | TTFT (s) | max abs logprob gap | engine start (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['backend']} | {r['tok_per_s']:.0f} | {r['ttft_s']:.2f} | "
              f"{r['max_logprob_gap']:.1e} | {r['startup_s']:.0f} |")  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
