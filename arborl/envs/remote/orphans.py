"""No orphans: a worker or server that arborl starts exits when its supervisor dies.

`die_with_parent()` runs in the child at start-up. On Linux it asks the kernel for a
parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGTERM)` through ctypes), which arrives
even when the supervisor is killed with SIGKILL; then it checks the parent is still the one
that started it (`ARBORL_PARENT_PID`), since the parent may have died before the prctl.
Elsewhere, and as a second line on Linux, callers also poll `os.getppid()` (the HTTP
server's `--exit-with-parent` watchdog; a stdio worker sees end of input).

Linux sends the signal when the *thread* that forked the child ends, not only the
process: arborl starts workers and replicas from long-lived threads (the caller's main
thread, or `ReplicaSet`'s monitor, which lives until `stop()`), never from short-lived ones.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PARENT_ENV_VAR = "ARBORL_PARENT_PID"
"""Set by the supervisor to its pid, so a child can tell it was orphaned before start-up."""
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have `sig` sent to this process when its parent dies; True if the kernel took it."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    expected = os.environ.get(PARENT_ENV_VAR, "")
    if expected.isdigit() and os.getppid() != int(expected):
        os.kill(os.getpid(), sig)  # the supervisor died before we could arm the signal
    return armed
