"""The subprocess-mode worker: `python -m arborl.envs.remote.stdio_worker ENV_ID`.

Runs in the env's own interpreter and holds any number of env sessions in one `EnvHost`.
The protocol is one JSON line each way per batch, over the process's stdin/stdout:

    -> {"calls": [[session_key, method, args], ...]}
    <- {"replies": [[status, value], ...]}          (status 200 = ok, else an error text)

The first line out is `{"ready": true, "pid": ...}`. Whatever the env prints goes to
stderr (fd 1 is re-pointed at it), so it can never corrupt the protocol. End of stdin
(the parent died or closed the pipe) ends the worker: no orphans. SIGINT is ignored (a
Ctrl-C to the terminal's process group is the trainer's to handle). `ARBORL_ENV_SPEC` (JSON
`{id, entry_point, kwargs, max_turns}`) registers a package env; `ARBORL_WORKER_SECRET`
keys the snapshot signatures.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m arborl.envs.remote.stdio_worker ENV_ID", file=sys.stderr)
        return 2
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # env prints land in stderr, not in the protocol stream
    sys.stdout = sys.stderr

    from arborl.envs.remote.host import EnvHost
    from arborl.envs.remote.orphans import die_with_parent

    die_with_parent()  # a hung env must not outlive a SIGKILLed supervisor
    # Ctrl-C reaches the whole terminal process group: the trainer stops cleanly after its
    # step (arborl.train.stop), which needs its envs; the supervisor ends us (end of input).
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    spec = json.loads(os.environ["ARBORL_ENV_SPEC"]) if os.environ.get("ARBORL_ENV_SPEC") else None
    secret = os.environ.get("ARBORL_WORKER_SECRET", "").encode() or os.urandom(32)
    host = EnvHost(argv[0], secret, spec)
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        try:
            calls = json.loads(line)["calls"]
            replies = [host.handle(str(k), str(m), a if isinstance(a, dict) else {})
                       for k, m, a in calls]  # fmt: skip
        except (ValueError, KeyError, TypeError) as e:
            replies = [[400, f"bad_request: unreadable batch: {e!r:.200}"]]
        proto.write(json.dumps({"replies": replies}) + "\n")
    host.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
