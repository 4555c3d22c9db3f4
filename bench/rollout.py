"""Rollout throughput: arborl's engine against a naive HF `generate` loop and TRL's generation.

All three methods play the same multi-turn episodes (same env, seeds, prompts, sampling
temperature and per-turn token budget) with the same tiny model on this CPU:

  - arborl: `arborl.rollout.run_rollout` (one batched `HFBackend.generate` call per turn over
    the live episodes; its own KV-cache loop that drops finished rows, records logprobs and
    builds the step-view training Batch, all inside the timed region);
  - naive:  episode by episode, turn by turn, one `model.generate` call on a single prompt
    (KV cache on, sampling, stop at EOS);
  - trl:    TRL's GRPOTrainer generation path without vLLM, called through the trainer's own
    `_generate_single_turn` (left-pad with `trl.trainer.utils.pad`, `unwrap_model_for_generation`,
    `model.generate` with TRL's GenerationConfig, cut after the first EOS), batched over the
    live episodes each turn. It returns no logprobs (TRL recomputes them in training).

The baselines rebuild each turn's prompt with `arborl.agent.build_prompt`, parse with
`parse_action` and step the same `EnvPool`, so they differ from arborl only in generation.
Methods run interleaved (A B C A B C ...) and the table shows medians. Sampled trajectories
differ between methods (different RNG streams), so tokens per episode are reported too.
Each run's wall time and process CPU time are both kept: on a shared machine the wall
time swings with the other jobs, while 1-thread CPU time is close to a quiet core's.

    python bench/rollout.py                   # full run (~3 min on 2 cores)
    python bench/rollout.py --quick --repeats 1
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch
from common import format_table, machine_info, median, ratio, write_json

from arborl.agent import AgentConfig, build_prompt, make_memory, parse_action
from arborl.envs import EnvPool
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import run_rollout
from arborl.rollout.config import RolloutConfig

METHODS = ("arborl", "naive", "trl")
TARGET_OVER_TRL = 1.5
"""Issue 20's target: arborl's generated tokens per second at least this many times TRL's."""


@dataclass(frozen=True)
class EnvCase:
    """One benchmarked env setting."""

    env_id: str
    max_turns: int
    """Turn limit per episode (passed to the env, so every method stops at the same turn)."""
    max_new_tokens: int
    """Per-turn token budget."""
    include_instruction: bool


CASES = (
    EnvCase("arborl/Maze-v0", max_turns=8, max_new_tokens=16, include_instruction=False),
    EnvCase("arborl/Countdown-v0", max_turns=4, max_new_tokens=32, include_instruction=False),
)


def agent_config(case: EnvCase) -> AgentConfig:
    return AgentConfig(memory="last_k", memory_k=0, include_instruction=case.include_instruction)


# --- the shared episode loop of the baselines ----------------------------------------------


def play_episodes(generate, tok, case: EnvCase, seeds: list[int], per_episode: bool) -> dict:
    """Play one episode per seed; `generate(list of prompt ids) -> list of completion ids`.

    per_episode=True runs each episode to its end before the next (the naive loop, one
    prompt per call); otherwise all live episodes share one call per turn (TRL's way).
    """
    cfg = agent_config(case)
    pool = EnvPool(case.env_id, len(seeds), max_turns=case.max_turns)
    obs, _ = pool.reset(seeds)
    memories = [make_memory(cfg) for _ in seeds]
    instructions = [
        getattr(pool[i], "instruction", "") if cfg.include_instruction else ""
        for i in range(len(seeds))
    ]
    done = [False] * len(seeds)
    tokens = turns = 0
    eos = tok.eos_token_id

    def turn(indices: list[int]) -> None:
        nonlocal tokens, turns
        prompts = [build_prompt(tok, obs[i], memories[i], instructions[i], cfg) for i in indices]
        completions = generate(prompts)
        actions = {}
        for i, ids in zip(indices, completions):
            tokens += len(ids)
            body = ids[:-1] if ids and ids[-1] == eos else ids
            text = tok.decode(body, skip_special_tokens=False)
            actions[i] = parse_action(text, cfg).action or ""
            memories[i].add(obs[i], text)
        results, flags = pool.step(actions)
        for i in indices:
            obs[i] = results[i].obs
            done[i] = flags[i]
        turns += len(indices)

    if per_episode:
        for i in range(len(seeds)):
            while not done[i]:
                turn([i])
    else:
        while live := [i for i in range(len(seeds)) if not done[i]]:
            turn(live)
    pool.close()
    return {"generated_tokens": tokens, "env_steps": turns}


