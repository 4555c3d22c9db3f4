"""`arborl search`: solve tasks by branching search and write the result and tree.

    arborl search --env arborl/Game24-v0 --algo mcts --budget 200 --proposer actions \\
        --task '{"numbers": [4, 7, 8, 8], "target": 24}' --out runs/search/g24.json
    arborl search --policy runs/demo/checkpoints/final --env arborl/Maze-v0 \\
        --algo tot-bfs --budget 64 --param breadth=3 --param beam=2 --out maze.json

`--budget` is the number of env steps (tree nodes, plus rollout steps) a search may take;
`--max-model-calls`, `--max-tokens`, `--max-wall-s` and `--max-depth` add limits. The JSON
holds `won`, the best trajectory's actions, stats, the stop reason and the whole tree; an
HTML view of the tree is written next to it (open it in any browser, no network needed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from arborl.cli.names import SPLITS
from arborl.search.registry import (
    ALGORITHMS,
    ARG_EVALUATORS,
    EVALUATORS,
    PROPOSERS,
    is_evaluator_name,
)

PLAIN_EVALUATORS = [name for name in EVALUATORS if name not in ARG_EVALUATORS]


def _evaluator_name(text: str) -> str:
    if is_evaluator_name(text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not one of {PLAIN_EVALUATORS} or rm:PATH_OR_URL (a reward model)"
    )


def add_search_args(p: argparse.ArgumentParser, required: bool) -> None:
    """The search flags shared with `arborl eval --search`."""
    p.add_argument(
        "--algo" if required else "--search",
        dest="algo",
        required=required,
        default=None,
        choices=sorted(ALGORITHMS),
        help="search algorithm" + ("" if required else " (evaluate the policy under search)"),
    )
    p.add_argument(
        "--budget", type=int, default=64, help="env steps (tree nodes + rollout steps) per task"
    )
    p.add_argument(
        "--proposer",
        default="policy",
        choices=PROPOSERS.names(),
        help="where actions come from: the policy (samples k distinct actions), the env's "
        "available_actions, or those scored by the policy as agent.action_mode=score does "
        "(ranked: its categorical gives the priors)",
    )
    p.add_argument(
        "--evaluator",
        default=None,
        type=_evaluator_name,
        help=f"node scores: one of {', '.join(PLAIN_EVALUATORS)}, or rm:PATH_OR_URL for a reward model "
        "(default: the env's heuristic if it has one, else none)",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm parameter (YAML value), e.g. --param width=4; repeatable",
    )
    p.add_argument("--max-depth", type=int, default=None, help="deepest node (actions from root)")
    p.add_argument("--max-model-calls", type=int, default=None, help="proposer/evaluator LM calls")
    p.add_argument("--max-tokens", type=int, default=None, help="generated tokens per task")
    p.add_argument("--max-wall-s", type=float, default=None, help="wall-clock seconds per task")
    p.add_argument("--gamma", type=float, default=1.0, help="discount (< 1 prefers short wins)")
    p.add_argument(
        "--no-stop-on-win", action="store_true", help="keep searching after the env reports a win"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="solve tasks by branching search (ToT, DFSDT, MCTS, GoT, best-of-N, ...)",
        description="Search over an env's decisions and write the result and the tree.",
    )
    p.add_argument(
        "--policy",
        default=None,
        help="a tiny preset name, a checkpoint directory or an OpenAI-compatible URL "
        "(not needed with --proposer actions and a non-judge evaluator)",
    )
    p.add_argument("--env", required=True, help="registered env id, e.g. arborl/Game24-v0")
    add_search_args(p, required=True)
    p.add_argument("--task", default=None, help="one explicit task as JSON (else drawn by seed)")
    p.add_argument("--seed", type=int, default=0, help="task draw and search seed")
    p.add_argument("--num-tasks", type=int, default=1, help="tasks to search (seeds seed..)")
    p.add_argument("--split", default="test", choices=SPLITS, help="task split to draw from")
    p.add_argument("--out", default=None, help="write the result + tree JSON here (and .html)")
    p.add_argument("--no-html", action="store_true", help="do not write the HTML tree view")
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="policy sampling temperature (--proposer ranked: of its scored categorical)",
    )
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens per proposed action")
    p.add_argument("--distinct", action="store_true",
                   help="policy proposer: draw a node's candidates one at a time, each barred "
                   "from an earlier one's first token (k different actions for k samples' "
                   "tokens; in-process HF policies only)")  # fmt: skip
    p.add_argument("--tokenizer", default=None, help="tokenizer (preset or dir) for a URL policy")
    p.set_defaults(func=run)


def parse_params(items: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--param {item!r}: write KEY=VALUE, e.g. --param width=4")
        out[key] = yaml.safe_load(value)
    return out


def evaluator_name(args: argparse.Namespace, env_id: str) -> str:
    """--evaluator, else the env's heuristic if it has one, else none."""
    from arborl.search.evaluators import HEURISTICS

    return args.evaluator or ("heuristic" if env_id in HEURISTICS else "none")


