"""The `http` mode's transport: sessions on one or more env servers, balanced.

Each pool index holds one session on one server URL. New sessions go to the healthy URL
with the fewest sessions of this pool, so replicas share the load and a replica that
went down is skipped until its `/health` answers again. A batch of calls is sent
concurrently (one asyncio loop on a private thread), each call bounded by the pool's
timeout. The client is a small HTTP/1.1 keep-alive client on asyncio streams rather than
httpx: httpx's connection pool scans every connection per request, which cost 4 ms of
client CPU per call at 64 concurrent sessions on our machine (see docs/env_packages.md). A refused connection, a timeout, a 5xx, a
non-JSON reply or a 404 for the session (the replica restarted, or the session idled
out) fail that call; the session is counted lost and rebuilt before the next reset.

Batched calls: the calls of one `call` that go to the same replica travel as one `POST
/batch` (in chunks of `BATCH_CHUNK`), since the server's per-request work (routing,
middleware, parsing) cost 1-2.8 ms against a cheap env's 40 µs step (docs/BENCHMARKS.md); the batch tells the
server its deadline, so a hung env fails its own call (504) and not its neighbours'. A
server without `/batch` (404) is sent single calls from then on; `batch_calls=False` always
sends single calls (the REST contract's per-session routes, which other clients use).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.parse
from typing import Any

from arborl.envs.remote.base import RemotePool, Reply, pop_pool_options

_DOWN_S = 1.0
"""A URL that refused a connection is skipped this long before `/health` is tried."""
BATCH_CHUNK = 256
"""Most calls per `/batch` request (the server's default bound is 1024)."""
_BATCH_GRACE_S = 2.0
"""Extra client wait over a batch's `timeout_s`, for the server's own 504 replies to arrive."""


class HttpError(Exception):
    """A transport-level failure (refused, reset, malformed reply)."""


class _Connections:
    """Idle keep-alive connections per server, and one request/reply exchange."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.idle: dict[str, list[tuple[Any, Any]]] = {}

    async def _open(self, base: str) -> tuple[Any, Any]:
        u = urllib.parse.urlsplit(base)
        port = u.port or (443 if u.scheme == "https" else 80)
        return await asyncio.open_connection(u.hostname, port, ssl=u.scheme == "https" or None)

    async def request(self, method: str, base: str, path: str, body: dict | None,
                      auth: bool = True) -> tuple[int, bytes]:  # fmt: skip
        conns = self.idle.setdefault(base, [])
        reader, writer = conns.pop() if conns else await self._open(base)
        try:
            data = b"" if body is None else json.dumps(body).encode()
            head = [f"{method} {path} HTTP/1.1", f"Host: {urllib.parse.urlsplit(base).netloc}",
                    f"Content-Length: {len(data)}", "Content-Type: application/json"]  # fmt: skip
            if auth:
                head.append(f"Authorization: Bearer {self.token}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
            status, keep_alive, payload = await _read_response(reader)
        except BaseException:
            writer.close()
            raise
        if keep_alive:
            conns.append((reader, writer))
        else:
            writer.close()
        return status, payload

    def close(self) -> None:
        for conns in self.idle.values():
            for _, writer in conns:
                writer.close()
        self.idle.clear()


async def _read_response(reader: Any) -> tuple[int, bool, bytes]:
    line = await reader.readline()
    parts = line.decode("latin-1").split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise HttpError(f"not an HTTP reply: {line[:80]!r}")
    status, headers = int(parts[1]), {}
    while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        payload = b""
        while size := int((await reader.readline()).split(b";")[0], 16):
            payload += await reader.readexactly(size)
            await reader.readline()
        await reader.readline()
    elif "content-length" in headers:
        payload = await reader.readexactly(int(headers["content-length"]))
    else:  # no length: the body runs to the end of the connection
        return status, False, await reader.read()
    return status, headers.get("connection", "").lower() != "close", payload


class HttpTransport:
    """Sessions spread over `urls` (servers that share `token`)."""

    def __init__(self, urls: list[str], token: str, owned_servers: Any = None,
                 batch_calls: bool = True) -> None:  # fmt: skip
        if not urls:
            raise ValueError("http mode needs at least one server URL (or replicas >= 1)")
        bad = [u for u in urls if urllib.parse.urlsplit(u).scheme not in ("http", "https")]
        if bad:
            raise ValueError(f"env server URLs must start with http:// or https://, got {bad}")
        self.urls = [u.rstrip("/") for u in urls]
        self.servers = owned_servers
        self.sessions: dict[int, tuple[str, str]] = {}
        self.down_until: dict[str, float] = {}
        self.conns = _Connections(token)
        self.batch_calls = batch_calls
        self.no_batch: set[str] = set()  # servers that answered 404 to /batch
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="arborl-http-pool")  # fmt: skip
        self._thread.start()

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def lane(self, index: int) -> int:
        """Every session is its own lane: the asyncio loop serves threads concurrently."""
        return index

    def where(self, index: int) -> str:
        return self.sessions.get(index, ("no session", ""))[0]

    # --- requests -------------------------------------------------------------------------
    async def _request(self, method: str, base: str, path: str, body: dict | None,
                       timeout_s: float) -> Reply:  # fmt: skip
        url = base + path
        try:
            status, payload = await asyncio.wait_for(
                self.conns.request(method, base, path, body), timeout_s)  # fmt: skip
        except TimeoutError:
            return Reply(
                False, error=f"timeout: no reply from {url} within {timeout_s:g}s", lost=True
            )
        except (OSError, EOFError, HttpError, ValueError) as e:  # refused, reset, garbled
            self.down_until[base] = time.monotonic() + _DOWN_S
            return Reply(False, error=f"crashed: cannot reach {base}: {e!r:.200}", lost=True)
        try:
            data = json.loads(payload)
        except ValueError:
            return Reply(False, error=f"bad reply ({status}) from {url}: {payload[:200]!r}")
        return _reply(status, data)

    async def _batch(self, base: str, calls: list[tuple[str, str, dict]],
                     timeout_s: float) -> list[Reply]:  # fmt: skip
        """`(session_id, method, args)` calls to one server in one `/batch` request."""
        body = {"calls": [{"session_id": sid, "method": m, "args": a} for sid, m, a in calls],
                "timeout_s": timeout_s}  # fmt: skip
        r = await self._request("POST", base, "/batch", body, timeout_s + _BATCH_GRACE_S)
        items = r.value.get("replies") if r.ok else None
        if isinstance(items, list) and len(items) == len(calls):
            return [_batch_item(x) for x in items]
        if not r.ok and r.error.startswith("http_error (404)"):  # an older server: no /batch
            self.no_batch.add(base)
            return list(await asyncio.gather(*(
                self._request("POST", base, f"/sessions/{sid}/{m}", a, timeout_s)
                for sid, m, a in calls)))  # fmt: skip
        if r.ok:
            r = Reply(False, error=f"bad batch reply from {base}: {str(r.value):.200}")
        return [r] * len(calls)

    async def _health(self, url: str) -> bool:
        try:
            status, _ = await asyncio.wait_for(
                self.conns.request("GET", url, "/health", None, auth=False), 1.0)  # fmt: skip
            return status == 200
        except (TimeoutError, OSError, EOFError, HttpError, ValueError):
            return False

    async def _pick(self, exclude: frozenset[str] = frozenset()) -> str | None:
        """The healthy URL with the fewest of our sessions, not one in `exclude`."""
        load = {u: 0 for u in self.urls}
        for u, _ in self.sessions.values():
            if u in load:
                load[u] += 1
        for url in sorted((u for u in self.urls if u not in exclude), key=lambda u: load[u]):
            if self.down_until.get(url, 0) <= time.monotonic():
                return url
            if await self._health(url):
                self.down_until.pop(url, None)
                return url
            self.down_until[url] = time.monotonic() + _DOWN_S
        return None

    async def _open_one(self, i: int, kwargs: dict, timeout_s: float) -> Reply:
        old = self.sessions.pop(i, None)
        if old is not None:  # best effort: the old session may live on a healthy replica
            await self._request("DELETE", old[0], f"/sessions/{old[1]}", None, 2.0)
        tried: set[str] = set()
        full = None
        for _ in range(len(self.urls)):
            url = await self._pick(frozenset(tried))
            if url is None:
                break
            tried.add(url)
            r = await self._request("POST", url, "/sessions", kwargs, timeout_s)
            if r.ok:
                self.sessions[i] = (url, r.value["session_id"])
                return r
            if r.error.startswith("server_full"):
                full = r  # this replica is full: another may have room
                continue
            if not r.lost:
                return r  # the server refused the kwargs: another replica would too
        if full is not None:
            return full
        return Reply(False, error=f"no healthy env server among {self.urls}", lost=True)

    def open(self, indices: list[int], kwargs: dict[str, Any]) -> list[Reply]:
        async def run() -> list[Reply]:
            out = []
            for i in indices:  # sequential: each pick sees the sessions placed before it
                out.append(await self._open_one(i, kwargs, 60.0))
            return out

        return self._run(run())

    def call(self, calls: list[tuple[int, str, dict]], timeout_s: float) -> list[Reply]:
        async def one(i: int, method: str, args: dict) -> Reply:
            if i not in self.sessions:
                return Reply(False, error="no session (its server was lost)", lost=True)
            url, sid = self.sessions[i]
            if method == "delete":
                self.sessions.pop(i, None)
                return await self._request("DELETE", url, f"/sessions/{sid}", None, timeout_s)
            return await self._request("POST", url, f"/sessions/{sid}/{method}", args, timeout_s)

        async def batched(base: str, ns: list[int]) -> None:
            sub = [(self.sessions[calls[n][0]][1], calls[n][1], calls[n][2]) for n in ns]
            for n, r in zip(ns, await self._batch(base, sub, timeout_s)):
                replies[n] = r

        async def single(n: int) -> None:
            replies[n] = await one(*calls[n])

        replies: list[Reply | None] = [None] * len(calls)
        groups: dict[str, list[int]] = {}
        singles = []
        for n, (i, method, _) in enumerate(calls):
            base = self.sessions.get(i, ("", ""))[0]
            if self.batch_calls and method != "delete" and base and base not in self.no_batch:
                groups.setdefault(base, []).append(n)
            else:
                singles.append(n)
        jobs = [single(n) for n in singles]
        for base, ns in groups.items():
            if len(ns) == 1:
                jobs.append(single(ns[0]))
                continue
            for k in range(0, len(ns), BATCH_CHUNK):
                jobs.append(batched(base, ns[k : k + BATCH_CHUNK]))

        async def run() -> list[Reply]:
            await asyncio.gather(*jobs)
            return replies  # type: ignore[return-value]

        return self._run(run())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            if self.sessions:
                self.call([(i, "delete", {}) for i in list(self.sessions)], 2.0)
            self._loop.call_soon_threadsafe(self.conns.close)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()
            if self.servers is not None:
                self.servers.stop()


def _reply(status: int, data: Any, batched: bool = False) -> Reply:
    """A Reply from one call's HTTP status and decoded JSON body. A batched call past the
    batch's deadline (504) counts as lost, as a single call's client-side timeout does."""
    if status == 200 and isinstance(data, dict):
        return Reply(True, data)
    kind = data.get("error", "") if isinstance(data, dict) else ""
    detail = data.get("detail", data) if isinstance(data, dict) else data
    return Reply(False, error=f"{kind or 'http'} ({status}): {detail!s:.300}",
                 lost=(status == 404 and kind == "no_session") or (batched and status == 504))  # fmt: skip


def _batch_item(x: Any) -> Reply:
    """One `/batch` reply item: `{"status": 200, "value": ...}` or an error body + status."""
    status = x.get("status") if isinstance(x, dict) else None
    if not isinstance(status, int):
        return Reply(False, error=f"bad batch reply item {x!r:.100}")
    return _reply(status, x.get("value") if status == 200 else x, batched=True)


def http_pool(env_id: str, num_envs: int, ctx: dict, urls: list[str] | None = None,
              token: str | None = None, replicas: int = 1, batch_calls: bool = True,
              **kw: Any) -> RemotePool:  # fmt: skip
    """`make_pool(..., mode="http")`: sessions on the servers at `urls` (with `token`), or
    on `replicas` local servers that the pool starts now and stops on `close` (their
    `--call-timeout-s` is the pool's `timeout_s` when longer than the servers' 60 s
    default, so a slow engine's long timeout is not cut short on the server side).
    `batch_calls`: send a step's calls to each replica as one `/batch` request (False: one
    request per call, the per-session REST routes)."""
    opts = pop_pool_options(kw)
    servers = None
    if not urls:
        from arborl.envs.remote.serve import ReplicaSet

        call_timeout_s = max(60.0, float(opts.get("timeout_s", 0.0)))
        servers = ReplicaSet(env_id, replicas, python=ctx["python"], spec=ctx["spec"],
                             token=token, call_timeout_s=call_timeout_s).start()  # fmt: skip
        urls, token = servers.urls, servers.token
    t = HttpTransport(urls, token or "", owned_servers=servers, batch_calls=batch_calls)
    try:
        return RemotePool(t, env_id, num_envs, kw, mode="http", **opts)
    except BaseException:
        t.close()
        raise
