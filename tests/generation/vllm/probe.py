"""Run inside the vLLM venv (tools/setup_vllm.sh): checks D1/D3/D4 and weight sync against
real vLLM on one saved checkpoint and prints one JSON line of measured numbers.

usage: python probe.py CHECKPOINT_DIR
"""

import json
import sys

import torch

from arborl.generation import SamplingParams
from arborl.generation.vllm_backend import VLLMBackend
from arborl.models import load_policy, token_logprobs


def max_gap(backend, model, prompts, params):
    outs = backend.generate(prompts, params)
    gaps = []
    for p, o in zip(prompts, outs):
        ids = torch.tensor([list(p) + o.token_ids])
        want = token_logprobs(model, ids, temperature=params.temperature)[0, len(p) - 1 :]
        gaps.append(float((want - torch.tensor(o.logprobs)).abs().max()))
    return max(gaps)


def sequence_logprobs(backend, ids):
    """vLLM's T=1 logprobs of a fixed sequence (prompt_logprobs), positions 1..T-1."""
    sp = backend._vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    out = backend.llm.generate(
        [backend._vllm.TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False
    )[0]
    return torch.tensor([d[t].logprob for d, t in zip(out.prompt_logprobs[1:], ids[1:])])


def main(directory: str) -> None:
    model, tok = load_policy(directory)
    be = VLLMBackend(directory, dtype="float32", max_model_len=256, enforce_eager=True)
    p = tok.encode("<|user|>Numbers: 1 2 7 8.<|end|><|assistant|>", add_special_tokens=False)
    group = be.generate([p] * 4, SamplingParams(max_new_tokens=16, seed=1))
    res = {"distinct_of_4": len({tuple(o.token_ids) for o in group})}
    res["eos_token_ids"], res["max_length"] = be.eos_token_ids, be.max_length
    prompts = [p, p[:5], p[3:], p[:9]]
    for temp in (1.0, 0.7):
        res[f"max_gap_T{temp}"] = max_gap(be, model, prompts, SamplingParams(32, temp, seed=2))
    fixed = p + tok.encode("north then east", add_special_tokens=False)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    res["sync"] = []
    for version in (1, 2, 3):
        loss = -token_logprobs(model, torch.tensor([fixed])).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        stale = sequence_logprobs(be, fixed) - token_logprobs(model, torch.tensor([fixed]))[0]
        seconds = be.sync_weights(model.state_dict(), version)
        be.check_version(version)
        new = sequence_logprobs(be, fixed) - token_logprobs(model, torch.tensor([fixed]))[0]
        res["sync"].append(
            {
                "version": version,
                "s": seconds,
                "stale_gap": float(stale.abs().max()),
                "gap": float(new.abs().max()),
            }
        )
    try:
        be.check_version(4)
        res["stale_detected"] = False
    except RuntimeError as e:
        res["stale_detected"] = "stale vLLM engine" in str(e)
    print("PROBE " + json.dumps(res), flush=True)


if __name__ == "__main__":  # vLLM's engine needs the main-module guard
    main(sys.argv[1])
