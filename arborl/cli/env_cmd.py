"""`arborl env`: list, check, play and record oracle demos of registered envs.

    arborl env list
    arborl env check arborl/Maze-v0        # or --all
    echo -e "up\\nleft" | arborl env play arborl/Maze-v0 --seed 3 --oracle
    arborl env demos arborl/Maze-v0 --split train --num-episodes 100 --out demos.jsonl
    arborl env demos arborl/Maze-v0 --epsilon 0.1 --out demos.jsonl   # with recoveries
    arborl env add path/to/package          # an env package with an arborl-env.toml
    arborl env setup me/Counter-v0          # build its isolated interpreter
    arborl env check me/Counter-v0 --mode http   # conformance through a pool
    arborl env serve me/Counter-v0 --replicas 4 --port 8100
    arborl env serve arborl/Maze-v0 --protocol openenv --env-kwargs '{"split": "test"}'
    arborl env dockerfile me/Counter-v0 --out build/counter

The logic lives in `arborl.envs`; this module only parses flags and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

from arborl.cli.names import SPLITS
from arborl.config.flags import add_flags, read_flags
from arborl.serving.config import ServerConfig

ENV_SERVE = ServerConfig(port=0)
"""`arborl env serve`'s server flags (port 0: free ports) and their defaults."""


def _cmd_list(args: argparse.Namespace) -> int:
    from arborl.envs import registered_ids, spec

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
    _list_packages()
    return 0


def _list_packages() -> None:
    """The env packages registered with `arborl env add`, and whether each is set up."""
    from arborl.envs.packages.isolate import STAMP, prefix_for, setup_hash
    from arborl.envs.packages.userdata import arborl_home, broken_packages, registered_packages

    packages, broken = registered_packages(), broken_packages()
    if not packages and not broken:
        return
    print(f"\nenv packages (registry in {arborl_home(create=False)}):")
    for m in packages:
        prefix = prefix_for(m)
        stamp = prefix / STAMP
        ready = stamp.is_file() and setup_hash(m) in stamp.read_text()
        status = "set up" if ready else f"not set up: arborl env setup {m.env_ids[0]}"
        for e in m.envs:
            desc = e.description or "-"
            print(f"{e.id}  package={m.name}  isolation={m.isolation}  [{status}]  {desc}")
    for name, err in broken.items():
        print(f"{name}  (broken: {err})")


def _cmd_check(args: argparse.Namespace) -> int:
    from arborl.envs import EnvCheckError, registered_ids

    if not args.all and not args.id:
        print("error: give an env ID or --all", file=sys.stderr)
        return 2
    ids = registered_ids() if args.all else [args.id]
    num_failed = 0
    for env_id in ids:
        try:
            _check_one(env_id, args)
            print(f"OK    {env_id}")
        except EnvCheckError as e:
            num_failed += 1
            print(f"FAIL  {e}")
        except Exception as e:  # cannot even build it: report and go on with the others
            num_failed += 1
            print(f"FAIL  {env_id}: {e.__class__.__name__}: {e}")
    print(f"{len(ids) - num_failed}/{len(ids)} envs passed")
    return 1 if num_failed else 0


def _check_one(env_id: str, args: argparse.Namespace) -> None:
    """check_env directly, or through a pool: with --mode, or for a package env (whose
    dependencies only its own interpreter has) in the package's preferred mode."""
    from arborl.envs import check_env, make_pool, registered_ids
    from arborl.envs.packages.userdata import package_of

    mode = getattr(args, "mode", None)
    if mode is None:
        m = package_of(env_id) if env_id not in registered_ids() else None
        mode = m.isolation if m is not None else None
    if mode is None or mode == "inproc" and env_id in registered_ids():
        check_env(env_id, num_seeds=args.num_seeds, seed=args.seed)
        return
    pool = make_pool(env_id, 1, mode=mode)
    try:
        check_env(pool[0], num_seeds=args.num_seeds, seed=args.seed)
    finally:
        pool.close()


