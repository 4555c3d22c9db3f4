"""`EnvHost`: env instances keyed by session id, driven by JSON-shaped calls.

Both worker kinds (the stdio worker and the HTTP server) wrap one `EnvHost`, so the
semantics of every call are the same whatever the transport: replies are plain JSON
values (tuples become lists, sets sorted lists, numpy scalars numbers), errors carry an
HTTP-like status, and snapshots are opaque strings, a pickle signed with HMAC-SHA256
under a secret the host was given. That secret is the server's own, never the clients'
bearer token (the HTTP server takes it from `ARBORL_SNAPSHOT_SECRET`, which `env serve`
generates per replica set, or makes up one per process): a signed snapshot is portable
between sessions and between replicas that share the secret, and `restore` refuses any
blob it did not sign, so a client can never make the server unpickle data of its choosing.

Work is bounded before it starts: numbers in env kwargs are capped (`max_kwarg_int`, so a
Maze of size 1000, or 1e300, is a 400, not an hour of CPU), a float where the env's
constructor takes an int is a 400 (not a 500 at the first reset), a busy session is never waited on by the
idle sweeper or by `delete` (it is closed once its call returns), and the start time of
every running call is kept so `/health` can report a call stuck past its deadline.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import math
import pickle
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from arborl.envs.registry import make, register, spec
from arborl.envs.remote.base import SETUP_ERRORS


class HostError(Exception):
    """A call the host refuses: `status` is the HTTP status, `kind` a short error name."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.kind, self.detail = status, kind, detail


