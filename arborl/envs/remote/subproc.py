"""The `subprocess` mode: worker processes in the env's own interpreter, over pipes.

Each `StdioWorker` is one `python -m arborl.envs.remote.stdio_worker` process (in the
package's isolated interpreter, or the host's for a plain registry env) holding one or
more env instances. A batch of calls goes out as one JSON line per worker, all workers at
once, and the replies are gathered with `select` against a deadline: a worker that misses
it is killed (its instances are lost and rebuilt before their next reset), one that died
is restarted. With the default of one env per worker a crash or hang ends one episode
only; with several, it ends the episodes of that worker's envs.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from arborl.envs.remote.base import RemotePool, Reply, pop_pool_options
from arborl.envs.remote.orphans import PARENT_ENV_VAR


def worker_env(python: str | None, spec: dict | None, secret: str) -> dict[str, str]:
    """Environment variables for a worker: the spec and secret; the host's PYTHONPATH only
    for the host's own interpreter (an isolated one has its own `.pth`)."""
    env = dict(os.environ)
    if python and Path(python) != Path(sys.executable):
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
    env["ARBORL_ENV_SPEC"] = json.dumps(spec) if spec else ""
    env["ARBORL_WORKER_SECRET"] = secret
    env[PARENT_ENV_VAR] = str(os.getpid())  # the child exits when we die (orphans.py)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _tail(path: Path, num_lines: int = 8) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-num_lines:]
    except OSError:
        return ""
    return (" last stderr lines: " + " | ".join(lines)) if lines else ""


