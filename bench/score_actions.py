"""Scoring K candidate actions vs generating one action, on the same prompt batch.

`agent.action_mode=score` (`arborl.rollout.action_scoring.ScoringPolicy`) replaces each
turn's generation by one forward pass over every live episode's prompt and its K candidate
responses. Issue 30's target: that costs at most ~1.5x one free-generation turn of a
one-word action (`LMPolicy`, HF backend with its KV-cache decoder, `max_new_tokens` = the
longest candidate's tokens: the word and the end-of-turn token).

Both sides act on the same episodes, freshly reset (16 tasks x 8 episodes, as an RL step
of the demo config, where a group's 8 episodes share their first prompt: generation
decodes all 128 rows, scoring scores the 16 distinct states; and 128 distinct tasks, as
later turns whose groups have diverged), through `policy.act`: prompt building (cached after the warm-up
call), the model work, sampling and the `Decision`s are all inside the timed region. The
two run interleaved (A B A B ...) and the table shows medians of wall and process CPU time
(on a shared machine the wall time swings with the other jobs; CPU time of 1 thread is
close to a quiet core's).

Every timed call starts cold. Within a rollout both sides also reuse work across turns
(`HFBackend` remembers prompt encodings, `ScoringPolicy` remembers scored states while the
weights stay the same); `python bench/rl_step.py agent.action_mode=score` times whole RL
steps, against the same command without the override.

    python bench/score_actions.py            # all cases (~2 min on 2 cores)
    python bench/score_actions.py --quick    # fewer repeats, the small models only
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

import torch
from common import format_table, machine_info, median, ratio, write_json

from arborl.agent import AgentConfig
from arborl.envs import EnvPool
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import LMPolicy, RolloutConfig, ScoringPolicy
from arborl.rollout.loop import _start_episodes

TARGET = 1.5
"""Issue 30: scoring K candidates at most this many times one generated one-word action."""


@dataclass(frozen=True)
class Case:
    """One benchmarked (model, env) pair."""

    model: str
    env_id: str
    env_kwargs: tuple = ()
    num_tasks: int = 16
    group_size: int = 8
    quick: bool = True
    """Part of `--quick`."""


SHORT = (("short_actions", True),)
CASES = [
    Case("tiny-0.1m", "arborl/Maze-v0", SHORT),  # the demo: u/d/l/r
    # Every prompt distinct (a later turn, groups diverged): nothing is scored once for
    # several episodes, the worst case for scoring against generation.
    Case("tiny-0.1m", "arborl/Maze-v0", SHORT, num_tasks=128, group_size=1),
    Case("tiny-0.1m", "arborl/Maze-v0"),  # up/down/left/right: 3-6 char tokens each
    Case("bpe-tiny-0.1m", "arborl/Sokoban-v0"),  # GPT-2 BPE, 50k vocabulary
    Case("tiny-1m", "arborl/FrozenLake-v0"),
    Case("tiny-20m", "arborl/Maze-v0", num_tasks=4, quick=False),  # the forward dominates
]


def _episodes(case: Case, pool, cfg: RolloutConfig):
    seeds = list(range(case.num_tasks))
    return _start_episodes(pool, seeds, cfg, None)


def _time(policy, episodes, envs) -> tuple[float, float]:
    """(wall s, process CPU s) of one `act` over every episode (a new rollout's turn 0:
    `begin_rollout`, once per rollout, is not timed)."""
    policy.begin_rollout(episodes)
    w0, c0 = time.perf_counter(), time.process_time()
    out = policy.act(episodes, envs)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert len(out) == len(episodes) and all(d.action is not None for d in out)
    return wall, cpu


def run_case(case: Case, repeats: int) -> dict:
    model, tok = load_policy(case.model, seed=0)
    model.eval()
    backend = HFBackend(model, tok, seed=0, max_batch_size=128)
    agent = AgentConfig(memory="last_k", memory_k=0, include_instruction=False)
    cfg = RolloutConfig(num_tasks=case.num_tasks, group_size=case.group_size, seed=0)
    pool = EnvPool(case.env_id, case.num_tasks * case.group_size, **dict(case.env_kwargs))
    try:
        episodes = _episodes(case, pool, cfg)
        envs = [pool[ep.index] for ep in episodes]
        scorer = ScoringPolicy(backend, tok, cfg, replace(agent, action_mode="score"))
        actions = episodes[0].info["available_actions"]
        lengths = [len(scorer._tokens(a)[0]) for a in actions]
        gen_cfg = replace(cfg, max_new_tokens=max(lengths))  # a word and the end token
        generator = LMPolicy(backend, tok, gen_cfg, agent)
        prompt_tokens = len(generator._prompt(episodes[0])[0])
        sides = {"generate": generator, "score": scorer}
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        with torch.inference_mode():
            for policy in sides.values():  # warm-up: prompt caches, kernels
                _time(policy, episodes, envs)
            for _ in range(repeats):
                for name, policy in sides.items():
                    # each call starts cold: no remembered prompt encodings (generation)
                    # or scored states (scoring) from the call before
                    backend.forget_prompts()
                    scorer._scored.clear()
                    times[name].append(_time(policy, episodes, envs))
    finally:
        pool.close()
    out = {
        "model": case.model,
        "env": case.env_id + "".join(f" {k}={v}" for k, v in case.env_kwargs),
        "prompts": len(episodes),
        "distinct_prompts": len({tuple(generator._prompt(ep)[0]) for ep in episodes}),
        "prompt_tokens": prompt_tokens,
        "candidates": len(actions),
        "candidate_tokens": lengths,
        "max_new_tokens": max(lengths),
    }
    for name, ts in times.items():
        out[f"{name}_wall_s"] = median([w for w, _ in ts])
        out[f"{name}_cpu_s"] = median([c for _, c in ts])
    out["ratio_wall"] = ratio(out["score_wall_s"], out["generate_wall_s"])
    out["ratio_cpu"] = ratio(out["score_cpu_s"], out["generate_cpu_s"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="interleaved timed calls per side")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the demo: 1)")
    ap.add_argument("--quick", action="store_true", help="at most 3 repeats, small models only")
    ap.add_argument(
        "--out", default=None, help="JSON path (default bench/results/score_actions.json)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    before = machine_info(args.threads)
    cases = [c for c in CASES if c.quick or not args.quick]
    repeats = min(args.repeats, 3) if args.quick else args.repeats
    rows = [run_case(c, repeats) for c in cases]
    headers = ["model", "env", "prompts", "distinct", "prompt tok", "K", "gen tok",
               "generate s", "score s", "score / generate", "CPU ratio"]  # fmt: skip
    table = [
        [r["model"], r["env"], r["prompts"], r["distinct_prompts"], r["prompt_tokens"],
         r["candidates"], r["max_new_tokens"], r["generate_wall_s"], r["score_wall_s"],
         r["ratio_wall"], r["ratio_cpu"]]
        for r in rows
    ]  # fmt: skip
    print(f"CPU: {before['cpu_model']}  threads: {args.threads}  load before: {before['loadavg']}")
    print(format_table(headers, table))
    worst = max(r["ratio_cpu"] for r in rows)
    verdict = "met" if worst <= TARGET else "NOT met"
    print(f"target score <= {TARGET}x generate (CPU time): {verdict} (worst {worst:.2f}x)")
    after = machine_info(args.threads)
    print(f"load average after: {after['loadavg']}")
    result = {"benchmark": "score_actions", "quick": args.quick, "machine": before,
              "loadavg_after": after["loadavg"], "repeats": repeats, "target": TARGET,
              "met": worst <= TARGET, "cases": rows}  # fmt: skip
    print(f"wrote {write_json(result, args.out, 'score_actions')}")


if __name__ == "__main__":
    main()
