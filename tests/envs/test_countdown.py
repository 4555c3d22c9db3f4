"""Countdown / Game24: arithmetic rules, win and loss, legal moves, DFS oracle."""

from __future__ import annotations

import pytest

from arborl.envs import make
from arborl.envs.builtin.countdown import CountdownEnv, apply_op, legal_moves, solve


def test_apply_op_rules():
    assert apply_op(8, "-", 3) == 5 and apply_op(3, "-", 3) is None  # results stay > 0
    assert apply_op(8, "/", 2) == 4 and apply_op(3, "/", 2) is None  # exact division only
    assert apply_op(7, "*", 6) == 42 and apply_op(7, "+", 6) == 13


def test_win_when_target_appears():
    env = CountdownEnv()
    obs, info = env.reset(options={"task": {"numbers": [2, 3, 4, 6], "target": 24}})
    assert obs == "Numbers: 2 3 4 6. Target: 24."
    obs, r, term, _, info = env.step("4 * 6")
    assert obs == "Numbers: 2 3 24. Target: 24." and (r, term, info["won"]) == (1.0, True, True)


@pytest.mark.parametrize(
    "action, valid",
    [
        ("5 + 1", False),  # 5 is not among the numbers
        ("3 - 4", False),  # would be negative
        ("3 / 2", False),  # not exact
        ("2 + 2", False),  # only one 2
        ("6 / 3 = 3", False),  # wrong claimed result
        ("6 / 3 = 2", True),
        ("6÷3", True),
        (" 2 x 3 ", True),
        ("two plus three", False),
    ],
)
def test_action_validity(action, valid):
    env = CountdownEnv()
    env.reset(options={"task": {"numbers": [2, 3, 4, 6], "target": 100}})
    *_, info = env.step(action)
    assert info["valid_action"] is valid
    assert len(env.numbers) == (3 if valid else 4)


def test_loss_when_one_wrong_number_left():
    env = CountdownEnv()
    env.reset(options={"task": {"numbers": [1, 2], "target": 10}})
    assert env._available_actions() == ["2 + 1", "2 - 1", "2 * 1", "2 / 1"]
    _, r, term, _, info = env.step("2 + 1")
    assert (r, term, info["won"], env.numbers) == (0.0, True, False, (3,))


def test_legal_moves_and_solver():
    assert [a for a, _ in legal_moves((2, 3))] == ["3 + 2", "3 - 2", "3 * 2"]
    plan = solve((1, 2, 3, 4), 24)
    assert plan is not None and len(plan) <= 3
    assert solve((1, 1, 1, 1), 24) is None  # at most (1+1)*(1+1) = 4


def test_generated_tasks():
    env = make("arborl/Countdown-v0")
    for seed in range(30):
        env.reset(seed=seed)
        t = env.task
        assert len(t["numbers"]) == 4 and all(1 <= n <= 13 for n in t["numbers"])
        assert 10 <= t["target"] <= 100 and t["target"] not in t["numbers"]
    env24 = make("arborl/Game24-v0")
    for seed in range(30):
        env24.reset(seed=seed)
        assert env24.task["target"] == 24 and solve(tuple(env24.task["numbers"]), 24)


def test_oracle_after_a_detour_and_restore():
    env = CountdownEnv()
    env.reset(options={"task": {"numbers": [2, 3, 4, 6], "target": 24}})
    snap = env.snapshot()
    env.step("2 + 3")  # 4 5 6: 4*6 still works
    assert env.oracle_action() in {a for a, _ in legal_moves(env.numbers)}
    env.restore(snap)
    assert env.numbers == (2, 3, 4, 6)
    while not env.done:
        *_, info = env.step(env.oracle_action())
    assert info["won"]