class StdioWorker:
    """One worker process and its line protocol."""

    def __init__(self, env_id: str, python: str | None, spec: dict | None, secret: str,
                 log_path: Path, start_timeout_s: float = 60.0) -> None:  # fmt: skip
        self.log_path = log_path
        cmd = [python or sys.executable, "-m", "arborl.envs.remote.stdio_worker", env_id]
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=worker_env(python, spec, secret))  # fmt: skip
        self._buf = b""
        self.closed = False  # its stdout hit end of file or stdin broke: never reuse it
        os.set_blocking(self.proc.stdout.fileno(), False)
        ready = self.read_line(time.monotonic() + start_timeout_s)
        if ready is None or not json.loads(ready).get("ready"):
            self.kill()
            raise RuntimeError(
                f"env worker for {env_id!r} ({cmd[0]}) did not start within "
                f"{start_timeout_s:g}s (exit code {self.proc.poll()});{_tail(log_path)}"
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """Running and its pipes open. `poll()` alone can still say alive just after the
        pipe closed (the process is dying), which once made a dead worker be reused."""
        return not self.closed and self.proc.poll() is None

    def send(self, calls: list[list]) -> bool:
        try:
            self.proc.stdin.write((json.dumps({"calls": calls}) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            self.closed = True
            return False

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def read_available(self) -> bool:
        """Read what is there; False at end of file (the worker died)."""
        try:
            chunk = os.read(self.fileno(), 1 << 20)
        except BlockingIOError:
            return True
        self._buf += chunk
        if not chunk:
            self.closed = True
        return bool(chunk)

    def pop_line(self) -> str | None:
        if b"\n" not in self._buf:
            return None
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def read_line(self, deadline: float) -> str | None:
        """One line, or None at the deadline or when the worker dies."""
        while (line := self.pop_line()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fileno()], [], [], left)
            if ready and not self.read_available():
                return None
        return line

    def describe_death(self) -> str:
        return f"worker pid {self.pid} exited with code {self.proc.poll()};{_tail(self.log_path)}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not hang
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self._log.close()


def gather(batches: dict[int, tuple[StdioWorker, list[int]]], timeout_s: float) -> dict:
    """Wait for one reply line from every worker in `batches` (sent already).

    Returns {worker key: parsed replies | error text}; late workers get a timeout text.
    """
    out: dict[int, Any] = {}
    pending = dict(batches)
    deadline = time.monotonic() + timeout_s
    while pending:
        for key, (w, _) in list(pending.items()):
            line = w.pop_line()
            if line is not None:
                out[key] = _parse(line)
                del pending[key]
        if not pending:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            for key in pending:
                out[key] = f"timeout: no reply within {timeout_s:g}s"
            break
        ready, _, _ = select.select([w for w, _ in pending.values()], [], [], left)
        for w in ready:
            if not w.read_available() and w.pop_line() is None:
                key = next(k for k, (v, _) in pending.items() if v is w)
                out[key] = f"crashed: {w.describe_death() if not w.alive() else 'closed its pipe'}"
                del pending[key]
    return out


def _parse(line: str) -> Any:
    try:
        replies = json.loads(line)["replies"]
        assert isinstance(replies, list)
        return replies
    except (ValueError, KeyError, AssertionError) as e:
        return f"bad reply from worker: {line!r:.200} ({e!r})"


class SubprocessTransport:
    """Env instances spread over `num_workers` worker processes (default one per env)."""

    def __init__(self, env_id: str, num_envs: int, python: str | None = None,
                 spec: dict | None = None, num_workers: int | None = None,
                 start_timeout_s: float = 60.0, log_dir: str | Path | None = None) -> None:  # fmt: skip
        self.env_id, self.python, self.spec = env_id, python, spec
        self.num_workers = min(num_envs, num_workers or num_envs)
        if self.num_workers < 1:
            raise ValueError(f"num_workers={num_workers!r} must be >= 1")
        self.start_timeout_s = start_timeout_s
        self._tmp = None if log_dir else tempfile.TemporaryDirectory(prefix="arborl-workers-")
        self.log_dir = Path(log_dir or self._tmp.name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_hex(16)
        self.workers: list[StdioWorker | None] = [None] * self.num_workers
        self.num_restarts = 0

    def _worker_of(self, index: int) -> int:
        return index % self.num_workers

    def lane(self, index: int) -> int:
        """A worker's pipe carries one batch at a time: its envs share one lane."""
        return self._worker_of(index)

    def where(self, index: int) -> str:
        w = self.workers[self._worker_of(index)]
        return f"worker pid {w.pid}" if w else "worker not running"

    def _ensure(self, k: int) -> StdioWorker:
        w = self.workers[k]
        if w is None or not w.alive():
            if w is not None:
                w.kill()
                self.num_restarts += 1
            w = StdioWorker(self.env_id, self.python, self.spec, self.secret,
                            self.log_dir / f"worker-{k}.log", self.start_timeout_s)  # fmt: skip
            self.workers[k] = w
        return w

    def open(self, indices: list[int], kwargs: dict[str, Any]) -> list[Reply]:
        replies = []
        for k in sorted({self._worker_of(i) for i in indices}):
            try:
                self._ensure(k)
            except RuntimeError as e:
                return [Reply(False, error=str(e), lost=True) for _ in indices]
        calls = [(i, "create", {"kwargs": kwargs}) for i in indices]
        replies = self.call(calls, self.start_timeout_s)
        return replies

    def call(self, calls: list[tuple[int, str, dict]], timeout_s: float) -> list[Reply]:
        batches: dict[int, tuple[StdioWorker, list[int]]] = {}
        replies: list[Reply | None] = [None] * len(calls)
        per_worker: dict[int, list[int]] = {}
        for n, (i, _, _) in enumerate(calls):
            per_worker.setdefault(self._worker_of(i), []).append(n)
        for k, ns in per_worker.items():
            w = self.workers[k]
            if w is None or not w.alive() or not w.send([[str(calls[n][0]), calls[n][1],
                                                         calls[n][2]] for n in ns]):  # fmt: skip
                why = w.describe_death() if w else "worker not running"
                for n in ns:
                    replies[n] = Reply(False, error=f"crashed: {why}", lost=True)
                continue
            batches[k] = (w, ns)
        for k, result in gather(batches, timeout_s).items():
            w, ns = batches[k]
            if isinstance(result, str) or len(result) != len(ns):
                if result and isinstance(result, str) and result.startswith("timeout"):
                    w.kill()  # a hung env: its worker's instances are gone
                elif not isinstance(result, str):
                    result = f"bad reply: {len(result)} replies for {len(ns)} calls"
                lost = not w.alive() or result.startswith(("timeout", "crashed"))
                for n in ns:
                    replies[n] = Reply(False, error=result, lost=lost)
                continue
            for n, (status, value) in zip(ns, result):
                if status == 200:
                    replies[n] = Reply(True, value)
                else:
                    replies[n] = Reply(False, error=str(value),
                                       lost=str(value).startswith("no_session"))  # fmt: skip
        return replies  # type: ignore[return-value]

    def close(self) -> None:
        for w in self.workers:
            if w is not None:
                try:
                    w.proc.stdin.close()  # end of input: the worker exits on its own
                    w.proc.wait(timeout=3)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
                w.kill()
        self.workers = [None] * self.num_workers
        if self._tmp is not None:
            self._tmp.cleanup()


def subprocess_pool(env_id: str, num_envs: int, ctx: dict, num_workers: int | None = None,
                    **kw: Any) -> RemotePool:  # fmt: skip
    """`make_pool(..., mode="subprocess")`: `num_workers` processes (default one per env)."""
    opts = pop_pool_options(kw)
    t = SubprocessTransport(env_id, num_envs, ctx["python"], ctx["spec"], num_workers)
    return RemotePool(t, env_id, num_envs, kw, mode="subprocess", **opts)
