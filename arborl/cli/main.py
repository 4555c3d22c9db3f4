"""The `arborl` command: one entry point, one module per subcommand.

Each subcommand lives in `arborl/cli/<name>_cmd.py` and exposes
`register(subparsers)`, which adds its parser and sets `func` (called with the parsed
args, returning an exit code). `main` imports only the module of the command on the
command line: `arborl --help` lists the commands from the table below without importing
any of them, and `arborl train ...` never imports `env_cmd`. So the CLI answers at once
(the modules, and what they import, are read when a command runs), and a broken optional
dependency of one command never breaks another. `build_parser()` with no argument builds
every command's parser (the help tests and `tools/gen_cli_docs.py` walk it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from arborl import __version__

COMMANDS: list[tuple[str, str, str]] = [
    ("train", "arborl.cli.train_cmd",
     "SFT warm start + RL (any registered algorithm) with held-out evaluation"),
    ("sft", "arborl.cli.sft_cmd",
     "SFT warm start only (oracle demos or a trajectory file), saved for `arborl train`"),
    ("compare", "arborl.cli.compare_cmd",
     "run, resume or collect a grid of runs (arms x seeds) and compare them, paired"),
    ("rollout", "arborl.cli.rollout_cmd", "run a policy on an env and write trajectories"),
    ("eval", "arborl.cli.eval_cmd",
     "success rate of a policy with a 95%% CI, beside random and oracle"),
    ("serve", "arborl.cli.serve_cmd", "serve a checkpoint over an OpenAI-compatible HTTP API"),
    ("search", "arborl.cli.search_cmd",
     "solve tasks by branching search (ToT, DFSDT, MCTS, GoT, best-of-N, ...)"),
    ("rm", "arborl.cli.rm_cmd", "build data for, train, evaluate and serve reward models"),
    ("curate", "arborl.cli.curate_cmd",
     "filter, de-duplicate, mix, split and export trajectory data (SFT, preference, RL)"),
    ("env", "arborl.cli.env_cmd",
     "list, check, play, record demos of, package and serve environments"),
    ("report", "arborl.cli.report_cmd",
     "write a self-contained report.html of one run, or compare several runs"),
    ("config", "arborl.cli.config_cmd", "show the resolved training config or its field docs"),
]  # fmt: skip
"""(command, module, one-line help) in the order `arborl --help` shows them; the help is
the one the module registers (a test checks that they agree)."""


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The `arborl` parser with the real parser of `command` ("*": of every command) and,
    for the others, a stub that only lists the command and its one-line help."""
    parser = argparse.ArgumentParser(
        prog="arborl",
        description="Train language-model agents with RL and branching search.",
    )
    parser.add_argument("--version", action="version", version=f"arborl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_ in COMMANDS:
        if command in ("*", name):
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_, add_help=False)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The subcommand named on the command line: the first word that is not an option
    (`arborl` itself takes no option with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    """Run the command of `argv` (None: this process's command line, and then the process
    is ours to end: `end_process`); returns its exit status."""
    if argv is None:
        return end_process(main(sys.argv[1:]))
    from arborl.progress import quiet_foreign_bars

    argv = list(argv)
    quiet_foreign_bars()  # in a log file, other libraries' tqdm bars are carriage-return soup
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `arborl env list | head`: the reader left, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush stays quiet
        return 0
    except Exception as e:
        from arborl.envs.remote.base import EnvCreateError  # imported on this path only

        if not isinstance(e, EnvCreateError):
            raise
        # envs that cannot be created (data missing, package not set up): the env's own
        # message says how to fix it, and a traceback only buries it (any command)
        print(f"error: {e}", file=sys.stderr)
        return 2


def end_process(code: int) -> int:
    """Return `code`, or, while threads other than the main one still run, end the process
    here with it (`os._exit`, after flushing stdout, stderr and the log handlers).

    A thread left running (a timed-out plain-function agent, which Python cannot stop,
    or a generation still in flight for it) may be inside torch when the interpreter
    shuts down; CPython 3.11 then ends it with `pthread_exit`, whose unwinding through
    C++ aborts the process (`terminate called without an active exception`, SIGABRT,
    exit status 134) after the run's summary was printed. Skipping interpreter shutdown
    skips only `atexit` hooks, and the commands close what they opened before returning."""
    import logging
    import threading

    main_thread = threading.main_thread()
    if not any(t is not main_thread and t.is_alive() for t in threading.enumerate()):
        return code
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or a reader that left: nothing to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