def naive_generate(model, tok, case: EnvCase, temperature: float):
    """One `model.generate` call per prompt, batch size 1."""

    def generate(prompts: list[list[int]]) -> list[list[int]]:
        out = []
        for p in prompts:
            ids = torch.tensor([p])
            seq = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=case.max_new_tokens,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
                use_cache=True,
            )
            out.append(seq[0, len(p) :].tolist())
        return out

    return generate


def make_trl_trainer(model, tok, max_new_tokens: int, temperature: float, out_dir: str):
    """A GRPOTrainer on `model` used only for its generation method (never trained)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=max_new_tokens,
        temperature=temperature,
        beta=0.0,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    data = Dataset.from_dict({"prompt": ["x"] * 8})
    return GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=data,
        processing_class=tok,
    )


def trl_generate(trainer):
    """TRL's own non-vLLM generation: `GRPOTrainer._generate_single_turn` on token ids."""

    def generate(prompts: list[list[int]]) -> list[list[int]]:
        completion_ids, _ = trainer._generate_single_turn(prompts, None, {}, num_generations=1)
        return [list(c) for c in completion_ids]

    return generate


# --- one timed run per method ----------------------------------------------------------------


def run_method(method: str, model, tok, case: EnvCase, seeds: list[int], rep: int, trainers):
    model.eval()
    torch.manual_seed(rep)  # HF generate samples from the global RNG
    start, cpu_start = time.perf_counter(), time.process_time()
    if method == "arborl":
        cfg = RolloutConfig(max_new_tokens=case.max_new_tokens, temperature=1.0, seed=rep)
        pool = EnvPool(case.env_id, len(seeds), max_turns=case.max_turns)
        result = run_rollout(HFBackend(model, tok), tok, pool, seeds, cfg, agent_config(case))
        pool.close()
        counts = {
            "generated_tokens": int(result.stats["generated_tokens"]),
            "env_steps": int(result.stats["turns"]),
        }
    elif method == "naive":
        counts = play_episodes(naive_generate(model, tok, case, 1.0), tok, case, seeds, True)
    else:
        counts = play_episodes(trl_generate(trainers[case]), tok, case, seeds, False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        **counts,
        "tokens_per_s": counts["generated_tokens"] / wall,
        "tokens_per_cpu_s": counts["generated_tokens"] / cpu,
        "episodes_per_s": len(seeds) / wall,
        "env_steps_per_s": counts["env_steps"] / wall,
        "tokens_per_episode": counts["generated_tokens"] / len(seeds),
    }


