"""`RemotePool`: the `EnvPool` interface over envs that live in other processes.

The subprocess, Ray and HTTP modes differ only in their *transport* (how a batch of calls
reaches the env instances); this class owns everything else, so the three behave alike
and the rollout loop cannot tell them from the in-process pool: grouped resets, stepping
only the envs given actions, no auto-reset, and `pool[i]`, an `EnvProxy` that follows
the `Env` protocol (so `check_env(pool[i])` runs the conformance checks through the pool).

Failure policy: every call has a timeout. A call that fails (the worker crashed, timed
out, sent a bad reply, or the env raised) ends only the episode of that env: its
`StepResult` is truncated with `info["env_error"]` set, the failure is counted in
`num_env_errors`, and an instance that was lost is rebuilt before its next reset
(elsewhere, if its replica is down). Past `max_env_errors` failures the pool raises
`EnvErrorBudgetExceeded`, which stops the run with the recent errors listed.

Threads: `step` (and a proxy's calls) may be called from several threads at once for
different envs, as the rollout's async mode does. Calls run concurrently unless they share
a *lane*: `transport.lane(index)` names the channel an instance is reached through (a
subprocess worker's pipe carries one batch at a time; an HTTP or Ray instance is its own
lane), and calls on one lane wait for each other. A transport without `lane` is one lane.
Pools whose transports share processes (`EnvWorkers`) share their lane locks too
(`transport.lane_locks`), so a training and an evaluation pool never interleave on a pipe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from arborl.envs.pool import PoolBookkeeping, StepResult, actions_to_step


class EnvCallError(RuntimeError):
    """One call to a remote env failed (raised by `EnvProxy` methods)."""


class EnvCreateError(EnvCallError):
    """A pool's envs could not be created: their data is missing, their package is not set
    up, their kwargs are wrong. A fault of the set-up, not of one episode, whose message
    (the env's own, e.g. ALFWorld's `DataMissing`) says how to fix it: every `arborl`
    command prints it alone and exits 2 (`arborl.cli.main`)."""


SETUP_ERRORS = (OSError, ImportError, LookupError, ValueError, TypeError)
"""What an env's constructor raises when its set-up is wrong (missing data files, an
uninstalled dependency, an unknown name, bad kwargs); anything else is a bug of the env,
whose traceback the worker writes to its log."""


def _create_failure(env_id: str, mode: str, num_envs: int, failed: list[str]) -> str:
    """One line for envs that could not be created (`failed`: `RemotePool._open`'s lines,
    "env I (where): error"): the env's own message once when every env failed alike."""
    errors = [f.split("): ", 1)[-1].removeprefix("create_failed: ") for f in failed]
    head = f"could not create the envs of {env_id} ({mode} pool, {len(failed)} of {num_envs} failed"
    if len(set(errors)) == 1:
        return f"{head}): {errors[0]}"
    return f"{head}; the first: {failed[0]})"


class EnvErrorBudgetExceeded(RuntimeError):
    """More env calls failed than the pool's `max_env_errors` allows."""


@dataclass
class Reply:
    """One call's outcome: `value` when ok, else `error`; `lost`: the instance is gone."""

    ok: bool
    value: Any = None
    error: str = ""
    lost: bool = False


class Transport(Protocol):
    """How a mode reaches its env instances (one instance per pool index)."""

    def open(self, indices: list[int], kwargs: dict[str, Any]) -> list[Reply]:
        """(Re)build the instances at `indices`; ok values are `{"max_turns", "env_id"}`."""

    def call(self, calls: list[tuple[int, str, dict]], timeout_s: float) -> list[Reply]:
        """Run `(index, method, args)` calls, all at once, each bounded by `timeout_s`."""

    def where(self, index: int) -> str:
        """Where instance `index` lives (a pid or URL), for error messages."""

    def close(self) -> None: ...


def _hashable(x: Any) -> Any:
    """JSON lists back to tuples, so anchors stay hashable after the wire."""
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


POOL_OPTIONS = ("timeout_s", "max_env_errors")
"""The `RemotePool` options every remote mode's builder takes out of `make_pool`'s kwargs."""


def pop_pool_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take `RemotePool`'s own options out of `kwargs` (the rest go to the env)."""
    return {k: kwargs.pop(k) for k in POOL_OPTIONS if k in kwargs}


