"""`arborl/Countdown-v0` and `arborl/Game24-v0`: combine numbers to reach a target.

One operation per turn, written `a op b` (`3 + 5`, `8 * 2`, `9 - 4`, `8 / 2`, optionally
followed by `= result`, which must then be right). `a` and `b` come from the current
multiset and are replaced by the result. Rules, chosen so every intermediate number is a
positive integer: subtraction only when the result is > 0, division only when exact.
The episode is won (reward 1) as soon as the target appears among the numbers; it ends
with reward 0 when a single number other than the target remains.

Countdown targets are reachable by construction (the result of random operations on the
drawn numbers); Game24 fixes the target to 24 and keeps only solvable draws. The oracle
is a depth-first search from the current numbers; the search heuristic (`heuristic`, the
ToT paper's "sure/impossible" judgement, computed exactly) is the same search.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from arborl.envs.base import HeuristicView, TextEnv
from arborl.envs.splits import sample_in_split, task_id_of

_ACTION_RE = re.compile(r"^\s*(\d{1,12})\s*([-+*/x×÷])\s*(\d{1,12})\s*(?:=\s*(\d{1,12})\s*)?$")
_OPS = {"x": "*", "×": "*", "÷": "/"}
_NUMBERS_RE = re.compile(r"Numbers:\s*([\d ]+)\.\s*Target:\s*(\d+)")  # what `_render` writes


def apply_op(a: int, op: str, b: int) -> int | None:
    """`a op b` under the rules above, or None where it is not allowed."""
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    if op == "-":
        return a - b if a > b else None
    if op == "/":
        return a // b if b and a % b == 0 else None
    return None


def legal_moves(numbers: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """Every distinct legal `a op b` (a >= b) with the resulting sorted multiset."""
    moves, seen = [], set()
    for i in range(len(numbers)):
        for j in range(len(numbers)):
            a, b = numbers[i], numbers[j]
            if i == j or a < b or (a, b) in seen:
                continue
            seen.add((a, b))
            rest = [n for k, n in enumerate(numbers) if k not in (i, j)]
            for op in "+-*/":
                result = apply_op(a, op, b)
                if result is not None:
                    moves.append((f"{a} {op} {b}", tuple(sorted([*rest, result]))))
    return moves


@functools.lru_cache(maxsize=200_000)
def solve(numbers: tuple[int, ...], target: int) -> tuple[str, ...] | None:
    """Operations that make `target` appear, by depth-first search (None if impossible)."""
    if target in numbers:
        return ()
    for action, nxt in legal_moves(numbers):
        rest = solve(nxt, target)
        if rest is not None:
            return (action, *rest)
    return None


def parse_observation(observation: str) -> tuple[tuple[int, ...], int] | None:
    """(sorted numbers, target) from the text `CountdownEnv` shows, or None if absent."""
    m = _NUMBERS_RE.search(observation)
    if m is None:
        return None
    return tuple(sorted(int(x) for x in m.group(1).split())), int(m.group(2))


def heuristic(view: HeuristicView) -> float:
    """Search heuristic: 1.0 if the numbers shown can still make the target shown, else 0.0."""
    state = parse_observation(view.observation)
    return 0.0 if state is None else float(solve(*state) is not None)


class CountdownEnv(TextEnv):
    """Reach the target by combining numbers with + - * / (one operation per turn)."""

    env_id = "arborl/Countdown-v0"
    description = "Combine the numbers with + - * / (one operation a turn) to reach the target."
    action_format = "'a op b', e.g. '8 * 3' (op in + - * /)"
    default_max_turns = 8
    _state_attrs = ("numbers",)

    def __init__(
        self,
        num_numbers: int = 4,
        min_number: int = 1,
        max_number: int = 13,
        target: int | None = None,
        min_target: int = 10,
        max_target: int = 100,
        split: str = "train",
        max_turns: int | None = None,
    ) -> None:
        super().__init__(split=split, max_turns=max_turns)
        if not 2 <= num_numbers <= 6:
            raise ValueError(f"num_numbers={num_numbers!r} must be in 2..6")
        if not 1 <= min_number <= max_number:
            raise ValueError(f"need 1 <= min_number <= max_number, got {min_number}, {max_number}")
        if target is None and not 1 <= min_target <= max_target:
            raise ValueError(f"need 1 <= min_target <= max_target, got {min_target}, {max_target}")
        if target is not None and target < 1:
            raise ValueError(f"target={target!r} must be a positive integer")
        self.num_numbers, self.min_number, self.max_number = num_numbers, min_number, max_number
        self.target, self.min_target, self.max_target = target, min_target, max_target
        self.numbers: tuple[int, ...] = ()

    # --- task generation ----------------------------------------------------------------
    def _draw(self, rng) -> dict | None:
        numbers = sorted(
            rng.randint(self.min_number, self.max_number) for _ in range(self.num_numbers)
        )
        if self.target is not None:
            return {"numbers": numbers, "target": self.target}
        cur = tuple(numbers)
        while len(cur) > 1:  # random operations until one number is left: reachable target
            _, cur = rng.choice(legal_moves(cur))
        target = cur[0]
        if not self.min_target <= target <= self.max_target or target in numbers:
            return None
        return {"numbers": numbers, "target": target}

    def _solvable(self, task: dict) -> bool:
        return (
            task["target"] not in task["numbers"]
            and solve(tuple(task["numbers"]), task["target"]) is not None
        )

    def _sample_task(self, rng, split: str) -> dict:
        accept = self._solvable if self.target is not None else None
        return sample_in_split(rng, split, self._draw, accept=accept)

    def _task_id(self, task: dict) -> str:
        return task_id_of(task)

    # --- episode ------------------------------------------------------------------------
    def _start(self, task: dict) -> str:
        nums, target = task.get("numbers"), task.get("target")
        if not (
            isinstance(nums, list) and nums and all(isinstance(n, int) and n > 0 for n in nums)
        ):
            raise ValueError(f"task['numbers']={nums!r} must be a list of positive integers")
        if not isinstance(target, int) or target < 1:
            raise ValueError(f"task['target']={target!r} must be a positive integer")
        self.numbers = tuple(sorted(nums))
        return self._render()

    def _render(self) -> str:
        return f"Numbers: {' '.join(map(str, self.numbers))}. Target: {self.task['target']}."

    def _instruction(self, task: dict) -> str:
        return (
            f"Reach {task['target']} by combining the numbers. Each turn, reply with one "
            "operation on two of the current numbers, like '8 * 3' (+, -, *, /); the two are "
            "replaced by the result. Results must be positive whole numbers. You win when "
            "the target appears."
        )

    def _act(self, action: str) -> tuple[str, float, bool, bool]:
        m = _ACTION_RE.match(action)
        if m is None:
            return (
                "Invalid action: write 'a op b', e.g. '8 * 3'. " + self._render(),
                0.0,
                False,
                False,
            )
        a, b, claimed = int(m.group(1)), int(m.group(3)), m.group(4)
        op = _OPS.get(m.group(2), m.group(2))
        pool = list(self.numbers)
        result = apply_op(a, op, b)
        if a in pool:
            pool.remove(a)
        else:
            result = None
        if b in pool and result is not None:
            pool.remove(b)
        else:
            result = None
        if result is None or (claimed is not None and int(claimed) != result):
            why = "not allowed" if result is None else f"wrong result (it is {result})"
            return f"Invalid action: {a} {op} {b} is {why}. " + self._render(), 0.0, False, False
        self.numbers = tuple(sorted([*pool, result]))
        won = self._won()
        return self._render(), float(won), won or len(self.numbers) == 1, True

    def _won(self) -> bool:
        return self.task["target"] in self.numbers

    def _anchor(self) -> Any:
        return (self._task_id(self.task), self.numbers)

    def _available_actions(self) -> list[str]:
        return [action for action, _ in legal_moves(self.numbers)]

    # --- oracle -------------------------------------------------------------------------
    def oracle_action(self) -> str:
        """The next operation of a DFS solution; any legal one when no solution remains."""
        plan = solve(self.numbers, self.task["target"])
        if plan:
            return plan[0]
        moves = legal_moves(self.numbers)
        return moves[0][0] if moves else "1 + 1"
