"""Independent samples from the root: best-of-N (`best-of-n`) and self-consistency.

Both draw `n` chains: from the root, one proposal at a time (k=1, each node's own seed)
until the episode ends or a limit is hit. The chains share the root, so the tree is a
fan of paths.

- best-of-N scores each chain's final node (the env's outcome for a finished chain, else
  the evaluator: an outcome reward model) and returns the argmax (`select='max'`), or, as
  in search-and-learn's weighted BoN, the answer whose chains have the largest *summed*
  score (`select='weighted'`).
- self-consistency votes: the most frequent final answer among finished chains wins
  (`Problem.answer_fn`, default the final observation; ties go to the answer seen first).
  It never stops early on a win: a vote needs all its samples.
"""

from __future__ import annotations

from collections import Counter

from arborl.search.problem import SearchAlgorithm, SearchContext


def sample_chain(ctx: SearchContext) -> int:
    """One chain from the root; returns its last node."""
    node = 0
    while ctx.expandable(node):
        kids = ctx.expand(node, 1)
        if not kids:
            break
        node = kids[0].id
    return node


class BestOfN(SearchAlgorithm):
    name = "best-of-n"

    def __init__(self, n: int = 8, select: str = "max") -> None:
        """`n` chains; `select`: 'max' (best final score) or 'weighted' (answer with the
        largest summed score)."""
        if n < 1:
            raise ValueError(f"best-of-n: n={n!r} must be >= 1")
        if select not in ("max", "weighted"):
            raise ValueError(f"best-of-n: select={select!r} is not one of ['max', 'weighted']")
        self.n, self.select = n, select

    def _search(self, ctx: SearchContext):
        ends = []
        for _ in range(self.n):
            ends.append(sample_chain(ctx))
        scores = ctx.evaluate(ends)
        if self.select == "max":
            best = max(zip(scores, ends), key=lambda t: (t[0], -t[1]))[1]
            return "done", best
        totals: dict = {}
        for s, i in zip(scores, ends):
            key = ctx.tree[i].answer if ctx.tree[i].answer is not None else ctx.tree[i].observation
            totals[key] = totals.get(key, 0.0) + s
        answer = max(totals, key=lambda a: totals[a])  # first-seen wins ties (dict order)
        ctx.answer = answer
        members = [(s, i) for s, i in zip(scores, ends) if _key(ctx, i) == answer]
        return "done", max(members, key=lambda t: (t[0], -t[1]))[1]


def _key(ctx: SearchContext, i: int):
    n = ctx.tree[i]
    return n.answer if n.answer is not None else n.observation


class SelfConsistency(SearchAlgorithm):
    name = "self-consistency"

    def __init__(self, n: int = 8) -> None:
        """`n` chains, majority vote over the finished ones' answers."""
        if n < 1:
            raise ValueError(f"self-consistency: n={n!r} must be >= 1")
        self.n = n
        self.votes: dict = {}

    def _search(self, ctx: SearchContext):
        ctx.stop_on_win = False
        ends = [sample_chain(ctx) for _ in range(self.n)]
        return "done", self._vote(ctx, ends)

    def _vote(self, ctx: SearchContext, ends: list[int]) -> int | None:
        finished = [i for i in ends if ctx.tree[i].done]
        counts = Counter(_key(ctx, i) for i in finished)
        self.votes = {str(k): v for k, v in counts.items()}
        if not counts:
            return None
        answer = max(counts, key=lambda a: counts[a])  # Counter keeps first-seen order
        ctx.answer = answer
        return next(i for i in finished if _key(ctx, i) == answer)

    def best_on_stop(self, ctx: SearchContext) -> int | None:
        ends = [n.id for n in ctx.tree.nodes if n.done]
        return self._vote(ctx, ends)

    def extra_stats(self, ctx: SearchContext):
        return {"votes": self.votes}
