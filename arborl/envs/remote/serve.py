"""`ReplicaSet`: N HTTP env servers for one env id, kept alive (`arborl env serve`).

Each replica speaks arborl's REST `/sessions` contract (`http_server`) or, with
`protocol="openenv"`, OpenEnv's WebSocket protocol (`openenv_server`); both answer
`/health` alike, so supervision is the same.

Start-up first reaps orphans: servers listed in the env's state file
(`ARBORL_HOME/run/<env id>.json`) by an earlier run whose owner is gone are stopped, pid
and process start time both matching so an unrelated process that reused a pid is never
touched. Then each replica is started in the env's interpreter on its own port and
polled on `/health` until it answers. A monitor thread restarts a replica that died (on
the same port, so clients' URL lists stay valid), and one whose `/health` says `stuck` (a
call past its deadline) is killed and restarted; `stop()` (and SIGINT/SIGTERM in
`serve_forever`) shuts them all down. Replicas run in their own process group, so a
Ctrl-C reaches only the orchestrator, which then stops them in order; and they exit when
the orchestrator dies, even by SIGKILL (`orphans.die_with_parent`). The replicas share one
snapshot secret, made here and passed in their environment, never given to clients.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arborl.envs.remote.http_server import SECRET_ENV_VAR, TOKEN_ENV_VAR
from arborl.envs.remote.subproc import _tail, worker_env

SERVER_MODULES = {
    "arborl": "arborl.envs.remote.http_server",
    "openenv": "arborl.envs.remote.openenv_server",
}
"""Wire protocol -> the server module each replica runs (`arborl env serve --protocol`)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, port: int, log_path: Path) -> None:
        self.port, self.log_path = port, log_path
        self.proc: subprocess.Popen | None = None
        self.num_restarts = 0


def _same_process(pid: int, create_time: float) -> Any:
    import psutil

    try:
        p = psutil.Process(pid)
        return p if abs(p.create_time() - create_time) < 1.0 else None
    except psutil.Error:
        return None


def _stop_procs(procs: list[Any], grace_s: float = 5.0) -> None:
    import psutil

    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def reap_orphans(state_file: Path) -> int:
    """Stop the servers of an earlier run recorded in `state_file`; returns how many.

    Raises if that run's owner is still alive (the env is being served already).
    """
    if not state_file.is_file():
        return 0
    try:
        state = json.loads(state_file.read_text())
    except ValueError:
        state_file.unlink()
        return 0
    owner = state.get("owner", {})
    if owner.get("pid") != os.getpid() and _same_process(
        owner.get("pid", -1), owner.get("create_time", 0)
    ):
        raise RuntimeError(
            f"{state.get('env_id')!r} is already being served by pid {owner['pid']} (ports "
            f"{[r['port'] for r in state.get('replicas', [])]}); stop it (Ctrl-C or kill "
            f"{owner['pid']}) first"
        )
    procs = [p for r in state.get("replicas", [])
             if (p := _same_process(r["pid"], r["create_time"])) is not None]  # fmt: skip
    _stop_procs(procs)
    state_file.unlink()
    return len(procs)


