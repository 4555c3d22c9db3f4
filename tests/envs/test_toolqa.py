"""ToolQA: the safe calculator, hand-checked problems, answers, limits and the oracle."""

from __future__ import annotations

import pytest

from arborl.envs import make, split_of
from arborl.envs.builtin._safe_calc import CalcError, evaluate, format_number, parse_number
from arborl.envs.builtin.toolqa import TEMPLATES, ToolQAEnv, solve

from ._fuzz import fuzz_actions

# 137 notebooks at $3.47 = 475.39; 248 pens at $1.29 = 319.92; minus a $25 coupon:
# 475.39 + 319.92 - 25 = 770.31.
SHOPPING = {
    "template": "shopping",
    "params": {
        "item_a": "notebooks",
        "price_a": 3.47,
        "qty_a": 137,
        "item_b": "pens",
        "price_b": 1.29,
        "qty_b": 248,
        "coupon": 25,
    },
}


def _fuzz_actions(num: int, seed: int) -> list[str]:
    specials = ["", " ", "answer[]", "calculator[", "1" * 10_000, "calculator[" + "(" * 5000 + "]"]
    return fuzz_actions("0123456789+-*/%().e calcanswer[]", specials, num, seed)


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("2+3*4", 14),
        ("(2+3)*4", 20),
        ("7//2 + 7%2", 4),
        ("-2**2", -4),  # unary minus binds looser than **, as in Python
        ("1.5e3/4", 375.0),
        ("2**10", 1024),
        (" 10 / 4 ", 2.5),
    ],
)
def test_calculator_values(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("9**9**9", "exponent"),
        ("10**18*100", "magnitude"),
        ("1/0", "division by zero"),
        ("2^3", "use \\*\\* for powers"),
        ("__import__('os')", "function calls"),
        ("x+1", "no names"),
        ("1,234+1", "remove the commas"),
        ("", "empty"),
        ("1+" * 300 + "1", "limit is 500"),
        ("((1)", "cannot parse"),
        ("(-8)**0.5", "fractional power"),
        ("1e309", "finite"),
        ("True+1", "not a number"),
        ("[1][0]", "unsupported syntax"),
    ],
)
def test_calculator_refuses_with_a_reason(expr, why):
    with pytest.raises(CalcError, match=why):
        evaluate(expr)


def test_number_formatting_and_parsing():
    assert (
        format_number(3) == "3" and format_number(2.0) == "2" and format_number(0.1 + 0.2) == "0.3"
    )
    assert format_number(1 / 3) == "0.333333333333"
    assert parse_number(" $1,234.50 ") == 1234.5 and parse_number("1.5e3") == 1500.0
    assert (
        parse_number("twelve") is None and parse_number("nan") is None and parse_number("") is None
    )


def test_hand_worked_shopping_task():
    question, steps, gold = solve(SHOPPING)
    assert "137 notebooks at $3.47" in question and "$25 discount" in question
    assert steps[:2] == ["137*3.47", "248*1.29"] and steps[2] == "475.39+319.92-25"
    assert gold == pytest.approx(770.31, rel=1e-12)


def test_calculator_then_answer():
    env = ToolQAEnv()
    obs, info = env.reset(options={"task": SHOPPING})
    assert obs.startswith("Question: A school buys 137 notebooks")
    obs, r, term, trunc, info = env.step("calculator[137*3.47 + 248*1.29 - 25]")
    assert obs == "137*3.47 + 248*1.29 - 25 = 770.31" and info["valid_action"] and not term
    obs, r, term, trunc, info = env.step("calculator[1/0]")
    assert "division by zero" in obs and not info["valid_action"]
    obs, r, term, trunc, info = env.step("answer[$770.31]")
    assert (r, term, info["won"]) == (1.0, True, True)


def test_wrong_answer_ends_with_zero_and_tolerance_is_relative():
    env = ToolQAEnv()
    env.reset(options={"task": SHOPPING})
    assert env.step("answer[770.3105]")[1:3] == (1.0, True)  # 0.0005/770.31 = 6.5e-7 <= 1e-6
    env.reset(options={"task": SHOPPING})
    obs, r, term, trunc, info = env.step("answer[770.32]")  # 1.3e-5 relative: wrong
    assert (r, term, info["won"]) == (0.0, True, False) and "wrong" in obs
    env.reset(options={"task": SHOPPING})
    obs, r, term, trunc, info = env.step("answer[about 770]")
    assert not term and not info["valid_action"] and "single number" in obs


def test_free_form_task_and_bad_tasks():
    env = ToolQAEnv()
    env.reset(options={"task": {"question": "What is 6 times 7?", "answer": 42}})
    assert env.oracle_action() == "answer[42]" and env.step("answer[42]")[1] == 1.0
    with pytest.raises(ValueError, match="'answer'='lots' is not a number"):
        env.reset(options={"task": {"question": "?", "answer": "lots"}})
    with pytest.raises(ValueError, match="template='nope' is unknown"):
        env.reset(options={"task": {"template": "nope", "params": {}}})
    with pytest.raises(ValueError, match="lack 'coupon'"):
        params = {k: v for k, v in SHOPPING["params"].items() if k != "coupon"}
        env.reset(options={"task": {"template": "shopping", "params": params}})
    with pytest.raises(
        ValueError, match=r"templates=\['shopping', 'nope'\] has unknown .*\['nope'\]"
    ):
        ToolQAEnv(templates=["shopping", "nope"])
    with pytest.raises(ValueError, match="no names"):
        ToolQAEnv(templates=[])
    with pytest.raises(TypeError):
        ToolQAEnv(difficulty=3)


def test_every_template_needs_several_operations_and_big_numbers():
    env = ToolQAEnv(split="train")
    for seed in range(80):
        env.reset(seed=seed)
        num_ops = sum(s.count(op) for s in env.steps for op in "+-*/")
        assert num_ops >= 2 and len(env.steps) >= 2 and split_of(env.task) == "train"
    assert {ToolQAEnv(templates=[t]).reset(seed=1) and t for t in TEMPLATES} == set(TEMPLATES)


def test_oracle_solves_every_test_task():
    env = make("arborl/ToolQA-v0", split="test")
    wins = 0
    for seed in range(100):
        env.reset(seed=seed)
        while not env.done:
            *_, info = env.step(env.oracle_action())
        wins += info["won"]
        assert env.turn == len(env.steps) + 1  # one calculator call per step, then answer
    assert wins == 100


def test_snapshot_restore_replays_and_oracle_resumes():
    env = ToolQAEnv()
    env.reset(options={"task": SHOPPING})
    env.step(env.oracle_action())
    snap = env.snapshot()
    actions = ["calculator[2**5]", "oops", env.oracle_action(), "calculator[248*1.29]"]
    first = [env.step(a) for a in actions]
    env.restore(snap)
    assert [env.step(a) for a in actions] == first
    env.restore(snap)
    assert env.oracle_action() == "calculator[248*1.29]"
    assert first[0][4]["anchor"] == (env._task_id(env.task), ("32", "475.39"), False)


def test_any_action_string_is_handled():
    env = ToolQAEnv()
    env.reset(seed=0)
    num_valid = 0
    for action in _fuzz_actions(1000, seed=2):
        if env.done:
            env.reset(seed=0)
        obs, r, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and len(obs) < 400
        num_valid += info["valid_action"]
    assert num_valid == 0
