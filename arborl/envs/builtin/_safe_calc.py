"""A safe arithmetic evaluator for calculator tools (no `eval`, no names, no calls).

The expression is parsed with `ast` and only number literals, parentheses, unary +/- and
the binary operators + - * / // % ** are accepted. Every intermediate value is checked
against a magnitude limit and exponents are bounded, so a hostile expression such as
`9**9**9` or a 10,000-character input fails fast with a readable message instead of
hanging or exhausting memory. Errors are `CalcError` with text meant for the agent.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_EXPR_CHARS = 500
"""Longest expression accepted, in characters."""
MAX_MAGNITUDE = 1e18
"""Largest absolute value of any literal, intermediate or result."""
MAX_EXPONENT = 64
"""Largest absolute exponent accepted by `**`."""
MAX_NODES = 200
"""Most syntax-tree nodes in one expression (bounds work and recursion depth)."""

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_HINTS = {
    ast.BitXor: "use ** for powers, not ^",
    ast.Name: "only numbers are allowed, no names or variables",
    ast.Call: "function calls are not allowed; write the arithmetic out",
    ast.Tuple: "remove the commas: write 1234.5, not 1,234.5",
    ast.Compare: "comparisons are not allowed; only arithmetic",
}


class CalcError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message says why."""


def _check(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalcError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalcError(f"a value exceeds the magnitude limit {MAX_MAGNITUDE:g}")
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalcError(f"{node.value!r} is not a number")
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalcError(f"exponent {right:g} is beyond the limit of {MAX_EXPONENT}")
            if left == 0 and right < 0:
                raise CalcError("zero cannot be raised to a negative power")
            if left < 0 and not float(right).is_integer():
                raise CalcError("a negative number cannot be raised to a fractional power")
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise CalcError("division by zero")
        try:
            return _check(_BINOPS[type(node.op)](left, right))
        except OverflowError as e:
            raise CalcError(f"the result overflows ({e})") from e
    kind = type(node.op) if isinstance(node, ast.BinOp) else type(node)
    hint = _HINTS.get(kind, "only numbers, parentheses and + - * / // % ** are allowed")
    raise CalcError(f"unsupported syntax ({kind.__name__}): {hint}")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic `expression`, or `CalcError` saying what is wrong."""
    text = expression.strip()
    if not text:
        raise CalcError("the expression is empty")
    if len(text) > MAX_EXPR_CHARS:
        raise CalcError(f"the expression has {len(text)} characters; the limit is {MAX_EXPR_CHARS}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise CalcError(f"cannot parse {text[:60]!r}: {type(e).__name__}") from e
    num_nodes = sum(1 for _ in ast.walk(tree))
    if num_nodes > MAX_NODES:
        raise CalcError(f"the expression has {num_nodes} syntax nodes; the limit is {MAX_NODES}")
    return _eval(tree.body)


def format_number(value: int | float) -> str:
    """Compact text for a number: integers exactly, floats to 12 significant digits."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


def parse_number(text: str) -> float | None:
    """A number written by an agent ("$1,234.50", " 42 ", "1.5e3"), or None if not one."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace("_", "").strip()
    if not cleaned or len(cleaned) > 64:
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