class EnvProxy:
    """`pool[i]`: one remote env instance behind the `Env` protocol."""

    def __init__(self, pool: RemotePool, index: int) -> None:
        self._pool, self.index = pool, index
        self.env_id = pool.env_id
        self.max_turns = 0
        self.instruction = ""
        self.task: Any = None

    def _call(self, method: str, **args: Any) -> dict[str, Any]:
        return self._pool._call_one(self.index, method, args)

    def reset(self, seed: int | None = None, options: dict | None = None):
        out = self._call("reset", seed=seed, options=options)
        self._pool._done[self.index] = False
        return out["observation"], self._pool._info(out, self.index)

    def step(self, action: str):
        r = self._pool._step_result(self.index, self._call("step", action=str(action)))
        self._pool._done[self.index] = r.terminated or r.truncated
        return tuple(r)

    def snapshot(self) -> str:
        return self._call("snapshot")["snapshot"]

    def restore(self, state: str) -> None:
        out = self._call("restore", snapshot=state)
        self.instruction, self.task = out.get("instruction", ""), out.get("task")

    def oracle_action(self) -> str:
        try:
            return self._call("oracle")["action"]
        except EnvCallError as e:
            if "no_oracle" in str(e):
                raise NotImplementedError(str(e)) from e
            raise

    def close(self) -> None:
        """Close this instance (idempotent); the pool rebuilds it on the next reset."""
        self._pool._close_one(self.index)


