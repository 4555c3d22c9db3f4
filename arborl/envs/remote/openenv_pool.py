"""The `openenv` mode's transport: OpenEnv servers driven as arborl envs.

    pool = make_pool("arborl/Maze-v0", 8, mode="openenv", urls=["http://127.0.0.1:8000"],
                     token=T, split="test")                 # arborl's own OpenEnv server
    pool = make_pool("echo", 4, mode="openenv", urls=[URL], action_key="message",
                     text_key="echoed_message")             # any OpenEnv server

Each pool index holds one WebSocket to `<url>/ws` (OpenEnv keeps one env per connection),
placed on the URL with the fewest of this pool's connections. Messages are openenv-core
0.3.0's (see `openenv_server`): `reset` with `seed` (and `options`), `step` with the
action as `{action_key: text}`, replies `{"observation", "reward", "done"}`. A batch of
calls runs concurrently on one asyncio loop on a private thread, each bounded by the
pool's timeout; a dropped connection or a timeout counts the instance lost, and
`RemotePool` reconnects it before the next reset.

OpenEnv has no standard for the rest of arborl's protocol, so the mapping is:
- text: `observation[text_key]` when present (arborl's server sends `text`), else the
  whole observation as sorted JSON;
- info: `observation["info"]` when it is an object (arborl's server), else
  `{"observation": <the observation>}` with `won` and `valid_action` taken from the
  observation's fields of those names when it has them (False / True otherwise), `anchor`
  the observation JSON (the only state an OpenEnv server shows), `task_id` "seed-<seed>";
- `terminated`/`truncated` from the observation when it has them, else `done`/False;
- snapshot, restore and the oracle are arborl extensions: a server without them answers
  `UNKNOWN_TYPE`, which `pool[i].oracle_action()` raises as NotImplementedError.
Env kwargs go in each reset's `env_kwargs` (arborl's server rebuilds the env with them;
an OpenEnv server whose `reset` takes no such argument drops it, as OpenEnv does).
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
from typing import Any

from arborl.envs.remote.base import RemotePool, Reply, pop_pool_options

_EXT_ERRORS = {"oracle": "no_oracle", "snapshot": "no_snapshot", "restore": "no_snapshot"}


def ws_url(url: str) -> str:
    """`<url>/ws` with an http(s) scheme swapped for ws(s) (as OpenEnv's client does)."""
    u = urllib.parse.urlsplit(url.rstrip("/"))
    if u.scheme not in ("http", "https", "ws", "wss"):
        raise ValueError(f"OpenEnv server URLs start with http://, https://, ws:// or wss://; "
                         f"got {url!r}")  # fmt: skip
    scheme = {"http": "ws", "https": "wss"}.get(u.scheme, u.scheme)
    return urllib.parse.urlunsplit((scheme, u.netloc, u.path + "/ws", "", ""))


class OpenEnvTransport:
    """One WebSocket per pool index, spread over `urls`."""

    def __init__(self, urls: list[str], token: str | None, action_key: str = "action",
                 text_key: str = "text", max_message_bytes: int = 8 << 20) -> None:  # fmt: skip
        if not urls:
            raise ValueError("openenv mode needs urls=[...] (the OpenEnv servers to drive)")
        self.urls = [ws_url(u) for u in urls]
        self.token, self.action_key, self.text_key = token, action_key, text_key
        self.max_message_bytes = max_message_bytes
        self.conns: dict[int, tuple[str, Any]] = {}
        self.env_kwargs: dict[str, Any] = {}
        self.seeds: dict[int, Any] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="arborl-openenv-pool")  # fmt: skip
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def where(self, index: int) -> str:
        return self.conns.get(index, ("no connection", None))[0]

    # --- connections ----------------------------------------------------------------------
    async def _exchange(self, ws: Any, message: dict, timeout_s: float) -> dict:
        await ws.send(json.dumps(message))
        reply = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
        if not isinstance(reply, dict):
            raise ValueError(f"a reply must be a JSON object, got {reply!r:.200}")
        return reply

    async def _open_one(self, i: int, timeout_s: float) -> Reply:
        from websockets.asyncio.client import connect

        await self._drop(i)
        load = {u: 0 for u in self.urls}
        for u, _ in self.conns.values():
            load[u] = load.get(u, 0) + 1
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        errors = []
        for url in sorted(self.urls, key=lambda u: load[u]):
            try:
                ws = await connect(url, additional_headers=headers, open_timeout=timeout_s,
                                   max_size=self.max_message_bytes)  # fmt: skip
                state = await self._exchange(ws, {"type": "state"}, timeout_s)
            except Exception as e:  # noqa: BLE001 - refused, rejected (403), timed out, garbled
                errors.append(f"{url}: {e!r:.200}")
                continue
            self.conns[i] = (url, ws)
            data = state.get("data") if state.get("type") == "state" else {}
            return Reply(True, {"max_turns": int((data or {}).get("max_turns") or 0)})
        return Reply(False, error="cannot open an OpenEnv session: " + "; ".join(errors),
                     lost=True)  # fmt: skip

    async def _drop(self, i: int) -> None:
        old = self.conns.pop(i, None)
        if old is not None:
            ws = old[1]
            try:  # OpenEnv's way: ask, and let the server close its end first
                await ws.send(json.dumps({"type": "close"}))
                await asyncio.wait_for(ws.wait_closed(), 1.0)
            except Exception:  # noqa: BLE001 - best effort: the connection may be gone
                pass
            await ws.close()

    def open(self, indices: list[int], kwargs: dict[str, Any]) -> list[Reply]:
        self.env_kwargs = dict(kwargs)

        async def run() -> list[Reply]:
            return [await self._open_one(i, 60.0) for i in indices]

        return self._run(run())

    # --- calls ----------------------------------------------------------------------------
    def _message(self, i: int, method: str, args: dict) -> dict:
        if method == "reset":
            self.seeds[i] = args.get("seed")
            data: dict[str, Any] = {"seed": args.get("seed")}
            if args.get("options") is not None:
                data["options"] = args["options"]
            if self.env_kwargs:
                data["env_kwargs"] = self.env_kwargs
            return {"type": "reset", "data": data}
        if method == "step":
            return {"type": "step", "data": {self.action_key: args["action"]}}
        return {"type": method, "data": args}

    def _parse(self, i: int, method: str, data: dict) -> dict:
        if method not in ("reset", "step"):
            return data
        obs, done = data.get("observation"), bool(data.get("done"))
        obs = obs if isinstance(obs, dict) else {"value": obs}
        text = obs.get(self.text_key)
        text = text if isinstance(text, str) else json.dumps(obs, sort_keys=True, default=repr)
        if isinstance(obs.get("info"), dict):
            info = dict(obs["info"])
        else:
            info = {"observation": obs, "won": bool(obs.get("won", False)),
                    "valid_action": bool(obs.get("valid_action", True)),
                    "anchor": json.dumps(obs, sort_keys=True, default=repr),
                    "task_id": f"seed-{self.seeds.get(i)}"}  # fmt: skip
        if method == "reset":
            return {"observation": text, "info": info, "instruction": obs.get("instruction", "")}
        terminated = bool(obs.get("terminated", done))
        truncated = bool(obs.get("truncated", False))
        return {"observation": text, "reward": float(data.get("reward") or 0.0),
                "terminated": terminated, "truncated": truncated, "info": info}  # fmt: skip

    async def _call_one(self, i: int, method: str, args: dict, timeout_s: float) -> Reply:
        if method == "delete":
            await self._drop(i)
            return Reply(True, {"deleted": i})
        if i not in self.conns:
            return Reply(False, error="no connection (its server was lost)", lost=True)
        url, ws = self.conns[i]
        try:
            reply = await self._exchange(ws, self._message(i, method, args), timeout_s)
        except TimeoutError:
            await self._drop(i)
            return Reply(False, error=f"timeout: no reply from {url} within {timeout_s:g}s",
                         lost=True)  # fmt: skip
        except Exception as e:  # noqa: BLE001 - closed, reset or garbled: the session is gone
            await self._drop(i)
            return Reply(False, error=f"crashed: connection to {url} failed: {e!r:.200}",
                         lost=True)  # fmt: skip
        data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
        if reply.get("type") == "error":
            code, message = data.get("code", "ERROR"), data.get("message", "")
            if code == "UNKNOWN_TYPE" and method in _EXT_ERRORS:
                message = f"{_EXT_ERRORS[method]}: this OpenEnv server has no {method!r}"
            return Reply(False, error=f"{code}: {message}", lost=code == "SESSION_ERROR")
        try:
            return Reply(True, self._parse(i, method, data))
        except (TypeError, ValueError) as e:
            return Reply(False, error=f"bad reply {reply!r:.200}: {e!r}")

    def call(self, calls: list[tuple[int, str, dict]], timeout_s: float) -> list[Reply]:
        async def run() -> list[Reply]:
            return list(await asyncio.gather(*(self._call_one(*c, timeout_s) for c in calls)))

        return self._run(run())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:

            async def drop_all() -> None:
                await asyncio.gather(*(self._drop(i) for i in list(self.conns)))

            asyncio.run_coroutine_threadsafe(drop_all(), self._loop).result(5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()


def openenv_pool(env_id: str, num_envs: int, ctx: dict, urls: list[str] | None = None,
                 token: str | None = None, action_key: str = "action", text_key: str = "text",
                 **kw: Any) -> RemotePool:  # fmt: skip
    """`make_pool(..., mode="openenv")`: `num_envs` WebSocket sessions on the OpenEnv
    servers at `urls` (`token`: sent as `Authorization: Bearer`; `action_key`: the action
    field the server's Action model has; `text_key`: the observation field holding the
    text). `env_id` names the env in trajectories; other kwargs are env kwargs."""
    opts = pop_pool_options(kw)
    if not urls:
        raise ValueError(
            "mode='openenv' drives OpenEnv servers someone runs: give urls=['http://HOST:PORT']"
            " (for an arborl env: `arborl env serve ID --protocol openenv`)"
        )
    t = OpenEnvTransport(list(urls), token, action_key, text_key)
    try:
        return RemotePool(t, env_id, num_envs, kw, mode="openenv", **opts)
    except BaseException:
        t.close()
        raise
