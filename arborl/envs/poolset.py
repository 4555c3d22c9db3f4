"""`PoolSet`: the env pools of one run, built on first use, kept, and closed together.

A run needs a training pool (one env per episode of a step) and evaluation pools (one
env per held-out episode of a chunk), again and again. Building them per step or per
evaluation restarted their worker processes each time: on the real-benchmark packages a
worker takes 1-3 s to start, and a 16 x 8 BabyAI step started 128 of them. A `PoolSet`
keeps each pool it builds (keyed by split, size and env kwargs) for the whole run, and
in a mode with shared workers (`subprocess`: `arborl.envs.remote.subproc.EnvWorkers`)
puts every pool's envs into one group of `num_workers` processes, started once, all at
once. Ray pools take `num_workers` actors each; the other modes keep their pools only.

    with PoolSet("babyai/GoToLocal-v0", mode="subprocess", num_workers=2) as pools:
        train = pools.get(128, split="train")   # the same pool at every step
        test = pools.get(64, split="test")      # same processes, other sessions
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

from arborl.envs.modes import POOL_MODES, make_pool, package_context, resolve_mode
from arborl.envs.pool import Pool
from arborl.registry import Registry

WORKER_GROUPS: Registry = Registry("shared env workers", error=ValueError)
"""Pool mode -> `start(env_id, ctx, num_workers)`, a group of worker processes that the
mode's builder takes as `workers=` (modes without one get separate pools)."""
WORKER_GROUPS.register("subprocess", "arborl.envs.remote.subproc:subprocess_workers")


def default_num_workers() -> int:
    """One worker per CPU core this process may run on (`os.sched_getaffinity`, which a
    container's CPU limit narrows, unlike `os.cpu_count`)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class PoolSet:
    """Pools of `env_id` in `mode` (None or "auto": the env package's preferred mode)
    over `num_workers` shared workers (0: `default_num_workers()`). `options` go to every
    pool (`timeout_s`, `max_env_errors`, `urls`, `token`; see `make_pool`)."""

    def __init__(self, env_id: str, mode: str | None = None, num_workers: int = 0,
                 **options: Any) -> None:  # fmt: skip
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers!r} must be >= 0 (0: one per CPU core)")
        self.env_id, self.options = env_id, options
        self.ctx = package_context(env_id)
        self.mode = resolve_mode(env_id, mode, self.ctx)
        self.num_workers = num_workers or default_num_workers()
        self.workers: Any = None
        """The shared worker group (None until a pool needs it, or in a mode without)."""
        self.pools: dict[str, Pool] = {}
        self.closed = False

    def get(self, num_envs: int, split: str = "train", **env_kwargs: Any) -> Pool:
        """The pool of `num_envs` envs of `split` (built with `env_kwargs` the first time
        this size, split and kwargs are asked for; the same object afterwards)."""
        if self.closed:
            raise RuntimeError(f"the pools of {self.env_id!r} were closed; build a new PoolSet")
        key = json.dumps([split, num_envs, env_kwargs], sort_keys=True, default=repr)
        if key not in self.pools:
            self.pools[key] = self._build(num_envs, split, env_kwargs)
        return self.pools[key]

    def _build(self, num_envs: int, split: str, env_kwargs: dict[str, Any]) -> Pool:
        opts: dict[str, Any] = {**self.options, **env_kwargs, "split": split}
        if self.mode in WORKER_GROUPS:
            if self.workers is None:
                start = WORKER_GROUPS.get(self.mode)
                self.workers = start(self.env_id, self.ctx, self.num_workers)
            opts["workers"] = self.workers
        elif "num_workers" in inspect.signature(POOL_MODES.get(self.mode)).parameters:
            opts["num_workers"] = self.num_workers
        return make_pool(self.env_id, num_envs, self.mode, **opts)

    def close(self) -> None:
        """Close every pool, then the shared workers (idempotent)."""
        if self.closed:
            return
        self.closed = True
        pools, self.pools = list(self.pools.values()), {}
        try:
            for pool in pools:
                pool.close()
        finally:
            if self.workers is not None:
                self.workers.close()

    def __enter__(self) -> PoolSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
