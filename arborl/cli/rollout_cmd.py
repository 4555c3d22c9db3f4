"""`arborl rollout`: run a policy on an env and write the episodes as trajectories.

    arborl rollout --policy tiny-1m --env arborl/Maze-v0 --split train \\
        --num-episodes 64 --group-size 8 --out runs/demo/rollouts.jsonl

The output format follows the suffix (.jsonl or .parquet); stats are printed at the end.
Episodes are appended to `<out stem>.partial.jsonl` as each chunk finishes, so a killed
run keeps every finished chunk in a file whose name says it is incomplete; the `--out`
file appears (atomically) only when every episode is done, and the partial file goes.
Envs run in `--pool-mode` (default: the env package's preferred isolation, in-process for
built-in envs), as `env.pool_mode` does for training. The loop itself is `arborl.rollout.collect_episodes`; the policy and prompt flags defined
here are shared with `arborl eval`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

from arborl.agent import AgentConfig
from arborl.agent.config import ACTION_FORMATS, ACTION_MODES, MEMORIES, SCORE_NORMS
from arborl.agent.settings import load_agent_settings
from arborl.cli.names import POOL_MODES, SPLITS
from arborl.rollout import RolloutConfig

# --- flags shared with `arborl eval` ---------------------------------------------------


def add_policy_args(p: argparse.ArgumentParser, default_split: str) -> None:
    p.add_argument(
        "--policy",
        required=True,
        help="random, oracle, a tiny preset name (e.g. tiny-1m), a checkpoint directory, "
        "or an OpenAI-compatible URL (http://host:port/v1; needs --tokenizer)",
    )
    p.add_argument("--env", required=True, help="registered env id, e.g. arborl/Maze-v0")
    p.add_argument(
        "--split",
        default=default_split,
        help=f"task split to draw from: {'/'.join(SPLITS)}, or an env's own split name "
        "(e.g. ALFWorld's valid_seen, valid_unseen); the env rejects one it lacks",
    )
    p.add_argument("--num-episodes", type=int, default=100, help="episodes to run in total")
    p.add_argument("--seed", type=int, default=0, help="seed of the task draw and of sampling")
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (0 = greedy)"
    )
    p.add_argument("--max-turns", type=int, default=None, help="turn limit (default: the env's)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens generated per turn")
    p.add_argument(
        "--memory",
        default=None,
        choices=MEMORIES,
        help="past turns in the prompt (default: the checkpoint's arborl_agent.json, else full)",
    )
    p.add_argument(
        "--memory-k", type=int, default=None, help="turns kept by --memory last_k (default 4)"
    )
    p.add_argument(
        "--action-format",
        default=None,
        choices=ACTION_FORMATS,
        help="how responses hold actions (default: the checkpoint's, else plain)",
    )
    p.add_argument(
        "--action-mode",
        default=None,
        choices=ACTION_MODES,
        help="generate: sample a free-text action; score: score the env's "
        "info['available_actions'] with the model and sample one (a local model only; "
        "default: the checkpoint's, else generate)",
    )
    p.add_argument(
        "--score-norm",
        default=None,
        choices=SCORE_NORMS,
        help="with --action-mode score: a candidate's log-probability as a sum, per token or "
        "per word (default: the checkpoint's, else word)",
    )
    p.add_argument(
        "--no-instruction",
        action="store_true",
        default=None,
        help="leave the env's instruction out of prompts (default: the checkpoint's setting)",
    )
    p.add_argument("--tokenizer", default=None, help="tokenizer (preset or dir) for a URL policy")
    p.add_argument("--chunk-episodes", type=int, default=64, help="episodes run at once")
    p.add_argument(
        "--pool-mode",
        default="auto",
        choices=("auto", *POOL_MODES, "openenv"),
        help="where the envs run, as env.pool_mode in training (auto: the env package's "
        "preferred mode, in-process for built-in envs; openenv: the servers of --env-urls)",
    )
    p.add_argument(
        "--env-urls",
        nargs="+",
        default=[],
        metavar="URL",
        help="env servers to use instead of starting envs, as env.urls in training: needed by "
        "--pool-mode openenv, optional for http (bearer token: the ARBORL_TOKEN variable)",
    )
    p.add_argument(
        "--env-timeout-s",
        type=float,
        default=30.0,
        help="seconds an out-of-process env call may take before it counts as an env error",
    )
    p.add_argument(
        "--env-kwargs",
        default="{}",
        help="JSON env constructor kwargs, e.g. '{\"list_actions\": true}' (ScienceWorld's "
        "valid-action list, which the random policy draws from)",
    )


def pool_args(args: argparse.Namespace) -> dict:
    """The `collect_episodes` pool settings (and env kwargs) of the shared flags."""
    if args.env_timeout_s <= 0:
        raise SystemExit(f"--env-timeout-s {args.env_timeout_s}: must be > 0 seconds")
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as e:
        raise SystemExit(
            f"--env-kwargs {args.env_kwargs!r} is not JSON ({e}); e.g. '{{\"list_actions\": true}}'"
        ) from e
    if not isinstance(env_kwargs, dict):
        raise SystemExit(f"--env-kwargs {args.env_kwargs!r}: must be a JSON object")
    options: dict = {"timeout_s": args.env_timeout_s}
    if args.pool_mode == "openenv" and not args.env_urls:
        raise SystemExit(
            "--pool-mode openenv drives OpenEnv servers someone runs, but --env-urls is empty; "
            "pass --env-urls http://HOST:PORT (for an arborl env: `arborl env serve ID "
            "--protocol openenv`)"
        )
    if args.env_urls:
        if args.pool_mode not in ("http", "openenv"):
            raise SystemExit(
                f"--env-urls {' '.join(args.env_urls)} is only read by --pool-mode http or "
                f"openenv, but --pool-mode is {args.pool_mode}; pass --pool-mode http or openenv"
            )
        options.update(urls=list(args.env_urls), token=os.environ.get("ARBORL_TOKEN"))
    return {"pool_mode": args.pool_mode, "pool_options": options, "env_kwargs": env_kwargs}


def configs_from_args(
    args: argparse.Namespace, group_size: int
) -> tuple[RolloutConfig, AgentConfig]:
    cfg = RolloutConfig(
        group_size=group_size,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
    )
    agent = AgentConfig(**load_agent_settings(args.policy))
    flags = {
        "memory": args.memory,
        "memory_k": args.memory_k,
        "action_format": args.action_format,
        "action_mode": args.action_mode,
        "score_norm": args.score_norm,
        "include_instruction": None if args.no_instruction is None else not args.no_instruction,
    }
    agent = dataclasses.replace(agent, **{k: v for k, v in flags.items() if v is not None})
    return cfg, agent


def format_stats(stats: dict[str, float]) -> str:
    keys = ("success", "mean_return", "mean_turns", "invalid_action_rate", "format_ok_rate")
    keys += ("episodes", "generated_tokens", "wall_s", "tokens_per_s")
    return "  ".join(f"{k}={stats[k]:.4g}" for k in keys if k in stats)


# --- the command -------------------------------------------------------------------------


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


def collect_from_args(args: argparse.Namespace, policy, cfg: RolloutConfig, **extra):
    """`collect_episodes` of `policy` on the tasks the shared flags name (env, episodes,
    split, seed, chunking, pool): what `arborl rollout` and `arborl eval` both run;
    `extra` adds keywords (a progress callback, `on_chunk`, the pool's own)."""
    from arborl.rollout import collect_episodes

    return collect_episodes(
        policy, args.env, args.num_episodes, cfg, split=args.split, seed=args.seed,
        chunk_episodes=args.chunk_episodes, **extra,
    )  # fmt: skip


def partial_path(out: str | Path) -> Path:
    """Where `arborl rollout --out runs/x.jsonl` appends finished episodes until it is
    done: `runs/x.partial.jsonl` (readable with `arborl.data.read_trajectories`)."""
    out = Path(out)
    return out.with_name(f"{out.stem}.partial.jsonl")


def append_trajectories(path: Path, trajectories) -> None:
    """Append records to a JSONL file and fsync, so a kill loses no finished episode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict()) + "\n")
        f.flush()
        os.fsync(f.fileno())


def run(args: argparse.Namespace) -> int:
    from arborl.data import write_trajectories
    from arborl.progress import progress
    from arborl.rollout import make_policy

    if not str(args.out).endswith((".jsonl", ".parquet")):
        raise SystemExit(f"--out {args.out!r}: use a .jsonl or .parquet file name")
    pool = pool_args(args)  # bad pool flags stop before the policy loads
    cfg, agent = configs_from_args(args, args.group_size)
    policy = make_policy(args.policy, cfg, agent, seed=args.seed, tokenizer=args.tokenizer)
    partial = partial_path(args.out)
    partial.unlink(missing_ok=True)  # a killed earlier run's leftovers: this run redoes them
    with progress(args.num_episodes, "episodes", disable=args.no_progress) as bar:
        result = collect_from_args(
            args, policy, cfg, progress=bar.update,
            on_chunk=lambda trajs: append_trajectories(partial, trajs), **pool,
        )  # fmt: skip
    path = write_trajectories(args.out, result.trajectories)
    partial.unlink(missing_ok=True)
    print(format_stats(result.stats))
    print(f"wrote {len(result.trajectories)} trajectories to {path}")
    print(json.dumps({k: round(v, 6) for k, v in result.stats.items()}))
    return 0