def summarize(runs: dict[str, list[dict]]) -> dict[str, Any]:
    keys = (
        "wall_s",
        "cpu_s",
        "tokens_per_s",
        "tokens_per_cpu_s",
        "episodes_per_s",
        "env_steps_per_s",
        "tokens_per_episode",
    )
    summary = {m: {k: median([r[k] for r in rs]) for k in keys} for m, rs in runs.items()}
    for base in ("naive", "trl"):
        # Ratios of medians, and the median of per-repeat ratios (paired, same load).
        paired = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(runs["arborl"], runs[base])]
        summary[f"arborl_over_{base}"] = {
            "tokens_per_s": ratio(summary["arborl"]["tokens_per_s"], summary[base]["tokens_per_s"]),
            "episodes_per_s": ratio(
                summary["arborl"]["episodes_per_s"], summary[base]["episodes_per_s"]
            ),
            "tokens_per_s_paired_median": median(paired),
            "tokens_per_cpu_s": ratio(
                summary["arborl"]["tokens_per_cpu_s"], summary[base]["tokens_per_cpu_s"]
            ),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-1m", help="preset name or checkpoint directory")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per method per run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per method")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (same for all)")
    parser.add_argument("--quick", action="store_true", help="toy size: 4 episodes, 2 turns")
    parser.add_argument(
        "--out", default=None, help="JSON path (default bench/results/rollout.json)"
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cases = CASES
    if args.quick:
        args.episodes = 4
        cases = tuple(EnvCase(c.env_id, 2, c.max_new_tokens, c.include_instruction) for c in CASES)
    model, tok = load_policy(args.model)
    num_params = sum(p.numel() for p in model.parameters())
    seeds = list(range(args.episodes))
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {c: make_trl_trainer(model, tok, c.max_new_tokens, 1.0, tmp) for c in cases}
        # One untimed warm-up per method and case (first-call allocations, lazy imports).
        warm = [EnvCase(c.env_id, 1, c.max_new_tokens, c.include_instruction) for c in cases]
        for c, w in zip(cases, warm):
            trainers[w] = trainers[c]
            for m in METHODS:
                run_method(m, model, tok, w, seeds[:2], 0, trainers)
        runs = {c: {m: [] for m in METHODS} for c in cases}
        for rep in range(args.repeats):
            for c in cases:
                for m in METHODS:
                    r = run_method(m, model, tok, c, seeds, rep, trainers)
                    runs[c][m].append(r)
                    print(
                        f"rep {rep} {c.env_id:22s} {m:6s} {r['wall_s']:7.2f}s "
                        f"{r['tokens_per_s']:8.1f} tok/s {r['cpu_s']:6.2f} CPU s",
                        flush=True,
                    )
    result: dict[str, Any] = {
        "benchmark": "rollout",
        "model": args.model,
        "num_params": num_params,
        "episodes": args.episodes,
        "repeats": args.repeats,
        "quick": args.quick,
        "machine": {**machine_info(args.threads), "loadavg_before": load_before},
        "cases": [],
    }
    rows = []
    for c in cases:
        summary = summarize(runs[c])
        result["cases"].append(
            {
                "env_id": c.env_id,
                "max_turns": c.max_turns,
                "max_new_tokens": c.max_new_tokens,
                "include_instruction": c.include_instruction,
                "summary": summary,
                "runs": runs[c],
            }
        )
        for m in METHODS:
            s = summary[m]
            vs = {"arborl": ("", "")}
            for b in ("naive", "trl"):
                over = summary[f"arborl_over_{b}"]
                vs[b] = (over["tokens_per_s"], over["tokens_per_cpu_s"])
            rows.append(
                [
                    c.env_id,
                    m,
                    s["tokens_per_s"],
                    s["tokens_per_cpu_s"],
                    s["episodes_per_s"],
                    s["env_steps_per_s"],
                    s["tokens_per_episode"],
                    s["wall_s"],
                    s["cpu_s"],
                    *vs[m],
                ]
            )
    headers = [
        "env",
        "method",
        "tok/s",
        "tok/CPU s",
        "episodes/s",
        "env steps/s",
        "tok/episode",
        "wall s",
        "CPU s",
        "arborl speed-up (tok/s)",
        "arborl speed-up (tok/CPU s)",
    ]
    print(format_table(headers, rows))
    for case in result["cases"]:
        over = case["summary"]["arborl_over_trl"]
        met = min(over["tokens_per_s"], over["tokens_per_cpu_s"]) >= TARGET_OVER_TRL
        case["met"] = met
        print(
            f"{case['env_id']}: arborl / TRL {over['tokens_per_s']:.2f}x (wall), "
            f"{over['tokens_per_cpu_s']:.2f}x (CPU); target >= {TARGET_OVER_TRL}x "
            f"{'met' if met else 'NOT met'}"
        )
    result["target_over_trl"] = TARGET_OVER_TRL
    print(f"load average after: {result['machine']['loadavg']}")
    print(f"wrote {write_json(result, args.out, 'rollout')}")


if __name__ == "__main__":
    main()
