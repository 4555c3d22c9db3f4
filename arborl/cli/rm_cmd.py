"""`arborl rm`: reward models from trajectories to a served endpoint.

    arborl rollout --policy mixed... (or any trajectories)      # a folder of .jsonl files
    arborl rm data runs/demo/trajectories --pairs pairs.jsonl \\
        --steps steps.jsonl --policy mixed:0.5 --env-kwargs '{"short_actions": true}'
    arborl rm train --kind orm --data pairs.jsonl --eval-data test_pairs.jsonl --out runs/orm
    arborl rm eval runs/orm/model --pairs test_pairs.jsonl --out runs/orm/eval
    arborl rm serve runs/orm/model --port 8600                 # prints its token
    arborl train reward.sources.rm=0.5 reward.rm_model=http://127.0.0.1:8600

The logic lives in `arborl.rewards` and `arborl.train.rm`; this module parses flags and
prints. `rm train` has one flag per `RMTrainConfig` field, documented by the field.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from arborl.config.flags import add_flags, read_flags
from arborl.serving.config import ServerConfig

RM_SERVE = ServerConfig(port=8600)
"""`arborl rm serve`'s server flags and their defaults."""


# --- rm data ----------------------------------------------------------------------------------
def _trajectory_files(inputs: list[str]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted([*p.rglob("*.jsonl"), *p.rglob("*.parquet")])
            if not found:
                raise SystemExit(f"error: folder {item!r} holds no .jsonl or .parquet files")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise SystemExit(f"error: {item!r} is neither a trajectory file nor a folder")
    return files


def _json_arg(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f'error: {flag} {text!r} is not JSON ({e}); e.g. {{"size": 6}}') from e
    if not isinstance(value, dict):
        raise SystemExit(f"error: {flag} must be a JSON object, got {text!r}")
    return value


def _data_policy(args: argparse.Namespace):
    from arborl.agent import AgentConfig
    from arborl.agent.settings import load_agent_settings
    from arborl.rewards.rm_data import make_data_policy
    from arborl.rollout import RolloutConfig

    rollout = RolloutConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            seed=args.seed)  # fmt: skip
    agent = AgentConfig(**load_agent_settings(args.policy))
    return make_data_policy(args.policy, args.seed, rollout, agent)


def _cmd_data(args: argparse.Namespace) -> int:
    from arborl.data import read_trajectories
    from arborl.rewards.rm_data import (
        build_preference_pairs,
        monte_carlo_sibling_labels,
        monte_carlo_step_labels,
        write_jsonl,
    )

    if not args.pairs and not args.steps and not args.sibling_steps:
        print("error: give --pairs FILE, --steps FILE, --sibling-steps FILE or several",
              file=sys.stderr)  # fmt: skip
        return 2
    trajs = [t for f in _trajectory_files(args.trajectories) for t in read_trajectories(f)]
    print(f"read {len(trajs)} trajectories")
    if args.pairs:
        pairs = build_preference_pairs(trajs, args.min_margin, args.max_similarity,
                                       args.max_pairs_per_task, args.seed)  # fmt: skip
        write_jsonl(args.pairs, pairs)
        tasks = len({p.task_id for p in pairs})
        print(f"wrote {len(pairs)} preference pairs over {tasks} tasks to {args.pairs}")
    chosen = [t for t in trajs if t.steps][: args.max_trajectories]
    for path, label in ((args.steps, monte_carlo_step_labels),
                        (args.sibling_steps, monte_carlo_sibling_labels)):  # fmt: skip
        if not path:
            continue
        records = label(
            chosen, _data_policy(args), _json_arg(args.env_kwargs, "--env-kwargs"),
            args.num_rollouts, args.max_envs, args.split,
        )  # fmt: skip
        write_jsonl(path, records)
        num_steps = sum(sum(not math.isnan(y) for y in r.labels) for r in records)
        print(f"wrote {len(records)} step-label records ({num_steps} labelled steps) to {path}")
    return 0


