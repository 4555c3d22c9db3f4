"""EnvPool: grouped resets share a task, only active envs step, no auto-reset."""

from __future__ import annotations

import pytest

from arborl.envs import EnvPool
from arborl.envs.builtin.maze import MazeEnv

TASK = {"grid": ["..#", "..#", "..."], "agent": [0, 0], "goal": [2, 2]}


def test_groups_share_tasks():
    pool = EnvPool("arborl/Maze-v0", 6, split="test")
    obs, infos = pool.reset(seeds=[1, 2, 3], group_size=2)
    assert [i["group_id"] for i in infos] == [0, 0, 1, 1, 2, 2]
    assert [i["env_index"] for i in infos] == list(range(6))
    ids = [i["task_id"] for i in infos]
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[4] == ids[5] and obs[0] == obs[1]
    assert len({ids[0], ids[2], ids[4]}) == 3
    assert pool.active == list(range(6)) and all(e.split == "test" for e in pool.envs)


def test_step_only_given_envs_and_no_auto_reset():
    pool = EnvPool(lambda: MazeEnv(max_turns=5), 3)
    assert pool.active == []  # nothing runs before reset
    pool.reset(seeds=[0, 0, 0], options={"task": TASK})
    results, done = pool.step(["down", None, "nonsense"])
    assert results[1] is None and pool.envs[1].turn == 0
    assert results[0].info["valid_action"] and not results[2].info["valid_action"]
    assert results[0].obs == "..#\nA.#\n..G" and done == [False, False, False]
    for action in ("down", "right", "right"):  # env 0 reaches G after 4 moves in all
        results, done = pool.step({0: action})
    assert results[0].reward == 1.0 and results[0].terminated and done == [True, False, False]
    assert pool.active == [1, 2]
    with pytest.raises(ValueError, match="env 0 is done"):
        pool.step({0: "up"})
    obs, reward, terminated, truncated, info = pool.step({2: "up"})[0][2]  # unpacks like gym
    assert info["group_id"] == 2 and not terminated
    pool.close()
    assert all(e._closed for e in pool.envs)


def test_argument_errors():
    pool = EnvPool("arborl/Maze-v0", 4)
    with pytest.raises(ValueError, match="one seed per group"):
        pool.reset(seeds=[0, 1, 2, 3], group_size=2)
    with pytest.raises(ValueError, match="divide num_envs=4"):
        pool.reset(seeds=[0], group_size=3)
    pool.reset(seeds=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="got 2 actions for 4 envs"):
        pool.step(["up", "up"])
    with pytest.raises(TypeError, match="bind them"):
        EnvPool(MazeEnv, 2, size=4)
