"""Maze: moves, walls, invalid actions, compact observations, generation knobs, oracle."""

from __future__ import annotations

import pytest

from arborl.envs import make
from arborl.envs.builtin.maze import MazeEnv, bfs_distances, parse_direction

# A . #      agent (0,0), goal (2,2); wall column at (0,2), (1,2)
# . . #      shortest path: 4 moves (e.g. down, down, right, right)
# . . G
TASK = {"grid": ["..#", "..#", "..."], "agent": [0, 0], "goal": [2, 2]}


def test_parse_direction():
    assert parse_direction(" U ") == "up" and parse_direction("Left\n") == "left"
    assert parse_direction("r") == "right" and parse_direction("DOWN") == "down"
    assert parse_direction("go up") is None and parse_direction("") is None


def test_moves_walls_and_goal():
    env = MazeEnv()
    obs, info = env.reset(options={"task": TASK})
    assert obs == "A.#\n..#\n..G" and info["anchor"] == (info["task_id"], (0, 0))
    obs, r, term, trunc, info = env.step("right")
    assert obs == ".A#\n..#\n..G" and info["valid_action"]
    obs, r, term, trunc, info = env.step("r")  # into the wall: valid, no effect
    assert obs == ".A#\n..#\n..G" and info["valid_action"] and r == 0.0
    obs, r, term, trunc, info = env.step("up")  # off the grid: same as a wall
    assert env.pos == (0, 1) and info["valid_action"]
    obs, r, term, trunc, info = env.step("jump")
    assert not info["valid_action"] and env.pos == (0, 1) and obs.endswith(".A#\n..#\n..G")
    for move in ("d", "d"):
        env.step(move)
    obs, r, term, trunc, info = env.step(" RIGHT ")
    assert (r, term, trunc, info["won"]) == (1.0, True, False, True) and obs == "..#\n..#\n..A"


def test_truncation_at_max_turns():
    env = MazeEnv(max_turns=3)
    env.reset(options={"task": TASK})
    assert [env.step("left")[3] for _ in range(3)] == [False, False, True]


def test_bad_task_is_rejected():
    with pytest.raises(ValueError, match="not a free cell"):
        MazeEnv().reset(options={"task": {**TASK, "goal": [0, 2]}})
    with pytest.raises(ValueError, match="lacks key"):
        MazeEnv().reset(options={"task": {"grid": ["..."]}})


def test_observation_is_compact_and_generation_respects_knobs():
    env = make("arborl/Maze-v0")
    for seed in range(50):
        obs, info = env.reset(seed=seed)
        assert len(obs) == 41 and obs.count("A") == 1 and obs.count("G") == 1  # 6*6 + 5 newlines
        free = {
            (r, c)
            for r, row in enumerate(env.task["grid"])
            for c, ch in enumerate(row)
            if ch == "."
        }
        dist = bfs_distances(free, tuple(env.task["agent"]))[tuple(env.task["goal"])]
        assert 3 <= dist <= 12
    small = MazeEnv(size=4, wall_prob=0.0, min_path=5, max_path=6)
    obs, _ = small.reset(seed=1)
    assert len(obs.splitlines()) == 4 and "#" not in obs
    a, g = small.task["agent"], small.task["goal"]
    assert 5 <= abs(a[0] - g[0]) + abs(a[1] - g[1]) <= 6  # no walls: Manhattan distance


def test_knob_errors_name_the_value():
    with pytest.raises(ValueError, match="wall_prob=1.5"):
        MazeEnv(wall_prob=1.5)
    with pytest.raises(ValueError, match="min_path <= max_path"):
        MazeEnv(min_path=5, max_path=2)


def test_oracle_shortest_path_and_after_restore():
    env = MazeEnv()
    env.reset(options={"task": TASK})
    snap = env.snapshot()
    env.step("right")
    env.restore(snap)
    steps = 0
    while not env.done:
        *_, info = env.step(env.oracle_action())
        steps += 1
    assert info["won"] and steps == 4  # the BFS shortest path


def test_potential_is_minus_the_bfs_distance_and_rises_along_the_oracle_path():
    from arborl.envs import make

    env = make("arborl/Maze-v0")
    _, info = env.reset(seed=3)
    phis = [info["potential"]]
    done = False
    while not done:
        _, _, done, trunc, info = env.step(env.oracle_action())
        phis.append(info["potential"])
        done = done or trunc
    # Each oracle move is one BFS step closer: phi goes -d, -d+1, ..., 0.
    assert phis == [float(-k) for k in range(len(phis) - 1, -1, -1)]
