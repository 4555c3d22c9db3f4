"""`arborl env`: list, check, play and record oracle demos of registered envs.

    arborl env list
    arborl env check arborl/Maze-v0        # or --all
    echo -e "up\\nleft" | arborl env play arborl/Maze-v0 --seed 3 --oracle
    arborl env demos arborl/Maze-v0 --split train --num-episodes 100 --out demos.jsonl

The logic lives in `arborl.envs`; this module only parses flags and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from arborl.envs import EnvCheckError, check_env, make, registered_ids, spec
from arborl.envs.base import SPLITS


def _json_safe(info: dict[str, Any]) -> dict[str, Any]:
    """Info as JSON values (anchors are tuples: they become lists)."""
    return json.loads(json.dumps(info, default=repr))


def _cmd_list(args: argparse.Namespace) -> int:
    rows = [("id", "max_turns", "action format", "splits", "description")]
    for env_id in registered_ids():
        s = spec(env_id)
        try:
            cls = s.load()
            fmt = getattr(cls, "action_format", "") or "?"
            turns = s.max_turns or getattr(cls, "default_max_turns", "?")
            desc = s.description or getattr(cls, "description", "")
        except Exception as e:  # an env whose module cannot import is still listed
            fmt, turns, desc = "?", "?", f"(cannot load: {e.__class__.__name__}: {e})"
        rows.append((env_id, str(turns), fmt, "train/val/test 80/10/10", desc))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    if not args.all and not args.id:
        print("error: give an env ID or --all", file=sys.stderr)
        return 2
    ids = registered_ids() if args.all else [args.id]
    num_failed = 0
    for env_id in ids:
        try:
            check_env(env_id, num_seeds=args.num_seeds, seed=args.seed)
            print(f"OK    {env_id}")
        except EnvCheckError as e:
            num_failed += 1
            print(f"FAIL  {e}")
        except Exception as e:  # cannot even build it: report and go on with the others
            num_failed += 1
            print(f"FAIL  {env_id}: {e.__class__.__name__}: {e}")
    print(f"{len(ids) - num_failed}/{len(ids)} envs passed")
    return 1 if num_failed else 0


def _cmd_play(args: argparse.Namespace) -> int:
    env = make(args.id)
    obs, info = env.reset(seed=args.seed, options={"split": args.split})
    print(env.instruction)
    print(f"[task {info['task_id']}]")
    print(obs)
    total, stdin = 0.0, sys.stdin
    while True:
        if args.oracle:
            print(f"(oracle: {env.oracle_action()})")
        interactive = stdin.isatty()
        if interactive:
            print("> ", end="", flush=True)
        line = stdin.readline()
        if not line:
            print("(end of input)")
            break
        action = line.rstrip("\n")
        if not interactive:  # echo piped actions so the transcript reads like a session
            print(f"> {action}")
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        flag = "" if info["valid_action"] else "  (invalid action)"
        print(f"{obs}\nreward={reward:g}{flag}")
        if terminated or truncated:
            print(f"episode over: won={info['won']} return={total:g} turns={env.turn}")
            break
    env.close()
    return 0


def _cmd_demos(args: argparse.Namespace) -> int:
    from arborl.data.trajectory import Step, Trajectory, write_trajectories

    env = make(args.id)
    trajectories = []
    for i in range(args.num_episodes):
        seed = args.seed + i
        obs, info = env.reset(seed=seed, options={"split": args.split})
        traj = Trajectory(task_id=info["task_id"], env_id=args.id, seed=seed,
                          instruction=env.instruction,
                          meta={"policy": "oracle", "split": args.split})  # fmt: skip
        done = False
        while not done:
            action = env.oracle_action()
            next_obs, reward, terminated, truncated, info = env.step(action)
            traj.steps.append(
                Step(obs, action, float(reward), terminated, truncated, _json_safe(info))
            )
            obs, done = next_obs, terminated or truncated
        traj.won = bool(info["won"])
        trajectories.append(traj)
    env.close()
    path = write_trajectories(args.out, trajectories)
    num_won = sum(t.won for t in trajectories)
    rate = num_won / max(1, len(trajectories))
    print(f"oracle success: {num_won}/{len(trajectories)} ({rate:.1%}); wrote {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "env", help="list, check, play and record demos of environments",
        description="Inspect the registered text environments.",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="env_command", metavar="ENV_COMMAND")
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])

    p = sub.add_parser("list", help="list registered envs", description="List registered envs.")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("check", help="run the conformance checker",
                       description="Run check_env on one env or on all of them.")  # fmt: skip
    p.add_argument("id", nargs="?", help="env id, e.g. arborl/Maze-v0")
    p.add_argument("--all", action="store_true", help="check every registered env")
    p.add_argument("--num-seeds", type=int, default=3, help="seeds to check per env (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("play", help="play an env from stdin, one action per line",
                       description="Play interactively; stdin may be piped.")  # fmt: skip
    p.add_argument("id", help="env id, e.g. arborl/Maze-v0")
    p.add_argument("--seed", type=int, default=0, help="reset seed (default 0)")
    p.add_argument("--split", choices=SPLITS, default="test", help="task split (default test)")
    p.add_argument("--oracle", action="store_true", help="show the oracle's suggested action")
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser("demos", help="write oracle trajectories to a file",
                       description="Roll out the oracle and write Trajectory records.")  # fmt: skip
    p.add_argument("id", help="env id, e.g. arborl/Maze-v0")
    p.add_argument("--split", choices=SPLITS, default="train", help="task split (default train)")
    p.add_argument("--num-episodes", type=int, default=100, help="episodes to record (default 100)")
    p.add_argument("--out", required=True, help="output file, .jsonl or .parquet")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode; +1 per episode")
    p.set_defaults(func=_cmd_demos)
