"""Beam search guided by a process reward model (`beam-prm`).

After huggingface/search-and-learn `beam_search.py`: `num_beams` (N) active beams; each
step the `N // beam_width` surviving prefixes are each extended by `beam_width` (M)
distinct candidates, every new step is scored by the evaluator (the PRM), and the best
N // M by their aggregated path score survive. `agg` combines the step scores along a
path as search-and-learn does: 'last' (the newest step's score), 'min' or 'prod'.

Two of search-and-learn's habits are not copied: when fewer than N beams finish, the
finished ones are *not* duplicated up to N (that inflates votes), and the token budget is
enforced, not only logged.
"""

from __future__ import annotations

import math

from arborl.search.problem import SearchAlgorithm, SearchContext, argsort_desc

AGGREGATIONS = ("last", "min", "prod")


class BeamPRM(SearchAlgorithm):
    name = "beam-prm"

    def __init__(self, num_beams: int = 4, beam_width: int = 2, agg: str = "last") -> None:
        """`num_beams` N candidates alive per step, `beam_width` M children per kept
        prefix (N // M prefixes kept), `agg` in 'last', 'min', 'prod'."""
        if num_beams < 1 or beam_width < 1 or beam_width > num_beams:
            raise ValueError(
                f"beam-prm: need 1 <= beam_width <= num_beams, got beam_width={beam_width!r}, "
                f"num_beams={num_beams!r}"
            )
        if agg not in AGGREGATIONS:
            raise ValueError(f"beam-prm: agg={agg!r} is not one of {list(AGGREGATIONS)}")
        self.num_beams, self.beam_width, self.agg = num_beams, beam_width, agg
        self.path_score: dict[int, float] = {}

    def _aggregate(self, parent: int, step_score: float) -> float:
        if self.agg == "last" or parent == 0:
            return step_score
        prev = self.path_score[parent]
        return min(prev, step_score) if self.agg == "min" else prev * step_score

    def _search(self, ctx: SearchContext):
        self.path_score = {0: 1.0}
        keep_n = max(1, self.num_beams // self.beam_width)
        beams, finished = [0], []
        while beams:
            live = [b for b in beams if ctx.expandable(b)]
            if not live:
                break
            children = []
            for parent, cands in zip(live, ctx.propose(live, self.beam_width)):
                children += [ctx.add_child(parent, c).id for c in cands]
            if not children:
                break
            scores = ctx.evaluate(children)
            for i, s in zip(children, scores):
                self.path_score[i] = self._aggregate(ctx.tree[i].parent, s)
            finished += [i for i in children if ctx.tree[i].done]
            open_ids = [i for i in children if not ctx.tree[i].done]
            ranked = argsort_desc([self.path_score[i] for i in open_ids], open_ids)
            beams = ranked[:keep_n]
            for i in ranked[keep_n:]:
                ctx.tree[i].pruned = True
            if len(finished) >= self.num_beams:
                break
        pool = finished or [n.id for n in ctx.tree.nodes if n.id in self.path_score and n.id]
        if not pool:
            return ctx.exhausted(), None
        best = max(pool, key=lambda i: (ctx.tree[i].won, self.path_score[i], -i))
        reason = "done" if finished else ctx.exhausted()
        return reason, best

    def extra_stats(self, ctx: SearchContext):
        finite = [v for v in self.path_score.values() if math.isfinite(v)]
        return {"best_path_score": max(finite) if finite else None}
