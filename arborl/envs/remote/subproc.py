"""The `subprocess` mode: worker processes in the env's own interpreter, over pipes.

Each `StdioWorker` is one `python -m arborl.envs.remote.stdio_worker` process (in the
package's isolated interpreter, or the host's for a plain registry env) holding one or
more env instances. A batch of calls goes out as one JSON line per worker, all workers at
once, and the replies are gathered with `select` against a deadline: a worker that misses
it is killed (its instances are lost and rebuilt before their next reset), one that died
is restarted. With one env per worker (the pool's default) a crash or hang ends one
episode only; with several, it ends the episodes of that worker's envs.

The processes belong to an `EnvWorkers` group. A pool built alone owns its group (and
stops it on `close`); a run passes one group to all its pools (`make_pool(...,
workers=group)`, see `arborl.envs.poolset`), so its training and evaluation envs live as
sessions in the same few processes, which start once per run, all at once: a worker
starts in about 1-3 s (an interpreter and the env's imports), so 128 of them started one
after another took minutes of every step that built a pool.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import sys
import tempfile
import threading
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
                 log_path: Path, start_timeout_s: float = 60.0, wait: bool = True) -> None:  # fmt: skip
        """Start the process; with `wait`, block until it says it is ready (else call
        `wait_ready`: several workers then start at the same time)."""
        self.log_path, self.env_id = log_path, env_id
        self.cmd = [python or sys.executable, "-m", "arborl.envs.remote.stdio_worker", env_id]
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=worker_env(python, spec, secret))  # fmt: skip
        self._buf = b""
        self.closed = False  # its stdout hit end of file or stdin broke: never reuse it
        os.set_blocking(self.proc.stdout.fileno(), False)
        if wait:
            self.wait_ready(time.monotonic() + start_timeout_s, start_timeout_s)

    def wait_ready(self, deadline: float, start_timeout_s: float) -> None:
        """Block until the worker's ready line; kill it and raise at `deadline`."""
        ready = self.read_line(deadline)
        if ready is None or not json.loads(ready).get("ready"):
            self.kill()
            raise RuntimeError(
                f"env worker for {self.env_id!r} ({self.cmd[0]}) did not start within "
                f"{start_timeout_s:g}s (exit code {self.proc.poll()});{_tail(self.log_path)}"
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


class EnvWorkers:
    """`num_workers` worker processes of one env id, shared by the pools built over them.

    A process starts when a pool first puts an env on it (all of a pool's missing ones at
    once) and is restarted when found dead; `close` stops them all. Pools address their
    envs by session keys of their own (`session_prefix`), so one process holds envs of
    several pools, and calls to a process from any of them take turns on its lane lock
    (`lane_locks`: a pipe carries one batch at a time).
    """

    def __init__(self, env_id: str, num_workers: int, python: str | None = None,
                 spec: dict | None = None, start_timeout_s: float = 60.0,
                 log_dir: str | Path | None = None) -> None:  # fmt: skip
        if num_workers < 1:
            raise ValueError(f"num_workers={num_workers!r} must be >= 1")
        self.env_id, self.python, self.spec = env_id, python, spec
        self.num_workers, self.start_timeout_s = num_workers, start_timeout_s
        self._tmp = None if log_dir else tempfile.TemporaryDirectory(prefix="arborl-workers-")
        self.log_dir = Path(log_dir or self._tmp.name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_hex(16)
        self.workers: list[StdioWorker | None] = [None] * num_workers
        self.num_starts = 0
        """Processes started so far, restarts included."""
        self.num_restarts = 0
        self.lane_locks: tuple[dict, threading.Lock] = ({}, threading.Lock())
        self._num_pools = 0
        self.closed = False

    def session_prefix(self) -> str:
        """A prefix no other pool over these workers uses for its session keys."""
        self._num_pools += 1
        return f"p{self._num_pools}-"

    def ensure(self, ks: list[int]) -> None:
        """Have workers `ks` running: start the missing or dead ones, all at once (each
        is started from this thread, which its parent-death signal is tied to)."""
        if self.closed:
            raise RuntimeError(f"the env workers of {self.env_id!r} were closed")
        started = []
        for k in ks:
            w = self.workers[k]
            if w is not None and w.alive():
                continue
            if w is not None:
                w.kill()
                self.num_restarts += 1
            self.workers[k] = None
            log = self.log_dir / f"worker-{k}.log"
            w = StdioWorker(self.env_id, self.python, self.spec, self.secret, log,
                            self.start_timeout_s, wait=False)  # fmt: skip
            self.num_starts += 1
            started.append((k, w))
        deadline = time.monotonic() + self.start_timeout_s
        failed = None
        for k, w in started:
            try:
                w.wait_ready(deadline, self.start_timeout_s)
                self.workers[k] = w
            except RuntimeError as e:
                failed = failed or e
        if failed is not None:
            raise failed

    def close(self) -> None:
        """Stop every worker (end of input first, so an env can close cleanly)."""
        self.closed = True
        running = [w for w in self.workers if w is not None]
        for w in running:
            try:
                w.proc.stdin.close()  # end of input: the worker exits on its own
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 3.0  # for all of them together
        for w in running:
            try:
                w.proc.wait(timeout=max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            w.kill()
        self.workers = [None] * self.num_workers
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class SubprocessTransport:
    """Env instances spread over worker processes: a shared `EnvWorkers` group, or
    `num_workers` processes of its own (default one per env)."""

    def __init__(self, env_id: str, num_envs: int, python: str | None = None,
                 spec: dict | None = None, num_workers: int | None = None,
                 start_timeout_s: float = 60.0, log_dir: str | Path | None = None,
                 workers: EnvWorkers | None = None) -> None:  # fmt: skip
        if workers is not None and workers.env_id != env_id:
            raise ValueError(
                f"the shared env workers run {workers.env_id!r}, not {env_id!r}; build one "
                "EnvWorkers group per env id"
            )
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers={num_workers!r} must be >= 1")
        self.env_id, self.start_timeout_s = env_id, start_timeout_s
        self.owns_workers = workers is None
        self.group = workers or EnvWorkers(env_id, min(num_envs, num_workers or num_envs),
                                           python, spec, start_timeout_s, log_dir)  # fmt: skip
        self.num_workers = self.group.num_workers
        self.lane_locks = self.group.lane_locks
        self.prefix = self.group.session_prefix()
        self._opened: set[int] = set()

    @property
    def workers(self) -> list[StdioWorker | None]:
        return self.group.workers

    @property
    def num_restarts(self) -> int:
        return self.group.num_restarts

    def _worker_of(self, index: int) -> int:
        return index % self.num_workers

    def lane(self, index: int) -> int:
        """A worker's pipe carries one batch at a time: its envs share one lane."""
        return self._worker_of(index)

    def where(self, index: int) -> str:
        w = self.workers[self._worker_of(index)]
        return f"worker pid {w.pid}" if w else "worker not running"

    def open(self, indices: list[int], kwargs: dict[str, Any]) -> list[Reply]:
        try:
            self.group.ensure(sorted({self._worker_of(i) for i in indices}))
        except RuntimeError as e:
            return [Reply(False, error=str(e), lost=True) for _ in indices]
        self._opened.update(indices)
        calls = [(i, "create", {"kwargs": kwargs}) for i in indices]
        return self.call(calls, self.start_timeout_s)

    def call(self, calls: list[tuple[int, str, dict]], timeout_s: float) -> list[Reply]:
        batches: dict[int, tuple[StdioWorker, list[int]]] = {}
        replies: list[Reply | None] = [None] * len(calls)
        per_worker: dict[int, list[int]] = {}
        for n, (i, _, _) in enumerate(calls):
            per_worker.setdefault(self._worker_of(i), []).append(n)
        for k, ns in per_worker.items():
            w = self.workers[k]
            batch = [[f"{self.prefix}{calls[n][0]}", calls[n][1], calls[n][2]] for n in ns]
            if w is None or not w.alive() or not w.send(batch):
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
        """Stop the workers if this pool owns them; else delete its sessions from the
        shared ones (best effort: the group's own `close` ends them anyway)."""
        if self.owns_workers:
            self.group.close()
            return
        locks, table_lock = self.lane_locks
        by_worker: dict[int, list[int]] = {}
        for i in sorted(self._opened):
            by_worker.setdefault(self._worker_of(i), []).append(i)
        self._opened.clear()
        for k, indices in by_worker.items():
            w = self.workers[k]
            with table_lock:
                lock = locks.setdefault(k, threading.Lock())
            # a worker busy past 5 s (a hung call of another pool) keeps the sessions
            if w is None or not w.alive() or not lock.acquire(timeout=5.0):
                continue
            try:
                self.call([(i, "delete", {}) for i in indices], 5.0)
            finally:
                lock.release()


def subprocess_workers(env_id: str, ctx: dict, num_workers: int) -> EnvWorkers:
    """The worker group a run shares between its `subprocess` pools of `env_id` (`ctx`:
    `arborl.envs.modes.package_context`); processes start as pools use them."""
    return EnvWorkers(env_id, num_workers, ctx["python"], ctx["spec"])


def subprocess_pool(env_id: str, num_envs: int, ctx: dict, num_workers: int | None = None,
                    workers: EnvWorkers | None = None, **kw: Any) -> RemotePool:  # fmt: skip
    """`make_pool(..., mode="subprocess")`: the envs as sessions in the shared `workers`,
    or in `num_workers` processes of the pool's own (default one per env)."""
    if workers is not None and num_workers is not None:
        raise ValueError("pass num_workers or a shared workers group, not both")
    opts = pop_pool_options(kw)
    t = SubprocessTransport(env_id, num_envs, ctx["python"], ctx["spec"], num_workers,
                            workers=workers)  # fmt: skip
    return RemotePool(t, env_id, num_envs, kw, mode="subprocess", **opts)
