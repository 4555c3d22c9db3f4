"""The training gateway: an OpenAI-compatible endpoint that serves the current policy and
records every call of every episode token-exactly, so agents written for the OpenAI API
train unmodified (the design of rLLM's gateway, Agent Lightning's proxy, AReaL's proxy).

    with Gateway(backend, tokenizer) as gw:                 # 127.0.0.1, a free port
        s = gw.open_session(meta={"task": "..."}, timeout_s=120)
        agent(base_url=s.base_url, api_key=s.key)           # any OpenAI client or library
        calls = gw.close_session(s.id)                      # the episode's records

It is `arborl serve`'s app (`arborl.generation.server`: chat with tools, completions,
models, streaming) with a `CallRecorder`, this class, plugged in. What it adds:

* **Sessions = episodes.** A call names its session in the URL path (`/s/<id>/v1/...`, the
  `base_url` a session hands out), else the `X-Arborl-Session` header, else
  `metadata.session_id`, else the `user` field. Each session has its own bearer key; a call
  made with it can only land in that session, so one episode's record never holds another's
  calls. A session closes when its owner closes it, `timeout_s` after it opened, or
  `idle_timeout_s` after its last call; a call to a closed session gets 410 and is not
  recorded. Standalone (`auto_sessions`, `arborl serve --record DIR`) a call naming an
  unknown session opens it and a call naming none gets a session of its own (its id comes
  back in the `X-Arborl-Session` response header, percent-encoded where it is not visible
  ASCII); records go to `DIR/<name>.jsonl` (`record_name`: the id itself when it is plain
  `[a-z0-9_-]`, else a prefix and its digest). An id is checked before its call is
  admitted (`check_session_id`: 1 to 128 bytes of UTF-8, no control characters), so a
  refused id is never recorded. When `max_sessions` are open, a new one evicts the least
  recently used idle one rather than locking every new client out.
* **Token-exact records.** Per call a `CallRecord` (`arborl.generation.calls`): the prompt
  ids the chat template produced, each choice's sampled ids, their logprobs, finish reason,
  text, parsed tool calls (or why the attempt did not parse), the sampling parameters used
  and the weight version (see `WeightVersion`). The request's messages and tools are kept
  beside them.
* **Sampling the trainer controls.** With `sampling` (training), temperature, top-p and
  top-k are the rollout's whatever the agent asks (so the recorded logprobs are the ones the
  update recomputes), max tokens is capped, and each call draws from a stream keyed by the
  session's seed and the call's index (the same agent on the same task samples the same).
* **Bounded** (`GatewayLimits`, docs/security.md): loopback bind by default, open sessions,
  calls per session, requests in flight, session lifetime and idleness; plus everything
  `arborl serve` bounds (body size, JSON depth, tokens, rows, time on the model).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborl.generation.base import GenerationBackend, SamplingParams, row_seed
from arborl.generation.calls import CallRecord, append_call
from arborl.generation.server import MAX_ROWS, APIError, check_session_id, create_app
from arborl.serving import DEFAULT_LIMITS, Limits, bearer_ok, check_bind
from arborl.serving.config import GatewayLimits

SESSION_PREFIX = "/s/"
"""URL prefix of a session's routes: `/s/<id>/v1/chat/completions`."""


@dataclass
class SamplingOverride:
    """The sampling a trainer imposes on every call (the agent's own values are ignored)."""

    temperature: float = 1.0
    """Softmax temperature of every call (the rollout's: what the update scores at)."""
    top_p: float = 1.0
    """Nucleus mass of every call."""
    top_k: int = 0
    """Top-k of every call (0 disables)."""
    max_new_tokens: int | None = None
    """Cap on the tokens of one call (None: the request's own limit)."""


@dataclass
class Session:
    """One episode's calls."""

    id: str
    key: str | None
    """The session's bearer key (None: only the gateway's master key works)."""
    meta: dict[str, Any]
    """What the opener attached (task, episode index); written into the records."""
    opened: float
    deadline: float
    idle_timeout_s: float
    seed: int | None = None
    """Call i's row j samples with `row_seed(seed, i * 1000 + j)` (None: unseeded)."""
    last_used: float = 0.0
    num_calls: int = 0
    num_in_flight: int = 0
    """Its calls admitted and not yet ended (a session with some is never evicted)."""
    calls: list[CallRecord] = field(default_factory=list)
    closed: str = ""
    """Why it closed ('' while open): closed, timeout, idle, evicted."""
    sampling: SamplingOverride | None = None
    """The sampling its calls get (None: the gateway's `sampling`); a run's one gateway
    serves training at the rollout's temperature and evaluation at the eval's."""