class RemotePool(PoolBookkeeping):
    """`num_envs` env instances reached through `transport` (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        env_id: str,
        num_envs: int,
        env_kwargs: dict[str, Any] | None = None,
        mode: str = "remote",
        timeout_s: float = 30.0,
        max_env_errors: int = 100,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} must be >= 1")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s!r} must be > 0 (seconds per env call)")
        if max_env_errors < 0:
            raise ValueError(f"max_env_errors={max_env_errors!r} must be >= 0")
        self.transport, self.env_id, self.mode = transport, env_id, mode
        self.env_kwargs = dict(env_kwargs or {})
        self.timeout_s, self.max_env_errors = float(timeout_s), int(max_env_errors)
        self.num_env_errors = 0
        self.recent_errors: list[str] = []
        super().__init__([EnvProxy(self, i) for i in range(num_envs)])  # pool[i]: a proxy
        self._task_ids = [""] * num_envs
        self._lost: set[int] = set()
        self._closed = False
        self._lane_of = getattr(transport, "lane", lambda i: 0)
        shared = getattr(transport, "lane_locks", None)  # pools over the same processes
        self._lanes, self._lanes_lock = shared or ({}, threading.Lock())
        failed = self._open(list(range(num_envs)))
        if failed:
            self.transport.close()
            raise EnvCreateError(_create_failure(env_id, mode, num_envs, failed))

    # --- EnvPool interface (len, pool[i], active, done: `PoolBookkeeping`) ------------------
    def reset(self, seeds: Sequence[int], group_size: int = 1, options=None):
        """As `EnvPool.reset`; an env that cannot be reset starts done with `env_error`."""
        group_options = self._start_reset(seeds, group_size, options)
        calls = [(i, "reset", {"seed": seeds[g], "options": group_options[g]})
                 for i, g in enumerate(self.group_ids)]  # fmt: skip
        replies = self._call_with_reopen(calls)
        all_obs, all_infos = [], []
        for (i, _, _), r in zip(calls, replies):
            if r.ok:
                all_obs.append(r.value["observation"])
                all_infos.append(self._info(r.value, i))
                self._done[i] = False
            else:
                self._record_error(i, "reset", r)
                all_obs.append("")
                all_infos.append(self._error_info(i, r.error))
                self._done[i] = True
        return all_obs, all_infos

    def step(self, actions: dict[int, str] | Sequence[str | None]):
        """As `EnvPool.step`; a failed call gives a truncated result with `env_error`."""
        todo = self._check_actions(actions)
        calls = [(i, "step", {"action": str(a)}) for i, a in todo.items()]
        replies = self._transport_call(calls) if calls else []
        results: list[StepResult | None] = [None] * self.num_envs
        for (i, _, _), r in zip(calls, replies):
            if r.ok:
                try:
                    results[i] = self._step_result(i, r.value)
                except (KeyError, TypeError, ValueError) as e:
                    r = Reply(False, error=f"bad reply {r.value!r:.200}: {e!r}")
            if not r.ok:
                self._record_error(i, "step", r)
                results[i] = StepResult(f"[env error] {r.error}", 0.0, False, True,
                                        self._error_info(i, r.error))  # fmt: skip
            self._done[i] = bool(results[i].terminated or results[i].truncated)
        return results, list(self._done)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.transport.close()

    def __enter__(self) -> RemotePool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------------
    @contextmanager
    def _holding_lanes(self, indices: list[int]) -> Iterator[None]:
        """Hold the locks of the lanes of `indices` (taken in sorted order: no deadlock)."""
        keys = sorted({self._lane_of(i) for i in indices}, key=repr)
        with self._lanes_lock:
            locks = [self._lanes.setdefault(k, threading.Lock()) for k in keys]
        with ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            yield

    def _transport_call(self, calls: list[tuple[int, str, dict]]) -> list[Reply]:
        with self._holding_lanes([c[0] for c in calls]):
            return self.transport.call(calls, self.timeout_s)

    def _open(self, indices: list[int]) -> list[str]:
        replies = self.transport.open(indices, self.env_kwargs)
        failed = []
        for i, r in zip(indices, replies):
            if r.ok:
                self._envs[i].max_turns = int(r.value.get("max_turns") or 0)
                self._lost.discard(i)
            else:
                self._lost.add(i)
                failed.append(f"env {i} ({self.transport.where(i)}): {r.error}")
        return failed

    def _call_with_reopen(self, calls: list[tuple[int, str, dict]]) -> list[Reply]:
        """Rebuild lost instances first; a call that loses its instance is retried once."""
        if self._lost:
            self._open(sorted(self._lost))
        replies = self._transport_call(calls)
        retry = [k for k, r in enumerate(replies) if r.lost]
        if retry:
            self._open(sorted({calls[k][0] for k in retry}))
            again = self._transport_call([calls[k] for k in retry])
            for k, r in zip(retry, again):
                replies[k] = r
        return replies

    def _call_one(self, i: int, method: str, args: dict) -> dict[str, Any]:
        call = [(i, method, args)]
        r = (self._call_with_reopen(call) if method == "reset"
             else self._transport_call(call))[0]  # fmt: skip
        if not r.ok:
            self._record_error(i, method, r)
            raise EnvCallError(f"env {i} ({self.transport.where(i)}) {method}: {r.error}")
        return r.value

    def _close_one(self, i: int) -> None:
        if i not in self._lost and not self._closed:
            self._transport_call([(i, "delete", {})])
            self._lost.add(i)  # rebuilt on the next reset
        self._done[i] = True

    def _info(self, out: dict[str, Any], i: int) -> dict[str, Any]:
        proxy = self._envs[i]
        proxy.instruction, proxy.task = out.get("instruction", ""), out.get("task")
        info = dict(out["info"])
        if "anchor" in info:
            info["anchor"] = _hashable(info["anchor"])
        self._task_ids[i] = str(info.get("task_id", ""))
        return {**info, "group_id": self.group_ids[i], "env_index": i}

    def _step_result(self, i: int, out: dict[str, Any]) -> StepResult:
        info = dict(out["info"])
        if "anchor" in info:
            info["anchor"] = _hashable(info["anchor"])
        info.update(group_id=self.group_ids[i], env_index=i)
        return StepResult(str(out["observation"]), float(out["reward"]),
                          bool(out["terminated"]), bool(out["truncated"]), info)  # fmt: skip

    def _error_info(self, i: int, error: str) -> dict[str, Any]:
        return {"env_error": error, "won": False, "valid_action": False,
                "task_id": self._task_ids[i] or f"env-error-{i}", "anchor": ("env_error",),
                "group_id": self.group_ids[i], "env_index": i}  # fmt: skip

    def _record_error(self, i: int, method: str, r: Reply) -> None:
        if r.lost:
            self._lost.add(i)
        self.num_env_errors += 1
        self.recent_errors = (self.recent_errors + [f"env {i} {method}: {r.error}"])[-10:]
        if self.num_env_errors > self.max_env_errors:
            recent = "\n  ".join(self.recent_errors[-5:])
            raise EnvErrorBudgetExceeded(
                f"{self.mode} pool of {self.env_id!r}: {self.num_env_errors} env calls failed, "
                f"more than max_env_errors={self.max_env_errors}; the run stops here. Recent "
                f"errors:\n  {recent}\nFix the env or its servers (see their logs), or raise "
                "max_env_errors if failures are expected"
            )

    def _check_actions(self, actions: dict[int, str] | Sequence[str | None]) -> dict[int, str]:
        return actions_to_step(actions, self._done)
