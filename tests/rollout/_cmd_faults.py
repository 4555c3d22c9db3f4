"""A command agent that misbehaves in one way, by its first argument (no model call: the
runner is tested alone). Prints its result as the last stdout line, as agents do."""

import json
import subprocess
import sys

mode = sys.argv[1]
SLEEP = ["sleep", "300"]
child = None
if mode == "orphan":  # a child left in the agent's group, not holding any pipe
    child = subprocess.Popen(SLEEP, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
elif mode == "holds_stdout":  # a child that inherits stdout and stderr: no EOF until it ends
    child = subprocess.Popen(SLEEP)
elif mode == "setsid_holds_stdout":  # a child that leaves the group and keeps the pipes
    child = subprocess.Popen(SLEEP, start_new_session=True)
elif mode == "stderr_50mb":
    for _ in range(50):
        sys.stderr.buffer.write(b"e" * 1_000_000)
    sys.stderr.buffer.write(b"\nthe last stderr line\n")
elif mode == "stdout_50mb":
    for _ in range(50):
        sys.stdout.buffer.write(b"log line\n" * 111_112)
elif mode == "long_line":  # a result line of 2 MB
    sys.stdout.write(json.dumps("x" * 2_000_000) + "\n")
    sys.exit(0)
elif mode == "crash_after_50mb":
    sys.stderr.buffer.write(b"e" * 50_000_000 + b"\nboom: the tool broke\n")
    sys.exit(4)
elif mode == "bigint":
    print("1" + "0" * 400)
    sys.exit(0)
print(json.dumps({"reward": 1.0, "child": child and child.pid}), flush=True)
