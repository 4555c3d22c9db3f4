"""The `ray` mode's transport: Ray actors holding env instances, fractional CPUs each.

Actors are scheduled by Ray wherever the cluster has room (`num_cpus_per_worker` may be
a fraction, so many light envs share a core). An actor for a plain registry env holds
its instances in-process; one for a package env runs a stdio worker in the package's
isolated interpreter and forwards to it, because a Ray worker must run the cluster's own
Python and Ray, which an isolated interpreter need not have (set the package up on every
node, or use the `http` mode with containers). A batch is one `ray.get`-bounded call per
actor; an actor that misses the timeout is killed, one that died is recreated, and their
instances are rebuilt before their next reset. Calls carry numpy-free JSON values only.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any

from arborl.envs.remote.base import RemotePool, Reply, pop_pool_options


class EnvActorImpl:
    """The body of the Ray actor (wrapped with `ray.remote` at pool start)."""

    def __init__(self, env_id: str, python: str | None, spec: dict | None, secret: str) -> None:
        self.worker = None
        if python:
            from arborl.envs.remote.subproc import StdioWorker

            log = Path(tempfile.mkdtemp(prefix="arborl-ray-worker-")) / "worker.log"
            self.worker = StdioWorker(env_id, python, spec, secret, log)
        else:
            from arborl.envs.remote.host import EnvHost

            self.host = EnvHost(env_id, secret.encode(), spec)

    def batch(self, calls: list[list], timeout_s: float) -> list[list]:
        if self.worker is None:
            return [self.host.handle(str(k), m, a) for k, m, a in calls]
        import time

        if not self.worker.send(calls):
            raise RuntimeError(self.worker.describe_death())
        line = self.worker.read_line(time.monotonic() + timeout_s)
        if line is None:
            raise RuntimeError(f"isolated worker gave no reply within {timeout_s:g}s")
        import json

        return json.loads(line)["replies"]


LOCAL_RAY_SYSTEM_CONFIG = {"worker_niceness": 0}
"""Ray's system settings for a local instance arborl starts. Ray runs its worker
processes at niceness 15 by default, so on a machine with any other busy process (a test
suite, another run, a browser) the workers, which do all of arborl's model and env work,
get a sliver of the CPU: measured on 2 cores at load ~5, an SFT warm start in a Ray task
took 18 min against about 2 min at niceness 0. A cluster started with `ray start` keeps
its own setting (`RAY_worker_niceness=0 ray start ...` changes it)."""


def init_local_ray(**kwargs: Any) -> None:
    """`ray.init` of a private local instance with `LOCAL_RAY_SYSTEM_CONFIG` (workers at
    the driver's priority), token authentication and no dashboard; `kwargs` go to
    `ray.init` (num_cpus, ...).

    Ray (2.5x) turns token authentication on for a new local instance when `RAY_AUTH_MODE`
    is unset and warns about it on every start; arborl chooses that same mode explicitly
    (`_choose_token_auth`), so the instance stays authenticated (the token lives in
    `~/.ray/auth_token`) and the warning goes. `RAY_AUTH_MODE=disabled` in the environment
    opts out, as Ray's warning says; a mode the environment sets is kept."""
    import os

    import ray

    if "RAY_AUTH_MODE" not in os.environ:
        _choose_token_auth()
    kwargs.setdefault("include_dashboard", False)
    ray.init(_system_config=dict(LOCAL_RAY_SYSTEM_CONFIG), **kwargs)


def _choose_token_auth() -> None:
    """Set `RAY_AUTH_MODE=token` the way Ray does when it turns token auth on itself: the
    variable, then a refresh of the config Ray's core cached when `ray` was imported (the
    variable alone would leave this process in 'disabled' mode against a 'token' cluster)."""
    try:
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:  # a Ray without token authentication: nothing to choose, no warning
        return
    _enable_token_auth()


class RayTransport:
    """Env instances over `num_workers` actors (default `min(num_envs, 8)`)."""

    def __init__(self, env_id: str, num_envs: int, python: str | None = None,
                 spec: dict | None = None, num_workers: int | None = None,
                 num_cpus_per_worker: float = 0.25) -> None:  # fmt: skip
        import ray

        if not ray.is_initialized():
            init_local_ray(log_to_driver=False)
        if num_cpus_per_worker <= 0:
            raise ValueError(f"num_cpus_per_worker={num_cpus_per_worker!r} must be > 0")
        self.env_id, self.python, self.spec = env_id, python, spec
        self.num_workers = min(num_envs, num_workers or min(num_envs, 8))
        self.secret = secrets.token_hex(16)
        self._cls = ray.remote(num_cpus=num_cpus_per_worker, max_restarts=0)(EnvActorImpl)
        self.actors: list[Any] = [None] * self.num_workers
        self.num_restarts = 0

    def _actor_of(self, index: int) -> int:
        return index % self.num_workers

    def where(self, index: int) -> str:
        return f"ray actor {self._actor_of(index)}"

    def lane(self, index: int) -> int:
        """Calls to one actor wait for each other (its restarts touch all its envs)."""
        return self._actor_of(index)

    def _ensure(self, k: int) -> Any:
        if self.actors[k] is None:
            self.actors[k] = self._cls.remote(self.env_id, self.python, self.spec, self.secret)
        return self.actors[k]

    def _drop(self, k: int) -> None:
        import ray

        if self.actors[k] is not None:
            ray.kill(self.actors[k], no_restart=True)
            self.actors[k] = None
            self.num_restarts += 1

    def open(self, indices: list[int], kwargs: dict[str, Any]) -> list[Reply]:
        return self.call([(i, "create", {"kwargs": kwargs}) for i in indices], 120.0)

    def call(self, calls: list[tuple[int, str, dict]], timeout_s: float) -> list[Reply]:
        import ray

        per_actor: dict[int, list[int]] = {}
        for n, (i, _, _) in enumerate(calls):
            per_actor.setdefault(self._actor_of(i), []).append(n)
        refs = {}
        for k, ns in per_actor.items():
            actor = self._ensure(k) if any(calls[n][1] == "create" for n in ns) else self.actors[k]
            if actor is None:
                continue
            batch = [[str(calls[n][0]), calls[n][1], calls[n][2]] for n in ns]
            refs[k] = actor.batch.remote(batch, timeout_s)
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        ready_set = set(ready)
        replies: list[Reply | None] = [None] * len(calls)
        for k, ns in per_actor.items():
            ref = refs.get(k)
            if ref is None or ref not in ready_set:
                why = "actor lost" if ref is None else f"timeout: no reply within {timeout_s:g}s"
                self._drop(k)
                for n in ns:
                    replies[n] = Reply(False, error=why, lost=True)
                continue
            try:
                result = ray.get(ref)
            except Exception as e:  # the actor died or its method raised
                self._drop(k)
                for n in ns:
                    replies[n] = Reply(False, error=f"crashed: {e!r:.300}", lost=True)
                continue
            for n, (status, value) in zip(ns, result):
                replies[n] = (Reply(True, value) if status == 200 else
                              Reply(False, error=str(value), lost=str(value).startswith("no_session")))  # fmt: skip
        return replies  # type: ignore[return-value]

    def close(self) -> None:
        import ray

        for k in range(self.num_workers):
            if self.actors[k] is not None:
                ray.kill(self.actors[k], no_restart=True)
                self.actors[k] = None


def ray_pool(env_id: str, num_envs: int, ctx: dict, num_workers: int | None = None,
             num_cpus_per_worker: float | None = None, **kw: Any) -> RemotePool:  # fmt: skip
    """`make_pool(..., mode="ray")`: `num_workers` actors of `num_cpus_per_worker` CPUs each
    (default the manifest's `num_cpus`, else 0.25)."""
    opts = pop_pool_options(kw)
    cpus = num_cpus_per_worker or (ctx["manifest"].num_cpus if ctx["manifest"] else 0.25)
    t = RayTransport(env_id, num_envs, ctx["python"], ctx["spec"], num_workers, cpus)
    return RemotePool(t, env_id, num_envs, kw, mode="ray", **opts)
