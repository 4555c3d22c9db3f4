"""The `Pool` conformance check shared by the mode tests: `isinstance` against the
runtime-checkable protocol, then a rollout through a view of the pool that has the
protocol's members and nothing else, so the rollout loop cannot lean on one pool's extras."""

from __future__ import annotations

from typing import Any

from arborl.envs import Pool
from arborl.rollout import RolloutConfig
from arborl.rollout.loop import run_episodes_with_policy
from arborl.rollout.policies import OraclePolicy

POOL_MEMBERS = ("__len__", "__getitem__", "active", "done", "reset", "step", "close")


class ProtocolOnly:
    """`pool` seen through exactly the `Pool` protocol (any other attribute is an error)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def __len__(self) -> int:
        return len(self._pool)

    def __getitem__(self, i: int) -> Any:
        return self._pool[i]

    def __getattr__(self, name: str) -> Any:
        if name not in POOL_MEMBERS:
            raise AttributeError(f"{name!r} is not a member of the Pool protocol")
        return getattr(self._pool, name)


def check_pool_protocol(pool: Any) -> None:
    """`pool` (4 envs of arborl/Maze-v0, split test) satisfies `Pool` and drives a rollout."""
    own = {n for n in vars(Pool) if not n.startswith("_")} | {"__len__", "__getitem__"}
    assert own == set(POOL_MEMBERS), "POOL_MEMBERS must list the protocol's members"
    assert isinstance(pool, Pool)
    for name in POOL_MEMBERS:
        assert getattr(type(pool), name, None) is not None, f"{type(pool).__name__}.{name}"
    cfg = RolloutConfig(num_tasks=2, group_size=2, seed=5)
    got = run_episodes_with_policy(OraclePolicy(), ProtocolOnly(pool), None, cfg, split="test")
    assert got.stats["success"] == 1.0 and len(got.trajectories) == 4
