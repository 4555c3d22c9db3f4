"""Text environments: the `Env` protocol, the registry, built-in envs, checks and pools.

    from arborl.envs import make, check_env
    env = make("arborl/Maze-v0", split="test")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("up")
    check_env("arborl/Maze-v0")  # raises EnvCheckError listing every failure
    pool = make_pool("arborl/Maze-v0", 8, mode="subprocess")  # or inproc, ray, http

Built-in envs are registered on import (as strings; their modules load on `make`), and
plug-in ids of the `arborl.envs` entry-point group are mirrored into Gymnasium then too.
"""

from arborl.envs.base import INFO_KEYS, SPLITS, Env, TextEnv
from arborl.envs.builtin import register_builtin_envs
from arborl.envs.check import EnvCheckError, check_env
from arborl.envs.modes import make_pool
from arborl.envs.pool import EnvPool, Pool, StepResult
from arborl.envs.registry import (
    EnvSpec,
    make,
    mirror_entry_points,
    register,
    registered_ids,
    spec,
)
from arborl.envs.remote.base import (
    EnvCallError,
    EnvCreateError,
    EnvErrorBudgetExceeded,
    RemotePool,
)
from arborl.envs.splits import split_of, task_id_of

register_builtin_envs()
mirror_entry_points()  # plug-in ids reach gymnasium.make now; their modules load on make

__all__ = [
    "INFO_KEYS",
    "SPLITS",
    "RemotePool",
    "Env",
    "EnvCallError",
    "EnvCreateError",
    "EnvCheckError",
    "EnvErrorBudgetExceeded",
    "EnvPool",
    "EnvSpec",
    "Pool",
    "StepResult",
    "TextEnv",
    "check_env",
    "make",
    "make_pool",
    "register",
    "registered_ids",
    "spec",
    "split_of",
    "task_id_of",
]