@dataclass
class SessionHandle:
    """What an agent needs to reach its session."""

    id: str
    key: str
    base_url: str
    """`http://127.0.0.1:PORT/s/<id>/v1`: point the OpenAI client here."""


class WeightVersion:
    """A counter that moves when the policy's weights change: `backend.weights_version`
    where the backend keeps one (vLLM), else one more each time the in-process model's
    parameters were written in place or replaced since the last look (optimizer steps, a
    `load_state_dict`: `arborl.generation.lean.weights_key`). The count belongs to the
    model, not to one gateway: every gateway over the same model (a run's own, or one a
    caller starts per rollout) continues it, so versions grow over a run."""

    _counts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    """model -> [version, weights key at the last look]."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def __call__(self) -> int:
        if hasattr(self.backend, "weights_version"):
            return int(self.backend.weights_version)
        model = getattr(self.backend, "model", None)
        if model is None:
            return 0
        from arborl.generation.lean import weights_key

        key = weights_key(model)
        with _VERSION_LOCK:
            seen = self._counts.setdefault(model, [0, key])
            if key != seen[1]:
                seen[0], seen[1] = seen[0] + 1, key
            return seen[0]


_VERSION_LOCK = threading.Lock()


class SessionPath:
    """ASGI wrapper: `/s/<id>/rest` is served as `/rest` with `scope["arborl_session"]=id`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(SESSION_PREFIX):
            sid, _, rest = path[len(SESSION_PREFIX) :].partition("/")
            scope = {**scope, "path": "/" + rest, "raw_path": ("/" + rest).encode()}
            scope["arborl_session"] = sid
        await self.app(scope, receive, send)


