"""`arborl eval`: success rate (Wilson 95% CI) of a policy, beside random and oracle.

    arborl eval --policy runs/demo/checkpoints/final --env arborl/Maze-v0 \\
        --split test --num-episodes 200 --json eval.json

Every policy runs the same tasks (one task seed draw from --seed), so rows are paired.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from arborl.cli.rollout_cmd import add_policy_args, collect_from_args, configs_from_args, pool_args
from arborl.cli.search_cmd import add_search_args, evaluate_with_search

COLUMNS = (
    ("policy", "policy", "{}"),
    ("success", "success", "{:.3f}"),
    ("95% CI", "ci", "{}"),
    ("return", "mean_return", "{:.3f}"),
    ("turns", "mean_turns", "{:.2f}"),
    ("invalid", "invalid_action_rate", "{:.3f}"),
    ("episodes", "episodes", "{:.0f}"),
)
SEARCH_COLUMNS = (
    ("model calls", "mean_model_calls", "{:.1f}"),
    ("nodes", "mean_nodes", "{:.1f}"),
    ("stop", "main_stop_reason", "{}"),
)
"""Shown when a row searched (`--search`): per task, and the commonest stop reason."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="success rate of a policy with a 95%% CI, beside random and oracle",
        description="Evaluate a policy on an env split; random and oracle rows for scale.",
    )
    add_policy_args(p, default_split="test")
    p.add_argument("--json", default=None, help="also write the table as JSON to this file")
    p.add_argument("--no-baselines", action="store_true", help="skip the random and oracle rows")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    add_search_args(p, required=False)  # --search A --budget N: the policy under search
    p.set_defaults(func=run)


def evaluate(args: argparse.Namespace, policy_spec: str) -> dict[str, Any]:
    """One table row: run `policy_spec` on the shared tasks and summarise."""
    from arborl.progress import progress
    from arborl.rollout import make_policy

    if args.algo is not None and policy_spec == args.policy:
        return evaluate_with_search(args)

    cfg, agent = configs_from_args(args, group_size=1)
    policy = make_policy(policy_spec, cfg, agent, seed=args.seed, tokenizer=args.tokenizer)
    bar = progress(args.num_episodes, f"{policy_spec} episodes", disable=args.no_progress)
    try:
        result = collect_from_args(args, policy, cfg, progress=bar.update, **pool_args(args))
    except NotImplementedError as e:  # e.g. an env without an oracle
        return {"policy": policy_spec, "error": str(e)}
    finally:
        bar.close()
    s = result.stats
    return {
        "policy": policy_spec,
        "success": s["success"],
        "success_lo": s["success_lo"],
        "success_hi": s["success_hi"],
        "mean_return": s["mean_return"],
        "mean_turns": s["mean_turns"],
        "invalid_action_rate": s["invalid_action_rate"],
        "format_ok_rate": s["format_ok_rate"],
        "episodes": s["episodes"],
        "wall_s": s["wall_s"],
        "lost_tasks": [t.task_id for t in result.trajectories if not t.won],
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table; search columns when a row searched; each row's note
    (e.g. a search that never called the policy) below it."""
    columns = COLUMNS + (SEARCH_COLUMNS if any("mean_nodes" in r for r in rows) else ())
    cells = [[c[0] for c in columns]]
    for r in rows:
        if "error" in r:
            cells.append([r["policy"], f"n/a ({r['error'][:60]})"] + [""] * (len(columns) - 2))
            continue
        r = {**r, "ci": f"[{r['success_lo']:.3f}, {r['success_hi']:.3f}]"}
        cells.append([fmt.format(r[key]) if key in r else "-" for _, key, fmt in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines += [f"note: {r['note']}" for r in rows if r.get("note")]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    pool_args(args)  # a bad --env-kwargs / --pool-mode / --env-urls stops before any row runs
    specs = [args.policy]
    if not args.no_baselines:
        specs += [b for b in ("random", "oracle") if b != args.policy]
    rows = [evaluate(args, s) for s in specs]
    print(f"{args.env}  split={args.split}  episodes={args.num_episodes}  seed={args.seed}")
    print(format_table(rows))
    if args.json:
        doc = {
            "env": args.env,
            "split": args.split,
            "num_episodes": args.num_episodes,
            "seed": args.seed,
            "temperature": args.temperature,
            "rows": rows,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.json}")
    return 0