def _cmd_play(args: argparse.Namespace) -> int:
    from arborl.envs import make

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
    import random

    from arborl.data.trajectory import write_trajectories
    from arborl.envs import make
    from arborl.envs.demos import oracle_demo

    if not 0.0 <= args.epsilon <= 1.0:
        print(f"error: --epsilon {args.epsilon} must be in [0, 1]", file=sys.stderr)
        return 2
    env = make(args.id)
    rng = random.Random(args.seed)  # the mistakes' draws: the same demos for the same seed
    try:
        trajectories = [
            oracle_demo(env, args.id, args.seed + i, args.split, args.epsilon, rng)
            for i in range(args.num_episodes)
        ]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        env.close()
    path = write_trajectories(args.out, trajectories)
    num_won = sum(t.won for t in trajectories)
    rate = num_won / max(1, len(trajectories))
    print(f"oracle success: {num_won}/{len(trajectories)} ({rate:.1%}); wrote {path}")
    if args.epsilon > 0:
        mistakes = sum(t.meta["turn_loss"].count(False) for t in trajectories)
        turns = sum(len(t.steps) for t in trajectories)
        print(
            f"{mistakes} of {turns} turns are random mistakes (meta.turn_loss false: kept in "
            "the history, not trained on); the rest are the oracle's, recoveries included"
        )
    return 0


def _cmd_add(args: argparse.Namespace) -> int:
    from arborl.envs.packages.manifest import manifest_summary
    from arborl.envs.packages.userdata import add_package

    try:
        m = add_package(args.path)
    except (ValueError, OSError) as e:  # ManifestError, an id clash, an unreadable folder
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"registered package {m.name!r} ({m.root}): {', '.join(m.env_ids)} {manifest_summary(m)}")
    print(f"next: arborl env setup {m.env_ids[0]}")
    return 0


def _cmd_setup(args: argparse.Namespace) -> int:
    from arborl.envs.packages.isolate import SetupError, setup_env
    from arborl.envs.packages.userdata import require_package

    try:
        interp = setup_env(require_package(args.id), force=args.force)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"python: {interp.python}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from arborl.envs import spec
    from arborl.envs.modes import package_context
    from arborl.envs.packages.userdata import arborl_home, run_state_file
    from arborl.envs.remote.serve import ReplicaSet

    ctx = package_context(args.id)
    if ctx["spec"] is None:
        spec(args.id)  # a plain registry env: an unknown id fails here, with suggestions
    try:
        env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    except ValueError as e:
        print(f"error: --env-kwargs {args.env_kwargs!r} is not JSON: {e}", file=sys.stderr)
        return 2
    if not isinstance(env_kwargs, dict) or (env_kwargs and args.protocol != "openenv"):
        print("error: --env-kwargs takes a JSON object, with --protocol openenv only (arborl's "
              "protocol takes env kwargs per session)", file=sys.stderr)  # fmt: skip
        return 2
    state = run_state_file(args.id)
    server = read_flags(ENV_SERVE, args)
    servers = ReplicaSet(args.id, args.replicas, port=server.port, host=server.host,
                         token=server.token, python=ctx["python"], spec=ctx["spec"],
                         idle_timeout_s=args.idle_timeout_s, state_file=state,
                         log_dir=arborl_home() / "logs" / state.stem,
                         max_sessions=args.max_sessions,
                         call_timeout_s=args.call_timeout_s, protocol=args.protocol,
                         env_kwargs=env_kwargs)  # fmt: skip
    servers.start()
    if servers.num_reaped:
        print(f"reaped {servers.num_reaped} orphaned server(s) of an earlier run")
    if servers.token_generated:
        print(f"generated token (send 'Authorization: Bearer <token>'): {servers.token}")
    print(
        f"serving {args.id} with {args.replicas} replica(s) ({args.protocol} protocol): "
        f"{' '.join(servers.urls)}"
    )
    if args.protocol == "openenv":
        print(
            "OpenEnv clients: base_url=<url>/<token> (their client sends no headers), or "
            "send 'Authorization: Bearer <token>' on the WebSocket handshake to <url>/ws"
        )
    servers.serve_forever(  # printed once the signal handlers are in place
        on_ready=lambda: print(
            f"logs in {servers.log_dir}; Ctrl-C or SIGTERM stops them", flush=True
        )  # fmt: skip
    )
    print("stopped")
    return 0