def jsonable(x: Any) -> Any:
    """`x` as plain JSON values (tuples -> lists, sets -> sorted lists, numpy -> Python)."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return sorted((jsonable(v) for v in x), key=repr)
    if hasattr(x, "tolist"):  # numpy arrays and scalars, without importing numpy
        return jsonable(x.tolist())
    return repr(x)


@dataclass
class Session:
    env: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    was_reset: bool = False


class EnvHost:
    """Sessions of one env id. Thread-safe: a lock per session, one for the table."""

    def __init__(self, env_id: str, secret: bytes, spec: dict | None = None,
                 max_sessions: int = 4096, max_kwarg_int: int = 256) -> None:  # fmt: skip
        if spec:  # a package env: register it here, in the env's own interpreter
            register(spec["id"], spec["entry_point"], spec.get("kwargs"), spec.get("max_turns"),
                     spec.get("description", ""))  # fmt: skip
        if not secret:
            raise ValueError("EnvHost needs a non-empty snapshot secret (never a client token)")
        self.env_id, self.secret, self.max_sessions = env_id, secret, max_sessions
        self.max_kwarg_int = max_kwarg_int
        self._inflight: dict[int, float] = {}  # call number -> monotonic start time
        self._num_calls = 0
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.num_created = 0
        self.num_idle_closed = 0

    # --- sessions -------------------------------------------------------------------------
    def create(self, kwargs: dict, session_id: str | None = None) -> dict[str, Any]:
        if not isinstance(kwargs, dict):
            raise HostError(400, "bad_request", f"env kwargs must be an object, got {kwargs!r:.80}")
        self._check_kwargs(kwargs, "kwargs")
        self._check_int_kwargs(kwargs)
        with self._lock:  # re-creating a session in place does not take another slot
            if len(self.sessions) >= self.max_sessions and session_id not in self.sessions:
                raise HostError(503, "server_full", f"{self.max_sessions} sessions are open; "
                                "delete some (DELETE /sessions/{id}) or start more replicas")  # fmt: skip
        try:
            env = make(self.env_id, **kwargs)
        except (TypeError, ValueError) as e:
            raise HostError(
                400, "bad_kwargs", f"make({self.env_id!r}, **{kwargs!r:.200}): {e}"
            ) from e
        except Exception as e:  # the env's own message (e.g. its data is missing), one line
            if not isinstance(e, SETUP_ERRORS):  # a bug of the env: its traceback to the log
                traceback.print_exc(file=sys.stderr)
            raise HostError(500, "create_failed", f"{type(e).__name__}: {e}") from e
        sid = session_id or uuid.uuid4().hex
        with self._lock:
            old = self.sessions.pop(sid, None)
            self.sessions[sid] = Session(env)
            self.num_created += 1
        if old is not None:
            old.env.close()
        return {"session_id": sid, "env_id": self.env_id,
                "max_turns": int(getattr(env, "max_turns", 0) or 0)}  # fmt: skip

    def has_session(self, sid: str) -> bool:
        """Whether session `sid` is open (a re-create in place never reads as closed)."""
        with self._lock:
            return sid in self.sessions

    def touch(self, sid: str) -> None:
        """Count a message on `sid` that calls no env method (OpenEnv's `state`) as use,
        so the idle sweeper leaves the session of a client that is still talking."""
        with self._lock:
            session = self.sessions.get(sid)
        if session is not None:
            session.last_used = time.monotonic()

    def delete(self, sid: str) -> dict[str, Any]:
        with self._lock:
            session = self.sessions.pop(sid, None)
        if session is None:
            raise HostError(
                404, "no_session", f"no session {sid!r} (closed, idle-expired or never made)"
            )
        _close_when_free(session)
        return {"deleted": sid}

    def sweep_idle(self, idle_timeout_s: float) -> int:
        """Close sessions unused for `idle_timeout_s`; returns how many. A session whose
        call is still running is not idle: it is skipped, never waited on."""
        now = time.monotonic()
        with self._lock:
            stale = [s for s, v in self.sessions.items()
                     if now - v.last_used > idle_timeout_s and not v.lock.locked()]  # fmt: skip
            closed = [self.sessions.pop(s) for s in stale]
        for session in closed:
            _close_when_free(session)
        self.num_idle_closed += len(closed)
        return len(closed)

    def oldest_call_s(self) -> float:
        """Seconds the longest-running call has been running (0 when none is)."""
        with self._lock:
            starts = list(self._inflight.values())
        return time.monotonic() - min(starts) if starts else 0.0

    def _check_kwargs(self, value: Any, where: str) -> None:
        if isinstance(value, bool):
            return
        # Any number, not only ints: an env may well do range(int(size)) with a float.
        if isinstance(value, int | float) and not abs(value) <= self.max_kwarg_int:
            raise HostError(400, "kwargs_limit", f"{where}={value} is over this server's limit "
                            f"of {self.max_kwarg_int} for numbers in env kwargs (they size "
                            "work); send a smaller value or start the server with a larger "
                            "--max-kwarg-int")  # fmt: skip
        if isinstance(value, dict):
            for k, v in value.items():
                self._check_kwargs(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._check_kwargs(v, f"{where}[{i}]")

    def _check_int_kwargs(self, kwargs: dict) -> None:
        """400 for a float given where the env's constructor takes an int (its annotation
        or its default says so): JSON has one number type, and `range(256.9)` would only
        fail at the first reset, as a 500."""
        try:
            params = inspect.signature(spec(self.env_id).load()).parameters
        except (KeyError, TypeError, ValueError, ImportError, AttributeError):
            return  # make() reports an unknown or unloadable env itself
        for name, value in kwargs.items():
            p = params.get(name)
            if p is None or not isinstance(value, float):
                continue
            ann = str(getattr(p.annotation, "__name__", p.annotation))  # "int" either way
            if ann == "int" or (type(p.default) is int and "float" not in ann):
                raise HostError(400, "bad_kwargs", f"kwargs.{name}={value!r}: {self.env_id} "
                                f"takes an integer {name}; send {name}: {math.floor(value)} "
                                "or another integer")  # fmt: skip

    def close_all(self) -> None:
        with self._lock:
            sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            session.env.close()

    # --- calls ----------------------------------------------------------------------------
    def call(self, sid: str, method: str, args: dict) -> dict[str, Any]:
        fn = getattr(self, f"_do_{method}", None)
        if fn is None:
            raise HostError(404, "no_method", f"unknown call {method!r}")
        with self._lock:
            session = self.sessions.get(sid)
        if session is None:
            raise HostError(
                404, "no_session", f"no session {sid!r} (closed, idle-expired or never made)"
            )
        with session.lock:
            session.last_used = time.monotonic()
            if method != "reset" and not session.was_reset:
                raise HostError(409, "not_reset", f"session {sid!r}: call reset before {method}")
            with self._lock:
                self._num_calls += 1
                number = self._num_calls
                self._inflight[number] = time.monotonic()
            try:
                return fn(session, args)
            except HostError:
                raise
            except Exception as e:  # the env itself failed: a server-side error
                raise HostError(500, "env_error", f"{method} raised {e!r:.500}") from e
            finally:
                with self._lock:
                    del self._inflight[number]
                session.last_used = time.monotonic()

    def handle(self, sid: str, method: str, args: dict) -> list:
        """`call`/`create`/`delete` as `[status, value]` (the stdio worker's reply form)."""
        try:
            if method == "create":
                return [200, self.create(args.get("kwargs", {}), sid)]
            if method == "delete":
                return [200, self.delete(sid)]
            return [200, self.call(sid, method, args)]
        except HostError as e:
            return [e.status, f"{e.kind}: {e.detail}"]
        except Exception as e:  # never let one bad call kill the worker
            return [500, f"internal: {e!r:.500}"]

    def _do_reset(self, s: Session, args: dict) -> dict[str, Any]:
        seed, options = args.get("seed"), args.get("options")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise HostError(400, "bad_request", f"seed must be an integer >= 0 or null, got "
                            f"{seed!r:.80} (a negative seed would draw the same task as its "
                            "absolute value)")  # fmt: skip
        if options is not None and not isinstance(options, dict):
            raise HostError(
                400, "bad_request", f"options must be an object or null, got {options!r:.80}"
            )
        try:
            obs, info = s.env.reset(seed=seed, options=options)
        except (KeyError, ValueError) as e:
            if not options:
                raise
            raise HostError(400, "bad_options", f"reset(options={options!r:.200}): {e}") from e
        s.was_reset = True
        return {"observation": obs, "info": jsonable(info), **self._attrs(s.env)}

    def _do_step(self, s: Session, args: dict) -> dict[str, Any]:
        action = args.get("action")
        if not isinstance(action, str):
            raise HostError(400, "bad_request", f"action must be a string, got {action!r:.80}")
        obs, reward, terminated, truncated, info = s.env.step(action)
        return {"observation": obs, "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": jsonable(info)}  # fmt: skip

    def _do_snapshot(self, s: Session, args: dict) -> dict[str, Any]:
        blob = pickle.dumps(s.env.snapshot(), protocol=4)
        sig = hmac.new(self.secret, blob, hashlib.sha256).hexdigest()
        return {"snapshot": base64.b64encode(blob).decode() + "." + sig}

    def _do_restore(self, s: Session, args: dict) -> dict[str, Any]:
        snap = args.get("snapshot")
        if not isinstance(snap, str) or "." not in snap:
            raise HostError(400, "bad_request", "snapshot must be the string /snapshot returned")
        b64, _, sig = snap.rpartition(".")
        try:
            blob = base64.b64decode(b64, validate=True)
        except ValueError as e:
            raise HostError(400, "bad_request", f"snapshot is not base64: {e}") from e
        good = hmac.new(self.secret, blob, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(good, sig):
            raise HostError(400, "bad_snapshot", "snapshot signature does not match this server's")
        s.env.restore(pickle.loads(blob))
        return {"restored": True, **self._attrs(s.env)}

    def _do_oracle(self, s: Session, args: dict) -> dict[str, Any]:
        try:
            return {"action": s.env.oracle_action()}
        except (NotImplementedError, AttributeError) as e:
            raise HostError(501, "no_oracle", f"env {self.env_id!r} has no oracle: {e}") from e

    @staticmethod
    def _attrs(env: Any) -> dict[str, Any]:
        return {"instruction": str(getattr(env, "instruction", "")),
                "task": jsonable(getattr(env, "task", None))}  # fmt: skip


def _close_when_free(session: Session) -> None:
    """Close `session`'s env now if no call holds it, else once that call returns (in a
    daemon thread), so neither `delete` nor the sweeper ever waits on a slow env."""

    def close() -> None:
        with session.lock:
            session.env.close()

    if session.lock.acquire(blocking=False):
        try:
            session.env.close()
        finally:
            session.lock.release()
    else:
        threading.Thread(target=close, daemon=True, name="close-busy-session").start()
