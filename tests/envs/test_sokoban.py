"""Sokoban: pushes, blocked pushes, win, the BFS solver, generation and the oracle."""

from __future__ import annotations

import pytest

from arborl.envs import make
from arborl.envs.builtin.sokoban import SokobanEnv, solve

# ######
# #____#
# #@$_.#     player (2,1), box (2,2), target (2,4): two pushes right solve it
# #____#
# ######
TASK = {
    "grid": ["######", "#____#", "#___.#", "#____#", "######"],
    "player": [2, 1],
    "boxes": [[2, 2]],
}


def _walls_targets(task):
    return SokobanEnv._layout(task)


def test_push_to_target_wins():
    env = SokobanEnv()
    obs, info = env.reset(options={"task": TASK})
    assert obs.splitlines()[2] == "#@$_.#"
    obs, r, term, _, info = env.step("right")
    assert obs.splitlines()[2] == "#_@$.#" and (r, term) == (0.0, False)
    obs, r, term, _, info = env.step("R")
    assert obs.splitlines()[2] == "#__@*#" and (r, term, info["won"]) == (1.0, True, True)
    assert info["anchor"] == (info["task_id"], (2, 3), ((2, 4),))


def test_blocked_push_and_step_penalty():
    env = SokobanEnv(step_penalty=0.1)
    env.reset(options={"task": {**TASK, "player": [1, 2]}})
    _, r, _, _, info = env.step("down")  # pushes the box to (3,2)
    assert env.boxes == ((3, 2),) and r == pytest.approx(-0.1)
    _, _, _, _, info = env.step("down")  # box against the wall: nothing moves, still valid
    assert env.boxes == ((3, 2),) and env.player == (2, 2) and info["valid_action"]
    _, r, _, _, info = env.step("pull")
    assert not info["valid_action"] and r == 0.0


def test_solver():
    walls, targets = _walls_targets(TASK)
    assert solve(walls, targets, ((2, 1), ((2, 2),))) == ["right", "right"]
    # Box in the corner (1,1): no push can ever move it out -> unsolvable.
    assert solve(walls, targets, ((2, 2), ((1, 1),))) is None


def test_oracle_on_deadlock_and_after_restore():
    env = SokobanEnv()
    env.reset(options={"task": {**TASK, "player": [2, 2], "boxes": [[1, 1]]}})
    assert env.oracle_action() == "up"  # no solution: any legal move
    env.reset(options={"task": TASK})
    snap = env.snapshot()
    env.step("up")
    env.restore(snap)
    assert env.oracle_action() == "right"


def test_generated_rooms_are_solvable_within_knobs():
    env = SokobanEnv(num_boxes=2)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        assert len(obs.splitlines()) == 8 and obs.count("$") + obs.count("*") == 2
        walls, targets = _walls_targets(env.task)
        plan = solve(walls, targets, (env.player, env.boxes))
        assert plan is not None and 3 <= len(plan) <= 20


def test_knob_errors():
    with pytest.raises(ValueError, match="num_boxes=3"):
        SokobanEnv(num_boxes=3)


@pytest.mark.parametrize("num_boxes, num_tasks", [(1, 100), (2, 30)])
def test_oracle_wins_every_test_task(num_boxes, num_tasks):
    env = make("arborl/Sokoban-v0", split="test", num_boxes=num_boxes)
    wins = 0
    for seed in range(num_tasks):
        env.reset(seed=seed)
        while not env.done:
            *_, info = env.step(env.oracle_action())
        wins += info["won"]
    assert wins == num_tasks
