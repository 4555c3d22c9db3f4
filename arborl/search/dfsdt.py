"""DFSDT (`dfsdt`): depth-first search with diversity among siblings and backtracking.

After ToolBench's `Algorithms/DFS.py`: a node's children are generated one at a time, and
each new child is asked to differ from its earlier siblings (their actions go to the
proposer as `avoid`: the LM proposer drops them and can show them in the prompt, like
ToolBench's DIVERSITY_PROMPT). The search dives into each child at once. A child that ends
the episode without a win is a failure: the next sibling is tried (back up one level). A
child that *gives up* (its value is below `give_up_value`, or the env rejected its action)
is pruned and the search unwinds `backtrack_on_giveup` levels: with the default 2, the
give-up node's parent is abandoned too and the grandparent tries its next child. ToolBench
hard-codes these constants; here they are parameters. At most `width` children per node
(ToolBench's `tree_beam_size`).
"""

from __future__ import annotations

from arborl.search.problem import SearchAlgorithm, SearchContext


class DFSDT(SearchAlgorithm):
    name = "dfsdt"

    def __init__(
        self,
        width: int = 2,
        give_up_value: float | None = 0.0,
        backtrack_on_giveup: int = 2,
        give_up_on_invalid: bool = True,
    ) -> None:
        """`width`: children tried per node; a child whose evaluator value is <=
        `give_up_value` (None: never) or whose action was invalid gives up, unwinding
        `backtrack_on_giveup` levels (>= 1; 1 = just try the next sibling)."""
        if width < 1 or backtrack_on_giveup < 1:
            raise ValueError(
                f"dfsdt: width={width!r} and backtrack_on_giveup={backtrack_on_giveup!r} "
                "must be >= 1"
            )
        self.width, self.give_up_value = width, give_up_value
        self.backtrack_on_giveup, self.give_up_on_invalid = backtrack_on_giveup, give_up_on_invalid
        self.avoid_log: list[tuple[int, tuple[str, ...]]] = []
        """(node id, actions avoided) of every proposal: the diversity record."""
        self.backtracks = 0
        self.give_ups = 0

    def _gives_up(self, ctx: SearchContext, node_id: int) -> bool:
        n = ctx.tree[node_id]
        if self.give_up_on_invalid and not n.valid_action:
            return True
        if self.give_up_value is None or ctx.problem.evaluator is None:
            return False
        (v,) = ctx.evaluate([node_id])
        return v <= self.give_up_value

    def _dfs(self, ctx: SearchContext, node_id: int) -> int:
        """Explore below `node_id`; return how many more levels to unwind (0: none)."""
        for _ in range(self.width):
            if not ctx.expandable(node_id):
                return 0
            tried = tuple(ctx.tree[c].action for c in ctx.tree[node_id].children)
            self.avoid_log.append((node_id, tried))
            kids = ctx.expand(node_id, 1, avoid=tried)
            if not kids:
                break  # no further distinct action here
            child = kids[0].id
            if ctx.tree[child].done:
                continue  # finished without a win: try a sibling
            if self._gives_up(ctx, child):
                ctx.tree[child].pruned = True
                self.give_ups += 1
                if self.backtrack_on_giveup > 1 and node_id != 0:  # the root is never left
                    self.backtracks += 1
                    return self.backtrack_on_giveup - 2
                continue
            up = self._dfs(ctx, child)
            if up > 0 and node_id != 0:
                self.backtracks += 1
                return up - 1
        return 0

    def _search(self, ctx: SearchContext):
        self.avoid_log, self.backtracks, self.give_ups = [], 0, 0
        self._dfs(ctx, 0)
        return ctx.exhausted(), None

    def extra_stats(self, ctx: SearchContext):
        return {"backtracks": self.backtracks, "give_ups": self.give_ups}
