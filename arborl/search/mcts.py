"""Monte Carlo tree search (`mcts`) with UCT or PUCT selection and a mean-value backup.

Each iteration selects a path from the root by UCT, `Q + c * sqrt(ln N_parent / N)`, or
PUCT, `Q + c * P * sqrt(N_parent) / (1 + N)` (P: the proposer's prior), expands the leaf
into `width` children, values every new child (the evaluator's score, a bootstrap; or the
return of `rollout_steps` proposer steps), and backs each child's return up the path.

Statistics are kept as a visit count N and a value *sum* W, and Q = W / N. Never is a
running mean divided by N again (LATS's `uct()` does that), and N always counts exactly
the returns in W. A child's return is seen from its parent: G = r + gamma * v, with r the
env reward of the step into the child and v its estimated future (0 once terminal), so
with gamma < 1 shorter wins are worth more. Nodes whose subtree is fully explored are
*closed* and never selected again, so a small tree ends with `exhausted` instead of
looping without spending budget.

The best trajectory is the won node with the highest discounted return if one was found;
otherwise the path of most-visited children from the root (the real path; llm-reasoners'
`follow_max` reverses the first two nodes instead).
"""

from __future__ import annotations

import math

from arborl.search.problem import SearchAlgorithm, SearchContext


class MCTS(SearchAlgorithm):
    name = "mcts"

    def __init__(
        self,
        c: float = 1.0,
        select: str = "uct",
        width: int = 4,
        rollout_steps: int = 0,
        max_iterations: int | None = None,
        skip_repeats: bool = True,
    ) -> None:
        """`c`: exploration constant; `select`: 'uct' or 'puct'; `width`: children added
        per expansion (a node whose children are all used up is widened by `width` more
        distinct actions); `rollout_steps`: 0 values new children with the evaluator (value
        bootstrap), > 0 with a proposer rollout of that many steps; `max_iterations`:
        selection-expansion-backup rounds (None: until a budget or exhaustion);
        `skip_repeats`: a child whose observation repeats one on its own path (a wall bump,
        a move undone) is closed, never selected (right when observations identify
        states, as in the grid and number envs)."""
        if select not in ("uct", "puct"):
            raise ValueError(f"mcts: select={select!r} is not one of ['uct', 'puct']")
        if c < 0 or width < 1 or rollout_steps < 0:
            raise ValueError(
                f"mcts: need c >= 0, width >= 1, rollout_steps >= 0; got {c}, {width}, "
                f"{rollout_steps}"
            )
        self.c, self.select, self.width = c, select, width
        self.rollout_steps, self.max_iterations = rollout_steps, max_iterations
        self.skip_repeats = skip_repeats
        self.iterations = 0

    # --- selection ----------------------------------------------------------------------
    def score(self, parent_visits: int, child, num_children: int) -> float:
        """The UCT or PUCT score of `child` (a `Node`) under a parent with N visits."""
        if self.select == "uct":
            if child.visits == 0:
                return math.inf
            return child.q + self.c * math.sqrt(math.log(max(1, parent_visits)) / child.visits)
        prior = child.prior if child.prior is not None else 1.0 / max(1, num_children)
        return child.q + self.c * prior * math.sqrt(parent_visits) / (1 + child.visits)

    def _pick(self, ctx: SearchContext, node_id: int) -> int | None:
        node = ctx.tree[node_id]
        open_kids = [k for k in node.children if k not in self.closed]
        if not open_kids:
            return None
        n = len(node.children)
        return max(open_kids, key=lambda k: (self.score(node.visits, ctx.tree[k], n), -k))

    # --- one iteration ------------------------------------------------------------------
    def _future(self, ctx: SearchContext, ids: list[int]) -> list[float]:
        """Estimated future return v of each new child (0 for terminal ones)."""
        if self.rollout_steps > 0:
            return [0.0 if ctx.tree[i].done else ctx.rollout(i, self.rollout_steps)[0] for i in ids]
        live = [i for i in ids if not ctx.tree[i].done]
        values = dict(zip(live, ctx.evaluate(live))) if live else {}
        return [values.get(i, 0.0) for i in ids]

    def _backup(self, ctx: SearchContext, path: list[int], future: float) -> None:
        """Back up `future` (the estimated return from the state at path[-1] on): each
        node on the path gets G = its step reward + gamma * (G of the node below it)."""
        gamma = ctx.problem.gamma
        for j in range(len(path) - 1, -1, -1):
            n = ctx.tree[path[j]]
            future = n.reward + gamma * future
            n.visits += 1
            n.value_sum += future

    def _close(self, ctx: SearchContext, path: list[int]) -> None:
        """Close nodes bottom-up: a node is closed when nothing below it is left, i.e. it
        cannot be expanded, or all its children are closed and the proposer has no
        further distinct action for it (`saturated`)."""
        for i in reversed(path):
            n = ctx.tree[i]
            done_below = all(k in self.closed for k in n.children)
            if not n.children and (i in self.saturated or not ctx.expandable(i)):
                self.closed.add(i)
            elif n.children and done_below and i in self.saturated:
                self.closed.add(i)
            else:
                break

    def _iterate(self, ctx: SearchContext) -> bool:
        """One round; False when the whole tree is closed."""
        path = [0]
        while ctx.tree[path[-1]].children:
            nxt = self._pick(ctx, path[-1])
            if nxt is None:
                break
            path.append(nxt)
        leaf = path[-1]
        if leaf in self.closed:
            return False
        if not ctx.expandable(leaf):  # terminal or at the depth limit: re-score it
            n = ctx.tree[leaf]
            v = 0.0 if n.done else ctx.evaluate([leaf])[0]
            self._backup(ctx, path, v)
            self._close(ctx, path)
            return True
        # A fresh leaf, or a node whose children are all closed: (progressively) widen it
        # with actions different from those already tried.
        tried = [ctx.tree[c].action for c in ctx.tree[leaf].children]
        kids = [k.id for k in ctx.expand(leaf, self.width, avoid=tried)]
        if not kids:
            self.saturated.add(leaf)
            self._close(ctx, path)
            return True
        for k, v in zip(kids, self._future(ctx, kids)):
            self._backup(ctx, [*path, k], v)
        seen = {ctx.tree[i].observation for i in path}
        for k in kids:
            if not ctx.expandable(k):  # terminal or at the depth limit: nothing below
                self.closed.add(k)
            elif self.skip_repeats and ctx.tree[k].observation in seen:
                self.closed.add(k)
                ctx.tree[k].pruned = True
        self._close(ctx, path)
        return True

    def _search(self, ctx: SearchContext):
        self.closed: set[int] = set()
        self.saturated: set[int] = set()
        self.iterations = 0
        while self.max_iterations is None or self.iterations < self.max_iterations:
            if not self._iterate(ctx):
                return ctx.exhausted(), None
            self.iterations += 1
            if 0 in self.closed:
                return ctx.exhausted(), self._final(ctx)
        return "done", self._final(ctx)

    def _final(self, ctx: SearchContext) -> int:
        if ctx.won_ids():
            return ctx.best_node()
        node = 0
        while ctx.tree[node].children:
            node = max(ctx.tree[node].children, key=lambda k: (ctx.tree[k].visits, -k))
        return node

    def best_on_stop(self, ctx: SearchContext) -> int:
        return self._final(ctx)

    def extra_stats(self, ctx: SearchContext):
        return {"iterations": self.iterations, "root_visits": ctx.tree.root.visits}
