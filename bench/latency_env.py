"""`bench/SlowMaze-v0`: Maze whose every step sleeps a heavy-tailed latency (mean 100 ms).

Stands in for an env whose step waits on something outside Python (a simulator, a JVM, a
remote sandbox): the sleep holds no CPU and no GIL. Latencies are lognormal with sigma 1.0
scaled to a mean of `mean_s` (median 61 ms, p99 ~0.6 s, the longest of 64 draws ~0.5 s),
drawn from a generator seeded by the reset seed and the instance, so they never touch the
episode itself: the observations, rewards and ends are exactly Maze's.

    import latency_env; latency_env.register_env()   # then make_pool("bench/SlowMaze-v0", ...)
"""

from __future__ import annotations

import itertools
import math
import random
import time
from typing import Any

from arborl.envs import make, register

ENV_ID = "bench/SlowMaze-v0"
_instances = itertools.count()


class SlowMaze:
    """`arborl/Maze-v0` with a sleep before each step's reply."""

    def __init__(self, mean_s: float = 0.1, sigma: float = 1.0, **maze_kwargs: Any) -> None:
        self.inner = make("arborl/Maze-v0", **maze_kwargs)
        self.mu = math.log(mean_s) - sigma**2 / 2  # lognormal mean = exp(mu + sigma^2 / 2)
        self.sigma = sigma
        self.instance = next(_instances)
        self.rng = random.Random(self.instance)
        self.max_turns = self.inner.max_turns
        self.env_id = ENV_ID

    @property
    def instruction(self) -> str:
        return self.inner.instruction

    @property
    def task(self) -> Any:
        return self.inner.task

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.rng = random.Random(f"{seed}-{self.instance}")
        return self.inner.reset(seed=seed, options=options)

    def step(self, action: str):
        time.sleep(self.rng.lognormvariate(self.mu, self.sigma))
        return self.inner.step(action)

    def snapshot(self) -> Any:
        return self.inner.snapshot()

    def restore(self, state: Any) -> None:
        self.inner.restore(state)

    def oracle_action(self) -> str:
        return self.inner.oracle_action()

    def close(self) -> None:
        self.inner.close()


def register_env() -> None:
    """Register `bench/SlowMaze-v0` (a subprocess pool passes the spec to its workers)."""
    register(ENV_ID, entry_point="latency_env:SlowMaze", description=__doc__.splitlines()[0])
