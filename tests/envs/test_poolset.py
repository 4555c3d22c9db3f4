"""`PoolSet`: a run's pools are built once, share one group of worker processes (started
once, all at once), and are closed together, leaving no process behind. Process starts
are counted by wrapping `subprocess.Popen` in `arborl.envs.remote.subproc` (per test
process, so safe under pytest-xdist)."""

from __future__ import annotations

import os

import pytest

from arborl.envs.poolset import PoolSet, default_num_workers

MAZE = "arborl/Maze-v0"


def exited(pid: int) -> bool:
    """The process is gone (reaped by its `Popen`, or a zombie at most)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except FileNotFoundError:
        return True


def play(pool, seeds, group_size=1, turns=2):
    pool.reset(seeds, group_size)
    for _ in range(turns):
        if pool.active:
            pool.step({i: "up" for i in pool.active})


def test_pools_of_a_run_share_workers_started_once(starts):
    with PoolSet(MAZE, mode="subprocess", num_workers=2, timeout_s=20) as pools:
        train = pools.get(6, "train", short_actions=True)
        assert len(starts) == 2  # both at once, for the first pool's envs
        for step in range(3):
            assert pools.get(6, "train", short_actions=True) is train
            play(train, [step, step + 10], group_size=3)
        test = pools.get(4, "test", short_actions=True)  # an evaluation's chunk
        play(test, [1, 2, 3, 4])
        assert test is not train and test.transport.group is train.transport.group
        assert [e.env_id for e in (train[0], test[0])] == [MAZE, MAZE]
        play(train, [7, 8], group_size=3)  # training goes on beside the evaluation pool
        assert len(starts) == 2 and pools.workers.num_starts == 2
        assert {train.transport.where(i) for i in range(6)} == {f"worker pid {p}" for p in starts}
    assert all(exited(pid) for pid in starts)
    with pytest.raises(RuntimeError, match="were closed"):
        pools.get(6, "train")


def test_a_worker_found_dead_is_restarted_for_every_pool(starts):
    with PoolSet(MAZE, mode="subprocess", num_workers=2, timeout_s=20) as pools:
        train, test = pools.get(4, "train"), pools.get(2, "test")
        play(train, [1, 2, 3, 4])
        os.kill(starts[0], 9)
        os.waitpid(starts[0], 0)
        play(train, [5, 6, 7, 8])  # reset rebuilds the lost envs in a new worker 0
        play(test, [1, 2])  # its env on worker 0 was lost too: rebuilt, not an error
        assert len(starts) == 3 and pools.workers.num_restarts == 1
        assert test.num_env_errors == 0
    assert all(exited(pid) for pid in starts)


def test_num_workers_zero_means_one_per_core_and_negative_fails():
    assert PoolSet(MAZE, num_workers=0).num_workers == default_num_workers() >= 1
    with pytest.raises(ValueError, match="num_workers=-1 must be >= 0"):
        PoolSet(MAZE, num_workers=-1)


def test_inproc_pools_are_kept_too():
    with PoolSet(MAZE) as pools:
        assert pools.mode == "inproc" and pools.get(2) is pools.get(2)
        assert pools.get(2, "test") is not pools.get(2) and pools.workers is None
