"""How often BPE's sampled ids are not the encoding of their own text (docs/vllm.md).

Rolls out the `bpe-tiny-0.1m` preset (random init, GPT-2's BPE + ChatML) in the episode
view and counts the turns whose response ids differ from `encode(decode(ids))`: the turns
on which any code that re-encodes text would train on other tokens than were sampled.

    python bench/bpe_drift.py                   # Maze and Countdown, 6 and 16 new tokens
    python bench/bpe_drift.py --quick           # one env, one length, 2 tasks
"""

from __future__ import annotations

import argparse

from common import format_table, machine_info, write_json


def drift(model, tok, env_id: str, max_new_tokens: int, num_tasks: int) -> dict:
    from arborl.agent import AgentConfig
    from arborl.generation import HFBackend
    from arborl.rollout import RolloutConfig, run_rollout

    cfg = RolloutConfig(view="episode", group_size=2, max_new_tokens=max_new_tokens,
                        max_turns=3, seed=0)  # fmt: skip
    backend = HFBackend(model, tok, seed=0)
    res = run_rollout(backend, tok, env_id, list(range(1, num_tasks + 1)), cfg, AgentConfig())
    turns = [t for ep in res.episodes for t in ep.turns]
    differ = sum(
        tok.encode(tok.decode(t.response_ids), add_special_tokens=False) != t.response_ids
        for t in turns
    )
    return {"env_id": env_id, "max_new_tokens": max_new_tokens, "turns": len(turns),
            "re_encoded_differs": differ, "fraction": differ / max(1, len(turns))}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one env, one length, 2 tasks")
    p.add_argument("--num-tasks", type=int, default=8, help="tasks per case (2 episodes each)")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/bpe_drift.json)")
    args = p.parse_args()
    import torch

    from arborl.models import load_policy

    torch.set_num_threads(1)
    model, tok = load_policy("bpe-tiny-0.1m", seed=0)
    envs = ["arborl/Maze-v0"] if args.quick else ["arborl/Maze-v0", "arborl/Countdown-v0"]
    lengths = [6] if args.quick else [6, 16]
    tasks = 2 if args.quick else args.num_tasks
    cases = [drift(model.eval(), tok, e, n, tasks) for e in envs for n in lengths]
    rows = [[c["env_id"], c["max_new_tokens"], c["turns"], c["re_encoded_differs"],
             f"{c['fraction']:.3f}"] for c in cases]  # fmt: skip
    print(format_table(["env", "new tokens", "turns", "re-encode differs", "fraction"], rows))
    doc = {"benchmark": "bpe_drift", "quick": args.quick, "machine": machine_info(1),
           "cases": cases}  # fmt: skip
    print(f"wrote {write_json(doc, args.out, 'bpe_drift')}")


if __name__ == "__main__":
    main()
