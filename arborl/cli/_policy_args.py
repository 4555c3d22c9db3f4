"""Flags shared by `arborl rollout` and `arborl eval`: which policy, how it is prompted."""

from __future__ import annotations

import argparse

from arborl.agent import AgentConfig
from arborl.agent.config import ACTION_FORMATS, MEMORY_KINDS
from arborl.envs.base import SPLITS
from arborl.rollout import RolloutConfig


def add_policy_args(p: argparse.ArgumentParser, default_split: str) -> None:
    p.add_argument(
        "--policy",
        required=True,
        help="random, oracle, a tiny preset name (e.g. tiny-1m), a checkpoint directory, "
        "or an OpenAI-compatible URL (http://host:port/v1; needs --tokenizer)",
    )
    p.add_argument("--env", required=True, help="registered env id, e.g. arborl/Maze-v0")
    p.add_argument("--split", default=default_split, choices=SPLITS, help="task split to draw from")
    p.add_argument("--num-episodes", type=int, default=100, help="episodes to run in total")
    p.add_argument("--seed", type=int, default=0, help="seed of the task draw and of sampling")
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (0 = greedy)"
    )
    p.add_argument("--max-turns", type=int, default=None, help="turn limit (default: the env's)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens generated per turn")
    p.add_argument(
        "--memory", default="full", choices=MEMORY_KINDS, help="past turns in the prompt"
    )
    p.add_argument("--memory-k", type=int, default=4, help="turns kept by --memory last_k")
    p.add_argument(
        "--action-format",
        default="plain",
        choices=ACTION_FORMATS,
        help="how responses hold actions",
    )
    p.add_argument(
        "--no-instruction", action="store_true", help="leave the env's instruction out of prompts"
    )
    p.add_argument("--tokenizer", default=None, help="tokenizer (preset or dir) for a URL policy")
    p.add_argument("--chunk-episodes", type=int, default=64, help="episodes run at once")


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
    agent = AgentConfig(
        memory=args.memory,
        memory_k=args.memory_k,
        action_format=args.action_format,
        include_instruction=not args.no_instruction,
    )
    return cfg, agent


def format_stats(stats: dict[str, float]) -> str:
    keys = ("success_rate", "mean_return", "mean_turns", "invalid_action_rate", "format_ok_rate")
    keys += ("episodes", "generated_tokens", "wall_s", "tokens_per_s")
    return "  ".join(f"{k}={stats[k]:.4g}" for k in keys if k in stats)