class ReplicaSet:
    """`num_replicas` servers of `env_id` on `host`, ports `port, port+1, ...` (0: free ones)."""

    def __init__(self, env_id: str, num_replicas: int = 1, port: int = 0,
                 host: str = "127.0.0.1", token: str | None = None, python: str | None = None,
                 spec: dict | None = None, idle_timeout_s: float = 600.0,
                 state_file: Path | None = None,
                 log_dir: Path | None = None, health_timeout_s: float = 60.0,
                 max_restarts: int = 100, max_sessions: int = 4096,
                 call_timeout_s: float = 60.0, protocol: str = "arborl",
                 env_kwargs: dict | None = None) -> None:  # fmt: skip
        if num_replicas < 1:
            raise ValueError(f"replicas={num_replicas!r} must be >= 1")
        if protocol not in SERVER_MODULES:
            raise ValueError(f"protocol={protocol!r} is not one of {list(SERVER_MODULES)}")
        if env_kwargs and protocol != "openenv":
            raise ValueError("env_kwargs are for protocol='openenv' (arborl's own protocol "
                             "takes them per session, in POST /sessions)")  # fmt: skip
        self.protocol, self.env_kwargs = protocol, dict(env_kwargs or {})
        self.env_id, self.host, self.python, self.spec = env_id, host, python, spec
        self.token = token or os.environ.get(TOKEN_ENV_VAR) or secrets.token_urlsafe(24)
        self.token_generated = not (token or os.environ.get(TOKEN_ENV_VAR))
        self.idle_timeout_s = idle_timeout_s  # replicas always exit with this supervisor
        self.state_file, self.health_timeout_s = state_file, health_timeout_s
        self.max_restarts, self.max_sessions = max_restarts, max_sessions
        self.call_timeout_s = call_timeout_s
        self._secret = secrets.token_hex(32)  # snapshot key: the replicas' own, never sent
        self._tmp = None if log_dir else tempfile.TemporaryDirectory(prefix="arborl-serve-")
        self.log_dir = Path(log_dir or self._tmp.name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ports = (
            [port + k for k in range(num_replicas)]
            if port
            else [free_port(host) for _ in range(num_replicas)]
        )
        self.replicas = [Replica(p, self.log_dir / f"replica-{p}.log") for p in ports]
        self.num_reaped = 0
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._lock = threading.Lock()

    def _url(self, r: Replica) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"http://{host}:{r.port}"

    @property
    def urls(self) -> list[str]:
        return [self._url(r) for r in self.replicas]

    def _spawn(self, r: Replica) -> None:
        cmd = [self.python or sys.executable, "-m", SERVER_MODULES[self.protocol],
               self.env_id, "--host", self.host, "--port", str(r.port),
               "--idle-timeout-s", str(self.idle_timeout_s), "--max-sessions",
               str(self.max_sessions), "--call-timeout-s", str(self.call_timeout_s),
               "--exit-with-parent"]  # fmt: skip
        if self.protocol == "openenv":
            cmd += ["--env-kwargs", json.dumps(self.env_kwargs)]
        env = worker_env(self.python, self.spec, "")
        env[TOKEN_ENV_VAR], env[SECRET_ENV_VAR] = self.token, self._secret
        with r.log_path.open("ab") as log:
            r.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      env=env, start_new_session=True)  # fmt: skip

    def _wait_healthy(self, r: Replica) -> None:
        import httpx

        url = f"{self._url(r)}/health"
        deadline = time.monotonic() + self.health_timeout_s
        while time.monotonic() < deadline:
            if r.proc.poll() is not None:
                raise RuntimeError(
                    f"env server for {self.env_id!r} on port {r.port} exited with code "
                    f"{r.proc.returncode} during start-up;{_tail(r.log_path, 15)}"
                )
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"env server on port {r.port} not healthy after "
                           f"{self.health_timeout_s:g}s;{_tail(r.log_path, 15)}")  # fmt: skip

    def _write_state(self) -> None:
        if self.state_file is None:
            return
        import psutil

        me = psutil.Process()
        state = {"env_id": self.env_id, "owner": {"pid": me.pid, "create_time": me.create_time()},
                 "replicas": [{"pid": r.proc.pid, "port": r.port,
                               "create_time": psutil.Process(r.proc.pid).create_time()}
                              for r in self.replicas if r.proc is not None]}  # fmt: skip
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def start(self) -> ReplicaSet:
        """Reap orphans, start every replica, wait for health, start the monitor."""
        if self.state_file is not None:
            self.num_reaped = reap_orphans(self.state_file)
        try:
            for r in self.replicas:
                self._spawn(r)
            for r in self.replicas:
                self._wait_healthy(r)
        except BaseException:
            self.stop()
            raise
        self._write_state()
        self._monitor = threading.Thread(target=self._watch, daemon=True, name="replica-monitor")
        self._monitor.start()
        return self

    def _stuck(self, r: Replica) -> bool:
        """True when the replica's `/health` answers 503 (a call past its deadline)."""
        import httpx

        try:
            return httpx.get(f"{self._url(r)}/health", timeout=2.0).status_code == 503
        except httpx.HTTPError:
            return False  # busy or restarting: death is caught by poll()

    def _watch(self) -> None:
        tick = 0
        while not self._stop.wait(0.2):
            tick += 1
            for r in self.replicas:
                if (
                    tick % 5 == 0
                    and r.proc is not None
                    and r.proc.poll() is None
                    and self._stuck(r)
                ):
                    print(f"arborl env serve: replica on port {r.port} is stuck past its "
                          f"{self.call_timeout_s:g}s deadline; restarting it", file=sys.stderr)  # fmt: skip
                    r.proc.kill()
                    r.proc.wait()
                with self._lock:
                    if self._stop.is_set() or r.proc is None or r.proc.poll() is None:
                        continue
                    if r.num_restarts >= self.max_restarts:
                        continue  # given up on: clients see it down
                    r.num_restarts += 1
                    self._spawn(r)
                    self._write_state()
                try:
                    self._wait_healthy(r)
                except RuntimeError as e:
                    print(f"arborl env serve: replica restart failed: {e}", file=sys.stderr)

    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.replicas if r.proc is not None]

    def stop(self) -> None:
        """Stop the monitor and every replica (SIGTERM, then SIGKILL after 5 s)."""
        import psutil

        self._stop.set()
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=5)
        with self._lock:
            procs = []
            for r in self.replicas:
                if r.proc is not None and r.proc.poll() is None:
                    try:
                        procs.append(psutil.Process(r.proc.pid))
                    except psutil.Error:
                        pass
            _stop_procs(procs)
            for r in self.replicas:
                if r.proc is not None:
                    r.proc.wait()
        if self.state_file is not None and self.state_file.is_file():
            self.state_file.unlink()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def serve_forever(self, on_ready: Callable[[], None] | None = None) -> None:
        """Block until SIGINT or SIGTERM, then stop everything. `on_ready` runs once the
        signal handlers are in place (a "ready" line printed earlier would race a signal)."""
        done = threading.Event()
        old = {s: signal.signal(s, lambda *_: done.set()) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if on_ready is not None:
                on_ready()
            while not done.wait(0.5):
                pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.stop()

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
