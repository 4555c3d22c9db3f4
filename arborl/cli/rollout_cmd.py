"""`arborl rollout`: run a policy on an env and write the episodes as trajectories.

    arborl rollout --policy tiny-1m --env arborl/Maze-v0 --split train \\
        --num-episodes 64 --group-size 8 --out runs/demo/rollouts.jsonl

The output format follows the suffix (.jsonl or .parquet); stats are printed at the end.
The loop itself is `arborl.rollout.collect_episodes`.
"""

from __future__ import annotations

import argparse
import json

from arborl.cli._policy_args import add_policy_args, configs_from_args, format_stats


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollout",
        help="run a policy on an env and write trajectories",
        description="Run a policy (LM, random or oracle) on an env and write its episodes.",
    )
    add_policy_args(p, default_split="train")
    p.add_argument("--out", required=True, help="output file: .jsonl or .parquet")
    p.add_argument("--group-size", type=int, default=1, help="episodes per task (shared seed)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from arborl.data import write_trajectories
    from arborl.rollout import collect_episodes, make_policy

    if not str(args.out).endswith((".jsonl", ".parquet")):
        raise SystemExit(f"--out {args.out!r}: use a .jsonl or .parquet file name")
    cfg, agent = configs_from_args(args, args.group_size)
    policy = make_policy(args.policy, cfg, agent, seed=args.seed, tokenizer=args.tokenizer)
    with tqdm(total=args.num_episodes, desc="episodes", disable=args.no_progress) as bar:
        result = collect_episodes(
            policy,
            args.env,
            args.num_episodes,
            cfg,
            split=args.split,
            seed=args.seed,
            chunk_episodes=args.chunk_episodes,
            progress=bar.update,
        )
    path = write_trajectories(args.out, result.trajectories)
    print(format_stats(result.stats))
    print(f"wrote {len(result.trajectories)} trajectories to {path}")
    print(json.dumps({k: round(v, 6) for k, v in result.stats.items()}))
    return 0