class Gateway:
    """Serves `backend` over the OpenAI API and records each session's calls (see the module
    docstring). `api_key`: the master key (None: a random one, `self.api_key`; with
    `open_access` and no key, loopback standalone use, no call needs a key)."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: Any,
        model_name: str = "policy",
        api_key: str | None = None,
        sampling: SamplingOverride | None = None,
        limits: GatewayLimits = GatewayLimits(),  # noqa: B008 (frozen: one shared value is safe)
        request_limits: Limits = DEFAULT_LIMITS,
        auto_sessions: bool = False,
        record_dir: str | Path | None = None,
        tool_parser: str = "hermes",
        max_request_s: float | None = 300.0,
        max_tokens_limit: int | None = None,
        max_rows: int = MAX_ROWS,
        version: Any = None,
        open_access: bool = False,
    ) -> None:
        self.backend = backend
        """What it serves (a run's gateway serves the engine's live model: each call sees
        the weights of the moment)."""
        self.api_key = api_key or secrets.token_urlsafe(24)
        self.open_access = open_access and not api_key
        self.sampling, self.limits, self.auto_sessions = sampling, limits, auto_sessions
        self.record_dir = Path(record_dir) if record_dir is not None else None
        self.version = version or WeightVersion(backend)
        self._sessions: dict[str, Session] = {}
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pending = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""
        app = create_app(
            backend, tokenizer, model_name, max_request_s=max_request_s, limits=request_limits,
            tool_parser=tool_parser, recorder=self, guard={"authorize": self.authorize},
            max_tokens_limit=max_tokens_limit, max_rows=max_rows,
        )  # fmt: skip
        self.app = SessionPath(app)

    # --- sessions ------------------------------------------------------------------------
    def open_session(
        self,
        meta: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        seed: int | None = None,
        session_id: str | None = None,
        with_key: bool = True,
        sampling: SamplingOverride | None = None,
    ) -> SessionHandle:
        """Open a session (an episode) and return its id, key and base URL; `sampling`
        overrides the gateway's for its calls."""
        with self._lock:
            s = self._open(meta or {}, timeout_s, seed, session_id, with_key)
            s.sampling = sampling
        return SessionHandle(s.id, s.key or self.api_key, f"{self.url}{SESSION_PREFIX}{s.id}/v1")

    def _open(self, meta, timeout_s, seed, session_id, with_key) -> Session:
        """Open under the lock (closing expired sessions first, to make room)."""
        now = time.monotonic()
        self._sweep(now)
        if session_id is not None:
            check_session_id(session_id, "session_id")
        sid = session_id or secrets.token_hex(8)
        if sid in self._sessions:
            raise APIError(409, f"session {sid!r} exists already; use another id", "conflict")
        self._make_room()
        life = self.limits.session_timeout_s
        life = min(life, timeout_s) if timeout_s is not None else life
        key = secrets.token_urlsafe(24) if with_key else None
        s = Session(sid, key, dict(meta), now, now + life, self.limits.idle_timeout_s, seed, now)
        self._sessions[sid] = s
        if key:
            self._by_key[key] = sid
        return s

    def _make_room(self) -> None:
        """Under the lock: with `max_sessions` open, evict the least recently used idle
        keyless session (standalone only: its records are on disk), else refuse with 503.
        Evicting instead of refusing keeps a burst of new ids (1,024 in 10 s) from locking
        every new session out until the idle timeout; a client whose session was evicted
        just reopens it on its next call."""
        open_now = [s for s in self._sessions.values() if not s.closed]
        if len(open_now) < self.limits.max_sessions:
            return
        idle = [s for s in open_now if s.key is None and not s.num_in_flight]
        if not (self.auto_sessions and idle):
            raise APIError(
                503,
                f"{len(open_now)} sessions are open, the limit (max_sessions="
                f"{self.limits.max_sessions}, `arborl serve --max-sessions`); close "
                "some or wait",
                "overloaded",
            )
        lru = min(idle, key=lambda s: s.last_used)
        lru.closed = "evicted"
        del self._sessions[lru.id]

    @property
    def num_pending(self) -> int:
        """Calls in flight now (admitted by `begin`, not yet ended), over all sessions."""
        with self._lock:
            return self._pending

    def close_session(self, session_id: str, reason: str = "closed") -> list[CallRecord]:
        """Close a session (later calls get 410) and return its records, ordered by call."""
        with self._lock:
            s = self._sessions.pop(session_id, None)
            if s is None:
                raise KeyError(f"no session {session_id!r} on this gateway")
            s.closed = s.closed or reason
            self._by_key.pop(s.key or "", None)
            return sorted(s.calls, key=lambda c: c.call)

    def session(self, session_id: str) -> Session:
        """The session (open or closed and not yet collected)."""
        with self._lock:
            return self._sessions[session_id]

    def _sweep(self, now: float) -> None:
        """Mark sessions past their deadline or idle limit closed (under the lock)."""
        for s in self._sessions.values():
            if s.closed:
                continue
            if now > s.deadline:
                s.closed = "timeout"
            elif now - s.last_used > s.idle_timeout_s:
                s.closed = "idle"
        if self.auto_sessions:  # standalone: nobody collects them; records are on disk
            for sid in [k for k, s in self._sessions.items() if s.closed]:
                self._by_key.pop(self._sessions.pop(sid).key or "", None)

    # --- auth (`Guard`, before the body is read) -------------------------------------------
    def authorize(self, scope: dict, header: str | None) -> bool:
        """The master key works everywhere; a session key only for its own session (it pins
        the call there: `scope["arborl_session"]`). `open_access`: every call is let in."""
        if self.open_access or bearer_ok(header, self.api_key):
            return True
        scheme, _, credential = (header or "").strip().partition(" ")
        with self._lock:
            sid = self._by_key.get(credential) if scheme.lower() == "bearer" else None
        if sid is None or scope.get("arborl_session", sid) != sid:
            return False
        scope["arborl_session"] = sid
        return True

    # --- CallRecorder ------------------------------------------------------------------------
    def begin(self, session: str | None, params: SamplingParams, num_rows: int):
        """Check the session and the limits, count the call in flight, fix its sampling."""
        now = time.monotonic()
        with self._lock:
            self._sweep(now)
            s = self._session_for(session, now)
            if s.num_calls >= self.limits.max_calls_per_session:
                raise APIError(
                    429,
                    f"session {s.id} made {s.num_calls} calls, the limit "
                    f"(max_calls_per_session={self.limits.max_calls_per_session}, "
                    "`arborl serve --max-calls-per-session`)",
                    "rate_limit_error",
                )
            if self._pending >= self.limits.max_pending:
                raise APIError(
                    503,
                    f"{self._pending} calls are in flight, the limit "
                    f"(max_pending={self.limits.max_pending}, `arborl serve "
                    "--max-pending`); retry",
                    "overloaded",
                )
            index = s.num_calls
            params = self._sampling(params, s, index, num_rows)  # before the slot is taken
            s.num_calls, s.last_used = s.num_calls + 1, now
            self._pending += 1
            s.num_in_flight += 1
        return params, (s, index, time.time())

    def _session_for(self, session: str | None, now: float) -> Session:
        if session is None:
            if not self.auto_sessions:
                raise APIError(400, "this gateway records episodes: call through the base_url "
                               "your session gave you (.../s/<id>/v1) or send the "
                               "X-Arborl-Session header", "invalid_request_error")  # fmt: skip
            return self._open({}, None, None, None, False)
        s = self._sessions.get(session)
        if s is None and self.auto_sessions:
            return self._open({}, None, None, session, False)
        if s is None:
            raise APIError(404, f"no session {session!r} on this gateway", "not_found_error")
        if s.closed:
            raise APIError(410, f"session {session} is closed ({s.closed}); its episode is "
                           "over, start a new session", "session_closed")  # fmt: skip
        return s

    def _sampling(self, params: SamplingParams, s: Session, index: int, rows: int):
        o = s.sampling or self.sampling
        if o is not None:
            params.temperature, params.top_p, params.top_k = o.temperature, o.top_p, o.top_k
            if o.max_new_tokens is not None:
                params.max_new_tokens = min(params.max_new_tokens, o.max_new_tokens)
        if s.seed is not None:
            params.seed = None
            params.row_seeds = [row_seed(s.seed, index * 1000 + j) for j in range(rows)]
        return params

    def end(self, ticket: Any, call: dict[str, Any] | None) -> str:
        """Release the call's slot, then record it (None: it failed, nothing is recorded)."""
        s, index, started = ticket
        with self._lock:  # first, so nothing below can keep the slot
            self._pending -= 1
            s.num_in_flight -= 1
        if call is None:
            return s.id
        version = self.version()
        with self._lock:
            record = CallRecord.from_dict({"session": s.id, "call": index, "weight_version": version,
                                           "started": started, "ended": time.time(), **call,
                                           "meta": s.meta})  # fmt: skip
            if s.closed:  # closed while generating (deadline): the episode is over
                return s.id
            s.last_used = time.monotonic()
            if self.record_dir is None or not self.auto_sessions:
                s.calls.append(record)
        if self.record_dir is not None:
            append_call(self.record_dir / f"{record_name(s.id)}.jsonl", record)
        return s.id

    # --- the server ----------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on `host:port` (0: a free port) in a daemon thread; returns the URL."""
        import uvicorn

        check_bind(host, None if self.open_access else self.api_key, "api_key")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="gateway"
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the gateway's server did not start within 30 s")
            time.sleep(0.01)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{sock.getsockname()[1]}"
        return self.url

    def stop(self) -> None:
        """Stop serving (open sessions keep their records until collected)."""
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._server = self._thread = None

    close = stop
    """A run's services close with the engine (`arborl.train.rollout_modes.RunServices`)."""

    def __enter__(self) -> Gateway:
        if not self.url:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


_SAFE_NAME = re.compile(r"[a-z0-9_-]{1,100}")
"""Session ids kept as their own file name: lower case (so no two differ only in case, which
a case-insensitive file system would merge), no `~`, at most 100 bytes."""


def record_name(session_id: str) -> str:
    """A session id as a file name (standalone ids come from clients): a `_SAFE_NAME` id is
    its own name; any other id is a readable ASCII prefix, `~` and 32 hex digits of its
    SHA-256. No safe id holds `~`, so the map is one to one (two ids never share a file);
    a name is at most 100 bytes of `[A-Za-z0-9_~-]`, so it stays inside the folder and under
    every file system's 255-byte limit whatever the id's length or script."""
    if _SAFE_NAME.fullmatch(session_id):
        return session_id
    digest = hashlib.sha256(session_id.encode("utf-8", errors="surrogatepass")).hexdigest()
    prefix = re.sub(r"[^A-Za-z0-9_-]", "_", session_id[:64])
    return f"{prefix}~{digest[:32]}"