def build_parts(args: argparse.Namespace, env_id: str) -> tuple[Any, Any, Any]:
    """(proposer, evaluator, budget) from the shared flags."""
    from arborl.agent import AgentConfig
    from arborl.agent.settings import load_agent_settings
    from arborl.search import Budget
    from arborl.search.builders import make_evaluator, make_proposer

    backend = tok = None
    if args.policy is not None and args.policy not in ("random", "oracle"):
        from arborl.generation import make_backend

        backend, tok = make_backend(args.policy, tokenizer=args.tokenizer, seed=args.seed)
    if hasattr(args, "score_norm"):  # `arborl eval --search`: its agent flags apply too
        from arborl.cli.rollout_cmd import configs_from_args

        _, agent = configs_from_args(args, group_size=1)
    else:  # `arborl search`: the agent the checkpoint was trained with
        agent = AgentConfig(**load_agent_settings(args.policy or ""))
    if args.proposer in ("policy", "ranked"):
        proposer = make_proposer(
            args.proposer,
            backend,
            tok,
            agent_cfg=agent,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            distinct=getattr(args, "distinct", False),
        )
    else:
        proposer = make_proposer("actions")
    evaluator = make_evaluator(evaluator_name(args, env_id), env_id, backend, tok)
    budget = Budget(
        max_nodes=args.budget,
        max_model_calls=args.max_model_calls,
        max_tokens=args.max_tokens,
        max_wall_s=args.max_wall_s,
        max_depth=args.max_depth,
    )
    return proposer, evaluator, budget


def run(args: argparse.Namespace) -> int:
    from arborl.search.builders import make_problem, search_tasks
    from arborl.search.html import write_html

    task = None
    if args.task is not None:
        try:
            task = json.loads(args.task)
        except json.JSONDecodeError as e:
            raise SystemExit(f"--task {args.task!r} is not valid JSON: {e}") from e
    try:
        proposer, evaluator, budget = build_parts(args, args.env)
        params = parse_params(args.param)
        problems = [
            make_problem(
                args.env,
                proposer,
                evaluator,
                seed=args.seed + i,
                task=task,
                split=args.split,
                gamma=args.gamma,
                stop_on_win=not args.no_stop_on_win,
            )
            for i in range(1 if task is not None else args.num_tasks)
        ]
        results, summary = search_tasks(args.algo, params, problems, budget, seed=args.seed)
    except (ValueError, TypeError, KeyError) as e:
        raise SystemExit(f"arborl search: {e}") from e
    for i, r in enumerate(results):
        print(
            f"task {i}: won={r.won} actions={r.actions} stop={r.stop_reason} "
            f"nodes={r.stats['nodes']} model_calls={r.stats['model_calls']} "
            f"tokens={r.stats['tokens']}"
        )
    print(f"success {summary['success']:.3f} over {len(results)} task(s)")
    if args.out:
        docs = [
            {"env": args.env, "task_seed": args.seed + i, "params": params, **r.to_dict()}
            for i, r in enumerate(results)
        ]
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = docs[0] if len(docs) == 1 else {"summary": summary, "results": docs}
        out.write_text(json.dumps(payload, indent=1, default=str))
        print(f"wrote {out}")
        if not args.no_html:
            for i, d in enumerate(docs):
                name = out.with_suffix(".html" if len(docs) == 1 else f".{i}.html")
                write_html(d, name, title=f"{args.algo} on {args.env} (task {i})")
                print(f"wrote {name}")
    return 0


def evaluate_with_search(args: argparse.Namespace) -> dict[str, Any]:
    """`arborl eval --search A`: the policy's row, each task solved by search `A` on the
    same task seeds and envs (--env-kwargs, --max-turns, --pool-mode) the other rows use."""
    from arborl.cli.rollout_cmd import pool_args
    from arborl.rollout import draw_seeds
    from arborl.search.builders import evaluate_search

    flags = pool_args(args)
    try:
        proposer, evaluator, budget = build_parts(args, args.env)
        summary = evaluate_search(
            args.env,
            draw_seeds(args.num_episodes, args.seed),
            args.algo,
            parse_params(args.param),
            budget,
            proposer=proposer,
            evaluator=evaluator,
            split=args.split,
            pool_mode=flags["pool_mode"],
            pool_options=flags["pool_options"],
            env_kwargs=flags["env_kwargs"],
            max_turns=args.max_turns,
            gamma=args.gamma,
            stop_on_win=not args.no_stop_on_win,
            seed=args.seed,
        )
    except (ValueError, TypeError, KeyError) as e:
        raise SystemExit(f"arborl eval --search: {e}") from e
    if summary["policy_called"]:
        return {"policy": f"{args.policy or args.proposer}+{args.algo}@{args.budget}", **summary}
    evaluator = evaluator_name(args, args.env)
    name = f"{args.algo}@{args.budget} ({args.proposer}+{evaluator}, policy not called)"
    note = (
        f"{args.policy!r} was never called in row {name!r} (0 model calls): proposer "
        f"{args.proposer!r} and evaluator {evaluator!r} pick and score actions without it, "
        "so the row measures search over the env's actions; --proposer policy or ranked "
        "(or --evaluator judge) searches with the policy"
    )
    return {"policy": name, "note": note, **summary}
