"""`make_pool`: one pool interface, four isolation modes, chosen per env or per run.

    pool = make_pool("arborl/Maze-v0", 64, mode="subprocess", split="test")
    pool = make_pool("me/Counter-v0", 8)                       # the package's preferred mode
    pool = make_pool("me/Counter-v0", 8, mode="http", replicas=2)
    pool = make_pool("me/Counter-v0", 8, mode="http", urls=["http://10.0.0.5:8000"], token=T)

`inproc` is the plain `EnvPool`. The other three are a `RemotePool` over a transport:
worker processes on pipes (`subprocess`), Ray actors (`ray`) or HTTP env servers
(`http`: given `urls`, or `replicas` local servers the pool starts and stops itself). For
an env from a registered package, workers and servers run in the package's isolated
interpreter (`arborl env setup ID` first); for a plain registry env, in this one.
Builders are registered by name, so a new mode is one `register_mode` call.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from arborl.envs.packages.manifest import MODES
from arborl.envs.pool import EnvPool

_BUILDERS: dict[str, Callable[..., Any]] = {}


def register_mode(name: str, builder: Callable[..., Any]) -> None:
    """`builder(env_id, num_envs, ctx, **options)` returns a pool (see `package_context`)."""
    _BUILDERS[name] = builder


def package_context(env_id: str) -> dict[str, Any]:
    """The package facts of `env_id`: its manifest, interpreter and registry spec."""
    from arborl.envs.packages.isolate import interpreter_for
    from arborl.envs.packages.userdata import package_of

    m = package_of(env_id)
    if m is None:
        return {"manifest": None, "python": None, "spec": None}
    e = m.env(env_id)
    spec = {"id": e.id, "entry_point": e.entry_point, "kwargs": e.kwargs,
            "max_turns": e.max_turns, "description": e.description}  # fmt: skip
    return {"manifest": m, "python": str(interpreter_for(env_id).python), "spec": spec}


def _inproc(env_id: str, num_envs: int, ctx: dict, **kw: Any) -> EnvPool:
    for key in ("timeout_s", "max_env_errors"):
        kw.pop(key, None)  # in-process calls cannot time out or crash separately
    if ctx["manifest"] is not None:
        from arborl.envs.packages.userdata import register_package_envs

        register_package_envs()  # the host must be able to import the env's module itself
    return EnvPool(env_id, num_envs, **kw)


def _pool_opts(kw: dict) -> dict:
    return {k: kw.pop(k) for k in ("timeout_s", "max_env_errors") if k in kw}


def _subprocess(env_id: str, num_envs: int, ctx: dict, num_workers: int | None = None,
                **kw: Any) -> Any:  # fmt: skip
    from arborl.envs.remote.base import RemotePool
    from arborl.envs.remote.subproc import SubprocessTransport

    opts = _pool_opts(kw)
    t = SubprocessTransport(env_id, num_envs, ctx["python"], ctx["spec"], num_workers)
    return RemotePool(t, env_id, num_envs, kw, mode="subprocess", **opts)


def _ray(env_id: str, num_envs: int, ctx: dict, num_workers: int | None = None,
         num_cpus_per_worker: float | None = None, **kw: Any) -> Any:  # fmt: skip
    from arborl.envs.remote.base import RemotePool
    from arborl.envs.remote.ray_pool import RayTransport

    opts = _pool_opts(kw)
    cpus = num_cpus_per_worker or (ctx["manifest"].num_cpus if ctx["manifest"] else 0.25)
    t = RayTransport(env_id, num_envs, ctx["python"], ctx["spec"], num_workers, cpus)
    return RemotePool(t, env_id, num_envs, kw, mode="ray", **opts)


def _http(env_id: str, num_envs: int, ctx: dict, urls: list[str] | None = None,
          token: str | None = None, replicas: int = 1, **kw: Any) -> Any:  # fmt: skip
    from arborl.envs.remote.base import RemotePool
    from arborl.envs.remote.http_pool import HttpTransport

    opts = _pool_opts(kw)
    servers = None
    if not urls:
        from arborl.envs.remote.serve import ReplicaSet

        servers = ReplicaSet(env_id, replicas, python=ctx["python"], spec=ctx["spec"],
                             token=token, exit_with_parent=True).start()  # fmt: skip
        urls, token = servers.urls, servers.token
    t = HttpTransport(urls, token or "", owned_servers=servers)
    try:
        return RemotePool(t, env_id, num_envs, kw, mode="http", **opts)
    except BaseException:
        t.close()
        raise


register_mode("inproc", _inproc)
register_mode("subprocess", _subprocess)
register_mode("ray", _ray)
register_mode("http", _http)
assert set(_BUILDERS) == set(MODES)


def make_pool(env_id: str, num_envs: int, mode: str | None = None, **kwargs: Any) -> Any:
    """A pool of `num_envs` instances of `env_id` in isolation `mode`.

    `mode=None` takes the env package's preferred mode (`inproc` for plain envs). Options
    by mode: all remote modes take `timeout_s` (per call, default 30) and
    `max_env_errors` (failed calls before the run stops, default 100); `subprocess` and
    `ray` take `num_workers` (processes or actors; envs are spread over them), `ray`
    `num_cpus_per_worker` (fractional; default the manifest's `num_cpus`, else 0.25);
    `http` takes `urls` and `token`, or `replicas` local servers. Other kwargs go to the
    env's constructor.
    """
    ctx = package_context(env_id)
    if mode is None:
        mode = ctx["manifest"].isolation if ctx["manifest"] else "inproc"
    if mode not in _BUILDERS:
        close = difflib.get_close_matches(str(mode), list(_BUILDERS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"pool mode={mode!r} is unknown.{hint} Known: {sorted(_BUILDERS)}")
    return _BUILDERS[mode](env_id, num_envs, ctx, **kwargs)
