"""`make_pool`: one `Pool` interface, five modes (four isolations and OpenEnv), chosen per env or per run.

    pool = make_pool("arborl/Maze-v0", 64, mode="subprocess", split="test")
    pool = make_pool("me/Counter-v0", 8)                       # the package's preferred mode
    pool = make_pool("me/Counter-v0", 8, mode="http", replicas=2)
    pool = make_pool("me/Counter-v0", 8, mode="http", urls=["http://10.0.0.5:8000"], token=T)
    pool = make_pool("arborl/Maze-v0", 8, mode="openenv", urls=["http://127.0.0.1:8000"], token=T)

`inproc` is the plain `EnvPool`. The others are a `RemotePool` over a transport:
worker processes on pipes (`subprocess`), Ray actors (`ray`) or HTTP env servers
(`http`: given `urls`, or `replicas` local servers the pool starts and stops itself), and
`openenv` drives OpenEnv servers (WebSocket sessions on the given `urls`). For
an env from a registered package, workers and servers run in the package's isolated
interpreter (`arborl env setup ID` first); for a plain registry env, in this one.

Modes are a `Registry` of pool builders, `builder(env_id, num_envs, ctx, **options)`
(`ctx`: see `package_context`). Each remote builder lives beside its transport in
`arborl.envs.remote` and is registered as a lazy `"module:attr"` string, so importing
`arborl.envs` imports neither ray nor an HTTP client; a new mode is one `register_mode`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arborl.envs.packages.manifest import MODES
from arborl.envs.pool import EnvPool, Pool
from arborl.envs.remote.base import SETUP_ERRORS, EnvCreateError, pop_pool_options
from arborl.registry import Registry

POOL_MODES: Registry[Callable[..., Pool]] = Registry(
    "pool mode",
    error=ValueError,
    message="pool mode={name} is unknown.{hint} Known: {known}",
)
"""Mode name -> pool builder (or its `"module:attr"`, imported on first use)."""


def register_mode(name: str, builder: Callable[..., Pool] | str) -> None:
    """`builder(env_id, num_envs, ctx, **options)` returns a `Pool` (see `package_context`);
    a `"module:attr"` string is imported the first time the mode is asked for."""
    POOL_MODES.register(name, builder)


def package_context(env_id: str) -> dict[str, Any]:
    """The package facts of `env_id`: its manifest, interpreter and registry spec."""
    from arborl.envs.packages.isolate import interpreter_for
    from arborl.envs.packages.userdata import package_of

    m = package_of(env_id)
    if m is None:
        return {"manifest": None, "python": None, "spec": _registered_spec(env_id)}
    e = m.env(env_id)
    spec = {"id": e.id, "entry_point": e.entry_point, "kwargs": e.kwargs,
            "max_turns": e.max_turns, "description": e.description}  # fmt: skip
    return {"manifest": m, "python": str(interpreter_for(env_id).python), "spec": spec}


def _registered_spec(env_id: str) -> dict[str, Any] | None:
    """The spec of a plain env registered in this process under a `"module:attr"` entry
    point outside arborl (e.g. a script's or a test's own env), so that worker processes,
    which know only the built-ins and entry-point plug-ins, register it too (its module must
    be importable there: on the PYTHONPATH they inherit). None for the rest."""
    from arborl.envs.registry import spec

    try:
        s = spec(env_id)
    except KeyError:
        return None
    if not isinstance(s.entry_point, str) or s.entry_point.startswith("arborl."):
        return None
    return {"id": s.id, "entry_point": s.entry_point, "kwargs": s.kwargs,
            "max_turns": s.max_turns, "description": s.description}  # fmt: skip


def inproc_pool(env_id: str, num_envs: int, ctx: dict, **kw: Any) -> EnvPool:
    """`mode="inproc"`: an `EnvPool` in this process."""
    pop_pool_options(kw)  # in-process calls cannot time out or crash separately
    if ctx["manifest"] is not None:
        from arborl.envs.packages.userdata import register_package_envs

        register_package_envs()  # the host must be able to import the env's module itself
    try:
        return EnvPool(env_id, num_envs, **kw)
    except SETUP_ERRORS as e:  # e.g. its data is missing: the env's message, one line
        raise EnvCreateError(
            f"could not create the envs of {env_id} (inproc pool): {type(e).__name__}: {e}"
        ) from e


register_mode("inproc", inproc_pool)
register_mode("subprocess", "arborl.envs.remote.subproc:subprocess_pool")
register_mode("ray", "arborl.envs.remote.ray_pool:ray_pool")
register_mode("http", "arborl.envs.remote.http_pool:http_pool")
assert set(POOL_MODES.names()) == set(MODES), "the manifest's isolation modes are the pool's"
# `openenv` drives OpenEnv servers that someone else runs (given `urls`), so it is a pool
# mode but not an isolation a package can prefer: registered after the check above.
register_mode("openenv", "arborl.envs.remote.openenv_pool:openenv_pool")


def make_pool(env_id: str, num_envs: int, mode: str | None = None, **kwargs: Any) -> Pool:
    """A pool of `num_envs` instances of `env_id` in isolation `mode`.

    `mode=None` takes the env package's preferred mode (`inproc` for plain envs). Options
    by mode: all remote modes take `timeout_s` (per call, default 30) and
    `max_env_errors` (failed calls before the run stops, default 100); `subprocess` and
    `ray` take `num_workers` (processes or actors; envs are spread over them), `ray`
    `num_cpus_per_worker` (fractional; default the manifest's `num_cpus`, else 0.25);
    `http` takes `urls` and `token`, or `replicas` local servers; `openenv` takes `urls`,
    `token`, `action_key` and `text_key` (see `arborl.envs.remote.openenv_pool`). Other
    kwargs go to the env's constructor.
    """
    ctx = package_context(env_id)
    mode = resolve_mode(env_id, mode, ctx)
    builder = POOL_MODES.get(mode)  # an unknown mode raises ValueError listing the known
    return builder(env_id, num_envs, ctx, **kwargs)


def resolve_mode(env_id: str, mode: str | None, ctx: dict[str, Any] | None = None) -> str:
    """The pool mode `make_pool` uses: `mode`, or for None or "auto" the env package's
    preferred isolation ("inproc" for a plain env). `ctx`: `package_context(env_id)`."""
    if mode is not None and mode != "auto":
        return mode
    manifest = (ctx or package_context(env_id))["manifest"]
    return manifest.isolation if manifest else "inproc"
