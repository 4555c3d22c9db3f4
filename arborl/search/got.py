"""Graph-of-Thoughts (`got`): a user-composed program of graph operations.

After spcl/graph-of-thoughts, where a user writes a static graph of operations that a
controller executes. Here a program is a list of operations applied in turn to a *current
set* of nodes, repeated `repeat` times (or until the set empties):

    GoT([Generate(3), Aggregate(), Score(), KeepBest(2), Refine(1), Score(), KeepBest(1)])

- `Generate(k)`: k distinct children of every current node; the set becomes them.
- `Score()`: evaluator scores for the set (one call).
- `KeepBest(n)`: the n best-scored nodes stay; the others are pruned.
- `KeepValid()`: drop nodes whose action the env rejected, and finished non-wins.
- `Refine(k)`: for each current node, k alternatives from its parent that differ from
  every sibling already tried (the set gains them; `Score` + `KeepBest` then choose).
- `Aggregate(fn=None)`: merge nodes into graph nodes. The default merges nodes whose
  observations are identical (two paths that reached the same visible state are one
  thought): the lowest id is kept and records the others' parents in `extra_parents`,
  so the result is a DAG. `fn(ctx, ids) -> ids` supplies any other merge.

Unlike the original, the program is seeded, every step is budgeted, and the default
program (`generate/score/keep` each level, like ToT-BFS plus merging) is adaptive enough
to be a search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from arborl.registry import Registry
from arborl.search.problem import SearchAlgorithm, SearchContext, argsort_desc


@dataclass
class Generate:
    k: int = 3

    def __call__(self, ctx: SearchContext, ids: list[int]) -> list[int]:
        live = [i for i in ids if ctx.expandable(i)]
        out = []
        for parent, cands in zip(live, ctx.propose(live, self.k)):
            out += [ctx.add_child(parent, c, kind="generate").id for c in cands]
        return out


@dataclass
class Score:
    def __call__(self, ctx: SearchContext, ids: list[int]) -> list[int]:
        ctx.evaluate(ids)
        return ids


@dataclass
class KeepBest:
    n: int = 1

    def __call__(self, ctx: SearchContext, ids: list[int]) -> list[int]:
        values = ctx.evaluate(ids)  # no call for nodes already scored
        keep = argsort_desc(values, ids)[: self.n]
        for i in ids:
            ctx.tree[i].pruned = i not in keep
        return [i for i in ids if i in keep]


@dataclass
class KeepValid:
    def __call__(self, ctx: SearchContext, ids: list[int]) -> list[int]:
        keep = [
            i for i in ids if ctx.tree[i].valid_action and (ctx.tree[i].won or not ctx.tree[i].done)
        ]
        for i in ids:
            ctx.tree[i].pruned = i not in keep
        return keep


@dataclass
class Refine:
    k: int = 1

    def __call__(self, ctx: SearchContext, ids: list[int]) -> list[int]:
        out = list(ids)
        for i in ids:
            parent = ctx.tree[i].parent
            if parent is None:
                continue
            tried = [ctx.tree[c].action for c in ctx.tree[parent].children]
            (cands,) = ctx.propose([parent], self.k, [tried])
            out += [ctx.add_child(parent, c, kind="refine").id for c in cands]
        return out


@dataclass
class Aggregate:
    fn: Callable[[SearchContext, list[int]], list[int]] | None = None

    def __call__(self, ctx: SearchContext, ids: list[int]) -> list[int]:
        if self.fn is not None:
            return list(self.fn(ctx, ids))
        keeper: dict[tuple, int] = {}
        out = []
        for i in ids:
            n = ctx.tree[i]
            key = (n.observation, n.done, n.won)
            if key in keeper:
                k = ctx.tree[keeper[key]]
                k.extra_parents.append(n.parent)
                n.pruned = True
                n.kind = "merged"
            else:
                keeper[key] = i
                out.append(i)
        return out


OPERATIONS: Registry[Callable] = Registry("got operation", error=ValueError)
"""Operation name -> class, for programs written as data (`[["generate", 3], ...]`)."""
OPERATIONS.register("generate", Generate)
OPERATIONS.register("score", Score)
OPERATIONS.register("keep_best", KeepBest)
OPERATIONS.register("keep_valid", KeepValid)
OPERATIONS.register("refine", Refine)
OPERATIONS.register("aggregate", Aggregate)


def parse_program(spec: Sequence) -> list:
    """Operations from `[["generate", 3], ["score"], ...]` or operation objects."""
    ops = []
    for item in spec:
        if callable(item):
            ops.append(item)
            continue
        name, *args = [item] if isinstance(item, str) else list(item)
        ops.append(OPERATIONS.get(name)(*args))
    return ops


class GoT(SearchAlgorithm):
    name = "got"

    def __init__(self, program: Sequence | None = None, repeat: int | None = None) -> None:
        """`program`: operations (objects or `[name, *args]` lists; default generate 5,
        aggregate, score, keep_best 5); `repeat`: times to apply it (None: until the
        current set empties)."""
        default = [Generate(5), Aggregate(), Score(), KeepBest(5)]
        self.program = parse_program(program) if program is not None else default
        if not self.program:
            raise ValueError("got: program is empty; give at least one operation")
        self.repeat = repeat
        self.op_counts: dict[str, int] = {}

    def _search(self, ctx: SearchContext):
        self.op_counts = {}
        current, rounds = [0], 0
        while self.repeat is None or rounds < self.repeat:
            for op in self.program:
                name = type(op).__name__
                self.op_counts[name] = self.op_counts.get(name, 0) + 1
                current = op(ctx, current)
                if not current:
                    return ctx.exhausted(), None
            current = [i for i in current if not ctx.tree[i].done]
            if not current:
                return ctx.exhausted(), None
            rounds += 1
        return "done", None

    def extra_stats(self, ctx: SearchContext):
        return {"op_counts": dict(self.op_counts)}
