"""Tree-of-Thoughts: breadth-first (`tot-bfs`) and depth-first (`tot-dfs`) search.

BFS follows princeton-nlp/tree-of-thought-llm `methods/bfs.py`: each level expands every
frontier node into `breadth` distinct candidates, scores all new nodes in one evaluator
call, and keeps the best `beam` (greedy, ties by creation order, or sampled in proportion
to value with a seeded generator rather than the global NumPy RNG). Unlike the original's
fixed `steps`, it runs until a win, an empty frontier or a budget limit.

DFS is the notebook-only DFS of that repo as a library search: expand, score, recurse into
the best `max_per_state` children whose value reaches `threshold` (the rest are pruned,
never expanded), and backtrack when a subtree is used up.
"""

from __future__ import annotations

import numpy as np

from arborl.search.base import node_seed
from arborl.search.problem import SearchAlgorithm, SearchContext, argsort_desc


class ToTBFS(SearchAlgorithm):
    name = "tot-bfs"

    def __init__(
        self, breadth: int = 5, beam: int = 5, max_steps: int | None = None, select: str = "greedy"
    ) -> None:
        """`breadth`: candidates proposed per frontier node; `beam`: nodes kept per level;
        `max_steps`: levels (None: until the frontier empties); `select`: 'greedy' or
        'sample'."""
        if breadth < 1 or beam < 1:
            raise ValueError(f"tot-bfs: breadth={breadth!r} and beam={beam!r} must be >= 1")
        if select not in ("greedy", "sample"):
            raise ValueError(f"tot-bfs: select={select!r} is not one of ['greedy', 'sample']")
        self.breadth, self.beam, self.max_steps, self.select = breadth, beam, max_steps, select

    def _keep(self, ctx: SearchContext, ids: list[int], values: list[float], level: int):
        if self.select == "greedy" or len(ids) <= self.beam:
            return argsort_desc(values, ids)[: self.beam]
        p = np.asarray(values, dtype=float) + 1e-6
        rng = np.random.default_rng(node_seed(ctx.seed, (2**31, level)))
        picked = rng.choice(len(ids), size=self.beam, replace=False, p=p / p.sum())
        return [ids[i] for i in sorted(picked)]

    def _search(self, ctx: SearchContext):
        frontier, level = [0], 0
        while self.max_steps is None or level < self.max_steps:
            frontier = [i for i in frontier if ctx.expandable(i)]
            if not frontier:
                return ctx.exhausted(), None
            proposals = ctx.propose(frontier, self.breadth)
            children = []
            for parent, cands in zip(frontier, proposals):
                children += [ctx.add_child(parent, c).id for c in cands]
            if not children:
                return ctx.exhausted(), None
            values = ctx.evaluate(children)
            keep = set(self._keep(ctx, children, values, level))
            for i in children:
                ctx.tree[i].pruned = i not in keep
            frontier = [i for i in children if i in keep]
            level += 1
        return "done", None


class ToTDFS(SearchAlgorithm):
    name = "tot-dfs"

    def __init__(self, breadth: int = 5, threshold: float = 0.5, max_per_state: int = 3) -> None:
        """`breadth`: candidates per node; children valued below `threshold` are pruned;
        at most `max_per_state` children of a node are explored (best first)."""
        if breadth < 1 or max_per_state < 1:
            raise ValueError(
                f"tot-dfs: breadth={breadth!r} and max_per_state={max_per_state!r} must be >= 1"
            )
        self.breadth, self.threshold, self.max_per_state = breadth, threshold, max_per_state
        self.backtracks = 0

    def _search(self, ctx: SearchContext):
        self.backtracks = 0
        stack = [0]  # explicit stack: deep trees must not hit Python's recursion limit
        while stack:
            node = stack.pop()
            if not ctx.expandable(node):
                continue
            kids = [c.id for c in ctx.expand(node, self.breadth)]
            if not kids:
                self.backtracks += 1
                continue
            values = ctx.evaluate(kids)
            order = argsort_desc(values, kids)
            chosen = []
            for rank, i in enumerate(order):
                n = ctx.tree[i]
                if rank >= self.max_per_state or n.value < self.threshold:
                    n.pruned = True
                elif not n.done:
                    chosen.append(i)
            if not chosen:
                self.backtracks += 1
            stack += chosen[::-1]  # best child on top: visited first
        return ctx.exhausted(), None

    def extra_stats(self, ctx: SearchContext):
        return {"backtracks": self.backtracks}
