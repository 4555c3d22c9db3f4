"""`python -m arborl.rollout.fn_agent package.module:function`: an `agent_program.fn` run as
a command, so that it can be killed whole (`agent_program.process=true`).

It reads the episode as a command agent does (`ARBORL_TASK`, `OPENAI_BASE_URL`,
`OPENAI_API_KEY`), calls the function once (awaiting it if it is `async`) and prints its
result as JSON on the last line of stdout; the parent runs it in its own process group and
kills the group at the deadline or when it exits (`arborl.rollout.agent_run`). The result
must be JSON: a number, a str, a dict, or None. Imports only the standard library and
`arborl.registry` before the user's module.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys

from arborl.registry import load_entry_point


async def _wait(awaitable):
    return await awaitable


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m arborl.rollout.fn_agent package.module:function")
    fn = load_entry_point(args[0], "agent_program.fn")
    task = json.loads(os.environ["ARBORL_TASK"])
    out = fn(task, os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"])
    if inspect.isawaitable(out):
        out = asyncio.run(_wait(out))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