def _cmd_dockerfile(args: argparse.Namespace) -> int:
    from arborl.envs.packages.dockerfile import write_docker_context
    from arborl.envs.packages.userdata import require_package

    m = require_package(args.id)
    out = args.out or f"docker-{m.name}"
    path = write_docker_context(m, args.id, out)
    print(f"wrote {path}; build with: docker build -t {m.name} {out}")
    print(f"run with: docker run -e ARBORL_TOKEN=<token> -p 8000:8000 {m.name}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "env", help="list, check, play, record demos of, package and serve environments",
        description="Inspect the registered text environments; add, set up and serve env packages.",
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
    p.add_argument("--mode", choices=["inproc", "subprocess", "ray", "http"], default=None,
                   help="check through a pool in this isolation mode (default: in-process; "
                   "a package env: its preferred mode)")  # fmt: skip
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
    p.add_argument("--epsilon", type=float, default=0.0,
                   help="share of turns replaced by a random other legal action, from which the "
                   "oracle then recovers; those turns are marked not to be trained on "
                   "(meta.turn_loss), so SFT learns recoveries, never the mistakes (default 0)")  # fmt: skip
    p.set_defaults(func=_cmd_demos)
    _register_package_commands(sub)


def _register_package_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("add", help="register an env package (a folder with arborl-env.toml)",
                       description="Register an env package in the user registry "
                       "(ARBORL_HOME, default ~/.local/share/arborl). A package is trusted "
                       "code: its setup script and entry point run as you. Paths in the "
                       "manifest must stay inside the package folder.")  # fmt: skip
    p.add_argument("path", help="the package folder (or its manifest file)")
    p.set_defaults(func=_cmd_add)

    p = sub.add_parser("setup", help="build a package's isolated interpreter",
                       description="Create the env's venv or conda env, install its "
                       "dependencies, run its setup script (idempotent). The setup script "
                       "is trusted code run as the current user.")  # fmt: skip
    p.add_argument("id", help="env id (or package name) of a registered package")
    p.add_argument("--force", action="store_true", help="rebuild even if already set up")
    p.set_defaults(func=_cmd_setup)

    p = sub.add_parser("serve", help="run HTTP env servers with health checks and restarts",
                       description="Start N env servers, restart crashed or stuck ones, "
                       "stop all on Ctrl-C/SIGTERM; they also exit if this process is "
                       "killed. The env's entry point is trusted code; clients only hold "
                       "the token. With --protocol openenv the servers speak OpenEnv's "
                       "WebSocket protocol, so OpenEnv clients (TRL's, openenv-core's) can "
                       "drive any arborl env. See docs/security.md and docs/envs.md.")  # fmt: skip
    p.add_argument("id", help="env id (a package env or any registered env)")
    p.add_argument("--replicas", type=int, default=1, help="number of servers (default 1)")
    add_flags(p, ENV_SERVE, only=("host", "port", "token"))
    p.add_argument("--idle-timeout-s", type=float, default=600.0,
                   help="close sessions unused this long (default 600)")  # fmt: skip
    p.add_argument(
        "--max-sessions",
        type=int,
        default=4096,
        help="open sessions per replica at most; more get 503 (default 4096)",
    )
    p.add_argument(
        "--call-timeout-s",
        type=float,
        default=60.0,
        help="per-call deadline; a replica stuck past it is restarted (default 60)",
    )
    p.add_argument("--protocol", choices=["arborl", "openenv"], default="arborl",
                   help="wire protocol: arborl's REST /sessions contract (default), or "
                   "OpenEnv's WebSocket /ws (one env per connection)")  # fmt: skip
    p.add_argument("--env-kwargs", default=None,
                   help='with --protocol openenv: JSON env kwargs for every connection, '
                   'e.g. \'{"split": "test"}\' (default: none)')  # fmt: skip
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("dockerfile", help="write a Docker build context that serves the env",
                       description="Write Dockerfile + context reproducing the isolated "
                       "set-up and starting the HTTP server.")  # fmt: skip
    p.add_argument("id", help="env id of a registered package")
    p.add_argument("--out", default=None, help="context folder (default ./docker-<package>)")
    p.set_defaults(func=_cmd_dockerfile)
