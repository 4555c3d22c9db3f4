"""Running one episode's agent program under a deadline the parent enforces.

Where each kind of program runs, and what its deadline guarantees (docs/agents.md):

- a plain function: in a daemon thread. At `timeout_s` the episode stops waiting for it
  and ends as a timeout; Python cannot stop a thread, so the function runs on until it
  returns (its session is closed: its later calls fail).
- an `async` function (or a plain one that returns an awaitable): in a daemon thread with
  its own event loop. At `timeout_s` the episode stops waiting, ends as a timeout and
  cancels the task from outside (`loop.call_soon_threadsafe(task.cancel)`); a coroutine
  that blocks the loop (`time.sleep`, a sync HTTP client) or swallows the cancel runs on
  in its thread, as a plain function does, but never holds up the episode or the run.
- a command (`agent_program.command`, or `fn` with `agent_program.process=true`, run as
  `python -m arborl.rollout.fn_agent`): in its own process group. When the main process
  exits, or at `timeout_s`, the whole group is SIGKILLed, so no child outlives its
  episode (one that leaves the group with `setsid` escapes: that is the program's doing).
  Its output is read as it comes and only a bounded tail is kept (`STDOUT_TAIL`,
  `STDERR_TAIL`), so a chatty program costs the trainer no more than that.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import json
import os
import selectors
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

STDOUT_TAIL = 1 << 20
"""Bytes of a command's stdout kept (the last ones): its result line must fit in them."""
STDERR_TAIL = 64 << 10
"""Bytes of a command's stderr kept (the last ones), for the reason of a failed episode."""


class AgentFailed(Exception):
    """An episode's program failed. `reason`: crashed, timeout or no_reward."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def crash(e: BaseException) -> AgentFailed:
    """The `crashed` failure for an exception the program raised, naming where."""
    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return AgentFailed("crashed", f"the agent raised {type(e).__name__}: {e}{at}")


def _timeout(timeout_s: float) -> AgentFailed:
    return AgentFailed("timeout", f"the agent ran past timeout_s={timeout_s:g}")


def run_fn(fn: Callable[..., Any], args: tuple, timeout_s: float) -> Any:
    """`fn(*args)` (plain or `async`) in a daemon thread the caller stops waiting for at
    `timeout_s`; a coroutine runs on the thread's own loop and is cancelled from here at
    the deadline, whether or not it then ends. Raises `AgentFailed` on error or timeout."""
    box: dict[str, Any] = {}
    done = threading.Event()

    async def main(awaitable) -> Any:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        if done.is_set():  # the deadline passed before the loop started
            raise asyncio.CancelledError
        return await awaitable

    def target() -> None:
        try:
            out = fn(*args)
            box["value"] = asyncio.run(main(out)) if inspect.isawaitable(out) else out
        except BaseException as e:  # noqa: BLE001 - reported to the episode, not raised here
            box["error"] = e
        finally:
            box["finished"] = True
            done.set()

    thread = threading.Thread(target=target, daemon=True, name="agent")
    thread.start()
    if not done.wait(timeout_s) or "finished" not in box:
        done.set()
        loop, task = box.get("loop"), box.get("task")
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)
        raise _timeout(timeout_s)
    if "error" in box:
        raise crash(box["error"])
    return box.get("value")


class _Tail:
    """The last `cap` bytes (or a little more: whole chunks) of a stream, and how many
    bytes came before them."""

    def __init__(self, cap: int) -> None:
        self.cap, self.chunks, self.size, self.dropped = cap, collections.deque(), 0, 0

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        while self.size - len(self.chunks[0]) >= self.cap:
            first = self.chunks.popleft()
            self.size -= len(first)
            self.dropped += len(first)

    def last_line(self) -> tuple[str, bool]:
        """The last non-empty line kept, and whether it may have begun before the kept
        bytes (cut). Only that line is decoded: no copy of the whole tail."""
        data = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        first = max(0, len(data) - self.cap)
        end = len(data)
        while end > first and data[end - 1 : end].isspace():
            end -= 1
        start = max(data.rfind(b"\n", first, end), data.rfind(b"\r", first, end)) + 1
        cut = start == 0 and (first > 0 or self.dropped > 0) and end > first
        line = data[max(start, first) : end].decode("utf-8", errors="replace")
        return line.strip(), cut


def _exited(pid: int) -> bool:
    """Has `pid` exited? Leaves it unreaped, so its pid (and group id) stay taken."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _read(fd: int, tail: _Tail, chunks: int = 1) -> bool:
    """Read up to `chunks` x 64 KiB of what `fd` has now into `tail`; False at EOF."""
    for _ in range(chunks):
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        tail.add(chunk)
    return True


def _pump(proc: subprocess.Popen, tails: dict[int, _Tail], deadline: float) -> bool:
    """Read the pipes until the main process exits or `deadline`; True if it exited.
    Exit, not EOF, ends the episode: a child may hold the pipes open long after."""
    sel = selectors.DefaultSelector()
    for fd in tails:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    try:
        while not _exited(proc.pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not sel.get_map():  # both pipes closed; the process runs on
                time.sleep(min(left, 0.05))
                continue
            for key, _ in sel.select(min(left, 0.05)):  # wake to check for exit
                if not _read(key.fd, tails[key.fd]):
                    sel.unregister(key.fd)
        return True
    finally:
        sel.close()


def run_command(command: list[str], env: dict[str, str], timeout_s: float) -> Any:
    """`command` in its own process group; when its main process exits (or at
    `timeout_s`) the group is killed and the last non-empty line of stdout is its
    result, as JSON (None without one). Raises `AgentFailed`."""
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        raise AgentFailed("crashed", f"could not start {command[0]!r}: {e}") from e
    out, err = _Tail(STDOUT_TAIL), _Tail(STDERR_TAIL)
    tails = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    try:
        exited = _pump(proc, tails, time.monotonic() + timeout_s)
    finally:  # the whole group, whatever happened: no child outlives its episode
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for fd, tail in tails.items():  # what was written before the kill, not waiting
            with contextlib.suppress(OSError):
                _read(fd, tail, chunks=2 * STDOUT_TAIL // 65536)
        proc.stdout.close()
        proc.stderr.close()
        proc.wait()
    if not exited:
        raise _timeout(timeout_s)
    return _result(proc.returncode, out, err)


def _result(returncode: int, out: _Tail, err: _Tail) -> Any:
    if returncode != 0:
        why = err.last_line()[0]
        raise AgentFailed("crashed", f"the agent exited with {returncode}: {why[:300]}")
    last, cut = out.last_line()
    if not last:
        return None
    if cut:  # the line began before the kept tail
        raise AgentFailed(
            "no_reward",
            f"the agent's last stdout line is over "
            f"{STDOUT_TAIL} bytes (arborl keeps the last {STDOUT_TAIL}); "
            "print a short JSON result as the last line",
        )
    try:
        return json.loads(last)
    except ValueError:  # not JSON, or an int too long to parse
        raise AgentFailed(
            "no_reward", f"the agent's last stdout line is not JSON: {last[:200]!r}"
        ) from None
