"""ToolQA: multi-step arithmetic word problems solved with a calculator tool.

Each task is a template name plus its numbers (JSON), e.g. a shopping bill with a coupon or
a fuel cost with a unit conversion. Numbers are drawn large and awkward (3-4 significant
digits, decimals) so that mental arithmetic is unreliable and the calculator is worth
calling. Every template also carries its solution as a plan of 2-3 calculator steps; the
gold answer is computed by running that plan through the same safe evaluator the agent
uses, so the oracle and the grader can never disagree.

Actions: `calculator[expression]` (see `arborl.envs.builtin._safe_calc`) and `answer[number]`,
which ends the episode with reward 1 if within a relative tolerance of 1e-6 of the gold
answer. A task may also be given explicitly as `{"question": str, "answer": number}`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

from arborl.envs.base import TextEnv
from arborl.envs.builtin._safe_calc import CalcError, evaluate, format_number, parse_number
from arborl.envs.splits import chosen_templates, sample_in_split, task_id_of

REL_TOL = 1e-6
"""Relative tolerance of `answer[...]` against the gold answer."""

_ACTION_RE = re.compile(r"^\s*(calculator|calc|answer)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)

_ITEMS = ["notebooks", "pens", "folders", "calculators", "rulers", "markers", "staplers"]


def _money(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), 2)


def _draw_shopping(rng: random.Random) -> dict[str, Any]:
    item_a, item_b = rng.sample(_ITEMS, 2)
    return {
        "item_a": item_a,
        "price_a": _money(rng, 1.05, 49.99),
        "qty_a": rng.randint(23, 480),
        "item_b": item_b,
        "price_b": _money(rng, 1.05, 49.99),
        "qty_b": rng.randint(23, 480),
        "coupon": rng.randint(10, 80),
    }


def _draw_production(rng: random.Random) -> dict[str, Any]:
    return {
        "rate": rng.randint(120, 1900),
        "hours": rng.randint(6, 22),
        "days": rng.randint(11, 60),
        "box": rng.randint(12, 48),
    }


def _draw_fuel(rng: random.Random) -> dict[str, Any]:
    return {
        "miles": rng.randint(120, 2400),
        "cons": round(rng.uniform(4.5, 12.9), 1),
        "price": _money(rng, 1.21, 2.19),
    }


def _draw_travel(rng: random.Random) -> dict[str, Any]:
    return {
        "dist": rng.randint(300, 4800),
        "speed": rng.randint(45, 280),
        "stops": rng.randint(2, 9),
        "stop_min": rng.randint(5, 55),
    }


def _draw_interest(rng: random.Random) -> dict[str, Any]:
    return {
        "principal": rng.randint(1200, 98000),
        "rate": rng.randint(5, 27) * 0.25,
        "years": rng.randint(2, 15),
        "fee": rng.randint(10, 250),
    }


def _draw_bill(rng: random.Random) -> dict[str, Any]:
    return {
        "cost": _money(rng, 150, 3900),
        "tip": rng.randint(10, 25),
        "people": rng.randint(3, 29),
    }


def _draw_paint(rng: random.Random) -> dict[str, Any]:
    return {
        "length": round(rng.uniform(3.2, 18.5), 1),
        "height": round(rng.uniform(2.4, 6.5), 1),
        "walls": rng.randint(2, 8),
        "coverage": round(rng.uniform(6.5, 12.5), 1),
        "coats": rng.randint(1, 3),
    }


def _draw_salary(rng: random.Random) -> dict[str, Any]:
    return {
        "hourly": round(rng.randint(50, 383) * 0.25, 2),
        "hours": rng.randint(20, 60),
        "weeks": rng.randint(40, 52),
        "tax": rng.randint(12, 38),
    }


# name -> (draw params, question format, solution steps). A step may use `{rN}`, the
# result of step N, and any parameter by name.
TEMPLATES: dict[str, tuple[Callable[[random.Random], dict[str, Any]], str, list[str]]] = {
    "shopping": (
        _draw_shopping,
        "A school buys {qty_a} {item_a} at ${price_a:.2f} each and {qty_b} {item_b} at "
        "${price_b:.2f} each, then applies a ${coupon} discount coupon. What is the total "
        "cost in dollars?",
        ["{qty_a}*{price_a}", "{qty_b}*{price_b}", "{r0}+{r1}-{coupon}"],
    ),
    "production": (
        _draw_production,
        "A factory makes {rate} widgets per hour and runs {hours} hours a day for {days} days. "
        "The widgets are packed in boxes of {box}. How many boxes can be filled completely?",
        ["{rate}*{hours}*{days}", "{r0}//{box}"],
    ),
    "fuel": (
        _draw_fuel,
        "A driver covers {miles} miles; one mile is 1.609344 km. The car uses {cons} litres "
        "per 100 km and fuel costs ${price:.2f} per litre. What does the fuel cost in dollars?",
        ["{miles}*1.609344", "{r0}*{cons}/100", "{r1}*{price}"],
    ),
    "travel": (
        _draw_travel,
        "A train travels {dist} km at an average of {speed} km/h while moving, and makes "
        "{stops} stops of {stop_min} minutes each. How many minutes does the trip take?",
        ["{dist}/{speed}*60", "{stops}*{stop_min}", "{r0}+{r1}"],
    ),
    "interest": (
        _draw_interest,
        "An account opens with ${principal} and earns simple interest of {rate}% per year for "
        "{years} years; a one-off fee of ${fee} is then charged. What is the final balance "
        "in dollars?",
        ["{principal}*{rate}/100*{years}", "{principal}+{r0}-{fee}"],
    ),
    "bill": (
        _draw_bill,
        "A dinner costs ${cost:.2f}, a {tip}% tip is added, and {people} friends share the "
        "total equally. How many dollars does each friend pay?",
        ["{cost}*(1+{tip}/100)", "{r0}/{people}"],
    ),
    "paint": (
        _draw_paint,
        "A room has {walls} walls, each {length} m long and {height} m high. Each coat of paint "
        "covers {coverage} square metres per litre and {coats} coats are applied. How many "
        "litres of paint are needed?",
        ["{length}*{height}*{walls}", "{r0}*{coats}/{coverage}"],
    ),
    "salary": (
        _draw_salary,
        "A worker earns ${hourly:.2f} per hour for {hours} hours a week over {weeks} weeks and "
        "pays {tax}% income tax. What is the take-home pay in dollars?",
        ["{hourly}*{hours}*{weeks}", "{r0}*(1-{tax}/100)"],
    ),
}


def _fill(step: str, params: dict[str, Any], results: list[int | float]) -> str:
    values = {k: format_number(v) if isinstance(v, int | float) else v for k, v in params.items()}
    values.update({f"r{i}": format_number(r) for i, r in enumerate(results)})
    return step.format(**values)


def solve(task: dict[str, Any]) -> tuple[str, list[str], float]:
    """(question, calculator expressions in order, gold answer) of a task."""
    if "template" not in task:
        for key in ("question", "answer"):
            if key not in task:
                raise ValueError(
                    f"ToolQA task {task!r} lacks {key!r}; give either "
                    '{"template": name, "params": {...}} or {"question": str, "answer": number}'
                )
        gold = parse_number(str(task["answer"]))
        if gold is None:
            raise ValueError(f"ToolQA task field 'answer'={task['answer']!r} is not a number")
        return str(task["question"]), [str(s) for s in task.get("steps", [])], gold
    name = task["template"]
    if name not in TEMPLATES:
        raise ValueError(f"ToolQA task template={name!r} is unknown; known: {sorted(TEMPLATES)}")
    _, question, steps = TEMPLATES[name]
    params = task.get("params", {})
    results: list[int | float] = []
    exprs: list[str] = []
    try:
        for step in steps:
            exprs.append(_fill(step, params, results))
            results.append(evaluate(exprs[-1]))
        text = question.format(**params)
    except KeyError as e:
        raise ValueError(f"ToolQA task params {params!r} lack {e} for template {name!r}") from e
    return text, exprs, float(results[-1])


class ToolQAEnv(TextEnv):
    """Arithmetic word problems with a `calculator[...]` tool and an `answer[...]` action."""

    env_id = "arborl/ToolQA-v0"
    description = "Solve an arithmetic word problem with a calculator, then give the answer."
    action_format = "calculator[<expression>] or answer[<number>]"
    default_max_turns = 8
    _state_attrs = ("question", "steps", "gold", "history", "answered", "correct")

    def __init__(
        self,
        templates: list[str] | tuple[str, ...] | None = None,
        split: str = "train",
        max_turns: int | None = None,
    ) -> None:
        """`templates` restricts tasks to these template names (default: all of them)."""
        super().__init__(split=split, max_turns=max_turns)
        names = chosen_templates(templates, TEMPLATES)
        self.templates = names
        self.question = ""
        self.steps: list[str] = []
        self.gold = 0.0
        self.history: list[tuple[str, str]] = []  # (expression, result text) of valid calls
        self.answered = False
        self.correct = False

    def _draw(self, rng: random.Random) -> dict[str, Any]:
        name = rng.choice(self.templates)
        return {"template": name, "params": TEMPLATES[name][0](rng)}

    def _sample_task(self, rng: random.Random, split: str) -> dict[str, Any]:
        return sample_in_split(rng, split, self._draw)

    def _task_id(self, task: dict[str, Any]) -> str:
        return task_id_of(task)

    def _start(self, task: dict[str, Any]) -> str:
        self.question, self.steps, self.gold = solve(task)
        self.history, self.answered, self.correct = [], False, False
        return f"Question: {self.question}"

    def _instruction(self, task: dict[str, Any]) -> str:
        return (
            f"{self.description}\nQuestion: {self.question}\n"
            "Actions: calculator[<expression>] evaluates arithmetic with numbers, parentheses "
            "and + - * / // % ** (e.g. calculator[(12.5+3)*4]); answer[<number>] submits your "
            "final answer and ends the episode. Give the unrounded value (at least 7 "
            "significant digits); reward 1 if it is correct."
        )

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        match = _ACTION_RE.match(action)
        if match is None:
            return (
                f"Invalid action {action[:80]!r}: use calculator[<expression>] or "
                "answer[<number>].",
                0.0,
                False,
                False,
            )
        verb, arg = match.group(1).lower(), match.group(2)
        if verb != "answer":
            try:
                result = format_number(evaluate(arg))
            except CalcError as e:
                return f"Calculator error: {e}.", 0.0, False, False
            self.history.append((arg.strip(), result))
            return f"{arg.strip()} = {result}", 0.0, False, True
        value = parse_number(arg)
        if value is None:
            return f"Invalid answer {arg[:60]!r}: give a single number.", 0.0, False, False
        self.answered = True
        self.correct = math.isclose(value, self.gold, rel_tol=REL_TOL, abs_tol=1e-9)
        verdict = "correct" if self.correct else "wrong"
        return f"Answer {format_number(value)} is {verdict}.", float(self.correct), True, True

    def _anchor(self) -> tuple:
        # What the agent has learnt: the distinct values computed so far, plus the verdict.
        return (
            self._task_id(self.task),
            tuple(sorted({r for _, r in self.history})),
            self.answered,
        )

    def _won(self) -> bool:
        return self.correct

    def oracle_action(self) -> str:
        """The next plan step not yet computed, then the answer."""
        done = {expr.replace(" ", "") for expr, _ in self.history}
        for expr in self.steps:
            if expr.replace(" ", "") not in done:
                return f"calculator[{expr}]"
        return f"answer[{format_number(self.gold)}]"