# --- rm train ---------------------------------------------------------------------------------
def _cmd_train(args: argparse.Namespace) -> int:
    from arborl.config import ConfigError
    from arborl.train.rm import RMTrainConfig, train_reward_model

    try:
        cfg = read_flags(RMTrainConfig, args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = train_reward_model(cfg)
    print(json.dumps(summary, indent=2))
    return 0


# --- rm eval ----------------------------------------------------------------------------------
def _cmd_eval(args: argparse.Namespace) -> int:
    from arborl.rewards.reward_model import RewardModel
    from arborl.rewards.rm_data import read_pairs, read_step_labels
    from arborl.train.rm import evaluate_pairs, evaluate_steps, plot_calibration

    if not args.pairs and not args.steps:
        print("error: give --pairs FILE, --steps FILE or both", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.num_threads)
    model = RewardModel.from_pretrained(args.model)
    metrics: dict[str, Any] = {"model": args.model, "kind": model.kind}
    curves = {}
    if args.pairs:
        m, points = evaluate_pairs(model, read_pairs(args.pairs), args.batch_size)
        metrics.update(m)
        curves["trajectories (target: won)"] = points
    if args.steps:
        m, points = evaluate_steps(model, read_step_labels(args.steps), args.batch_size)
        metrics.update(m)
        curves["steps (target: MC label)"] = points
    out = Path(args.out)
    plot = plot_calibration(curves, out / "calibration.png")
    metrics["calibration_plot"] = str(plot)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    return 0


# --- rm serve ---------------------------------------------------------------------------------
def _cmd_serve(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from arborl.rewards.reward_model import RewardModel
    from arborl.rewards.rm_server import TOKEN_ENV, create_app, resolve_token

    server = read_flags(RM_SERVE, args)
    torch.set_num_threads(args.num_threads)
    token, generated = resolve_token(server.token, server.token_file)
    model = RewardModel.from_pretrained(args.model)
    app = create_app(model, token, args.model_name or args.model, args.max_trajectories,
                     args.batch_size, args.max_steps, args.max_chars,
                     max_request_s=server.max_request_s)  # fmt: skip
    if generated:
        print(f"no --token or {TOKEN_ENV} given; generated token: {token}", flush=True)
        print(f"clients: export {TOKEN_ENV}={token}", flush=True)
    print(f"serving {model.kind} reward model {args.model} on http://{server.host}:{server.port}",
          flush=True)  # fmt: skip
    uvicorn.run(app, host=server.host, port=server.port, log_level=args.log_level)
    return 0


# --- parser -----------------------------------------------------------------------------------
def _add_data_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="preference pairs and MC step labels from trajectories",
                       description="Build preference pairs (same task, higher vs lower return) "
                       "and Monte-Carlo step labels (continuations' success rate after each step).")  # fmt: skip
    p.add_argument("trajectories", nargs="+", help="trajectory files (.jsonl/.parquet) or folders")
    p.add_argument("--pairs", help="write preference pairs to this .jsonl file")
    p.add_argument("--steps", help="write step labels to this .jsonl file")
    p.add_argument(
        "--sibling-steps",
        help="also label every untaken action at each state (envs with available_actions) "
        "and write those records to this .jsonl file; train on it beside --steps",
    )
    p.add_argument(
        "--min-margin",
        type=float,
        default=1e-6,
        help="drop pairs whose returns differ by at most this (ties; default 1e-6)",
    )
    p.add_argument(
        "--max-similarity",
        type=float,
        default=0.95,
        help="drop pairs whose action sequences are more similar than this (0-1)",
    )
    p.add_argument(
        "--max-pairs-per-task",
        type=int,
        default=None,
        help="keep a random subset of at most this many pairs per task",
    )
    p.add_argument(
        "--policy",
        default="random",
        help="policy of the MC continuations: random, oracle, mixed:P, a preset, "
        "a checkpoint dir or an OpenAI-compatible URL (default random)",
    )
    p.add_argument(
        "--num-rollouts",
        type=int,
        default=8,
        help="continuations per step for the step labels (default 8)",
    )
    p.add_argument(
        "--max-trajectories",
        type=int,
        default=None,
        help="label only the first this many trajectories (MC labels are costly)",
    )
    p.add_argument(
        "--env-kwargs",
        default="{}",
        help="JSON env constructor kwargs the trajectories were recorded with",
    )
    p.add_argument(
        "--split",
        default=None,
        choices=["train", "val", "test"],
        help="split to replay tasks from (default: each trajectory's meta.split)",
    )
    p.add_argument(
        "--max-envs",
        type=int,
        default=256,
        help="continuations run side by side in one batch (default 256)",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=8, help="LM policies: tokens per action (default 8)"
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="LM policies: sampling temperature (default 1.0)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of pair subsets and of the policy")
    p.set_defaults(func=_cmd_data)  # fmt: skip


def register(subparsers: argparse._SubParsersAction) -> None:
    from arborl.train.rm_config import RMTrainConfig

    parser = subparsers.add_parser(
        "rm", help="build data for, train, evaluate and serve reward models",
        description="Outcome and process reward models trained from trajectories.",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="rm_command", metavar="RM_COMMAND")
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])
    _add_data_parser(sub)

    p = sub.add_parser("train", help="train an outcome or process reward model",
                       description="Train a reward model; one flag per RMTrainConfig field.")  # fmt: skip
    add_flags(p, RMTrainConfig, layered=True)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="pairwise / per-step accuracy and a calibration plot",
                       description="Evaluate a reward model on pairs and/or step labels.")  # fmt: skip
    p.add_argument("model", help="reward model directory (from `arborl rm train`)")
    p.add_argument("--pairs", help="preference-pair file: reports pairwise accuracy")
    p.add_argument("--steps", help="step-label file: reports per-step accuracy and Brier score")
    p.add_argument("--out", required=True, help="folder for metrics.json and calibration.png")
    p.add_argument("--batch-size", type=int, default=32, help="trajectories per forward pass")
    p.add_argument("--num-threads", type=int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("serve", help="serve a reward model over HTTP (token auth)",
                       description="POST /v1/score scores trajectories; GET /health, /v1/info.")  # fmt: skip
    p.add_argument("model", help="reward model directory (from `arborl rm train`)")
    add_flags(p, RM_SERVE)
    p.add_argument("--model-name", default=None, help="name reported by /v1/info (default MODEL)")
    p.add_argument("--max-trajectories", type=int, default=1024,
                   help="most trajectories per request (more: HTTP 413)")  # fmt: skip
    p.add_argument(
        "--max-steps",
        type=int,
        default=256,
        help="most steps per trajectory (more: HTTP 413; default 256)",
    )
    p.add_argument(
        "--max-chars",
        type=int,
        default=1_000_000,
        help="most characters of text per request (more: HTTP 413)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="trajectories per forward pass")
    p.add_argument("--num-threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    p.set_defaults(func=_cmd_serve)
