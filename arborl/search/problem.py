"""A search problem (env + proposer + evaluator) and the per-run context every algorithm uses.

`Problem` is the user-facing bundle. `SearchContext` is one run over it: it owns the tree,
the budget meter and the seed, and offers the few operations every algorithm is built
from: `propose`, `add_child`, `evaluate`, `rollout`. All env access goes through
`add_child`/`rollout`, which first `restore` the parent's snapshot into the env and then
take one step, so a branch always continues from its own state, never from whatever a
sibling left in the env (the shared-env bug of LATS's WikiEnv).

`SearchAlgorithm.run` wraps an algorithm's `_search(ctx)`: a `BudgetExceeded` or a
`Solved` raised anywhere inside becomes the result's stop reason, and the best node found
so far is returned (every search is anytime).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arborl.search.base import (
    Budget,
    BudgetExceeded,
    BudgetMeter,
    Candidate,
    Evaluator,
    Node,
    NodeView,
    Proposer,
    SearchResult,
    SearchTree,
    node_seed,
)


class Solved(Exception):
    """A won node was added and the problem stops on wins."""

    def __init__(self, node_id: int) -> None:
        super().__init__(node_id)
        self.node_id = node_id


@dataclass
class Problem:
    """What to search: an env posed one task, how to propose actions, how to score nodes."""

    env: Any
    """An arborl `Env` with `snapshot()`/`restore()` (every `TextEnv` has them)."""
    proposer: Proposer
    """Where candidate actions come from."""
    evaluator: Evaluator | None = None
    """Scores nodes (None: algorithms that need scores use each node's return so far)."""
    task: dict | None = None
    """An explicit task for `env.reset(options={'task': ...})`; None draws one from `seed`."""
    seed: int | None = 0
    """The env's reset seed (which task is drawn when `task` is None)."""
    gamma: float = 1.0
    """Discount for returns: with gamma < 1 a shorter solution is worth more."""
    stop_on_win: bool = True
    """Stop as soon as the env reports `won` (the env's own success signal, not a hidden
    answer). Self-consistency ignores it: it must vote over all its samples."""
    answer_fn: Callable[[NodeView], Hashable] | None = None
    """The final answer of a finished trajectory, for self-consistency / weighted best-of-N
    (None: the final observation)."""
    reset_options: dict | None = None
    """Further `reset` options (e.g. {'split': 'test'})."""

    def __post_init__(self) -> None:
        for name in ("snapshot", "restore", "reset", "step"):
            if not callable(getattr(self.env, name, None)):
                raise TypeError(
                    f"problem.env={type(self.env).__name__} has no {name}(); search forks "
                    "branches with snapshot()/restore(): subclass arborl.envs.TextEnv"
                )
        if not 0 < self.gamma <= 1:
            raise ValueError(f"problem.gamma={self.gamma!r} must be in (0, 1]")


class SearchContext:
    """One search run: tree, budget meter, seed and the shared operations."""

    def __init__(
        self,
        problem: Problem,
        budget: Budget,
        seed: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.problem, self.budget, self.seed = problem, budget, int(seed)
        self.meter = BudgetMeter(budget, clock)
        self.stop_on_win = problem.stop_on_win
        self.tree = SearchTree()
        self._views: dict[int, NodeView] = {}
        self._proposals: dict[int, int] = {}  # node id -> propose calls made from it
        self.dret: dict[int, float] = {0: 0.0}  # discounted return root -> node
        self.depth_blocked = False
        self.answer: Any = None
        options = dict(problem.reset_options or {})
        if problem.task is not None:
            options["task"] = problem.task
        obs, info = problem.env.reset(seed=problem.seed, options=options or None)
        self.instruction = getattr(problem.env, "instruction", "")
        self.task_id = None if info.get("task_id") is None else str(info["task_id"])
        root = Node(id=0, parent=None, path=(), depth=0, observation=obs, kind="root")
        self._fill(root, info)
        root.snapshot = problem.env.snapshot()
        self.tree.add(root)

    # --- views --------------------------------------------------------------------------
    @staticmethod
    def _fill(node: Node, info: dict) -> None:
        node.won = bool(info.get("won", False))
        node.valid_action = bool(info.get("valid_action", True))
        acts = info.get("available_actions")
        node.available_actions = list(acts) if acts is not None else None
        node.anchor = info.get("anchor")

    def view(self, node_id: int) -> NodeView:
        """The node as a proposer/evaluator may see it (built once, from its parent's)."""
        if node_id in self._views:
            return self._views[node_id]
        n = self.tree[node_id]
        if n.parent is None:
            hist, acts, rews = (), (), ()
        else:
            p = self.tree[n.parent]
            pv = self.view(p.id)
            hist = (*pv.history, (p.observation, n.response_text))
            acts, rews = (*pv.actions, n.action or ""), (*pv.rewards, n.reward)
        v = NodeView(
            node_id=n.id,
            path=n.path,
            instruction=self.instruction,
            observation=n.observation,
            history=hist,
            actions=acts,
            rewards=rews,
            done=n.done,
            won=n.won,
            valid_action=n.valid_action,
            available_actions=None if n.available_actions is None else tuple(n.available_actions),
        )
        self._views[node_id] = v
        return v

    # --- operations ---------------------------------------------------------------------
    def expandable(self, node_id: int) -> bool:
        """Not terminal, not pruned, and above `budget.max_depth` (noted when it is not)."""
        n = self.tree[node_id]
        if n.done or n.pruned:
            return False
        if not self.meter.depth_ok(n.depth):
            self.depth_blocked = True
            return False
        return True

    def exhausted(self) -> str:
        """The stop reason when nothing is left: the depth limit if it cut anything off."""
        return "budget:max_depth" if self.depth_blocked else "exhausted"

    def propose(
        self, node_ids: Sequence[int], k: int, avoid: Sequence[Sequence[str]] | None = None
    ) -> list[list[Candidate]]:
        """Up to k distinct candidates per node. A model proposer is called once per node
        (each call checked against the budget first, so limits hold exactly); others get
        one call for all nodes."""
        if not node_ids:
            return []
        seeds = []
        for i in node_ids:
            attempt = self._proposals.get(i, 0)
            self._proposals[i] = attempt + 1
            seeds.append(node_seed(node_seed(self.seed, self.tree[i].path), (attempt,)))
        views = [self.view(i) for i in node_ids]
        avoid = list(avoid) if avoid is not None else [()] * len(views)
        if self.problem.proposer.uses_model:
            return [
                self._call_proposer([v], k, [s], [a])[0] for v, s, a in zip(views, seeds, avoid)
            ]
        return self._call_proposer(views, k, seeds, avoid)

    def _call_proposer(self, views, k, seeds, avoid) -> list[list[Candidate]]:
        prop = self.problem.proposer
        self.meter.before_call(prop.uses_model)
        if hasattr(prop, "token_cap"):
            prop.token_cap = self.meter.tokens_left()
        before = getattr(prop, "num_tokens", None)
        out = prop.propose(views, k, seeds=seeds, avoid=avoid)
        if len(out) != len(views):
            raise RuntimeError(
                f"proposer {prop.name!r} returned {len(out)} lists for {len(views)} views"
            )
        if before is None:
            tokens = sum(len(c.response_ids or []) for cands in out for c in cands)
        else:
            tokens = int(prop.num_tokens) - int(before)
        self.meter.after_call(prop.uses_model, "proposer", tokens)
        return [list(c)[:k] for c in out]

    def add_child(self, parent_id: int, cand: Candidate, kind: str = "step") -> Node:
        """Step the parent's own state with `cand.action`; raises `Solved` on a win when
        the problem stops on wins, `BudgetExceeded` when no step is left."""
        parent = self.tree[parent_id]
        if parent.done:
            raise ValueError(f"node {parent_id} is terminal; it has no children")
        self.meter.charge_step()
        env = self.problem.env
        env.restore(parent.snapshot)
        obs, reward, terminated, truncated, info = env.step(cand.action)
        node = Node(
            id=len(self.tree),
            parent=parent_id,
            path=(*parent.path, len(parent.children)),
            depth=parent.depth + 1,
            observation=obs,
            action=cand.action,
            response_text=cand.response_text or cand.action,
            reward=float(reward),
            ret=parent.ret + float(reward),
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
            prior=cand.prior,
            kind=kind,
            format_ok=cand.format_ok,
            prompt_ids=cand.prompt_ids,
            response_ids=cand.response_ids,
            logprobs=cand.logprobs,
            finish_reason=cand.finish_reason,
        )
        self._fill(node, info)
        node.snapshot = env.snapshot()
        self.tree.add(node)
        self.dret[node.id] = self.dret[parent_id] + self.problem.gamma**parent.depth * node.reward
        if node.done and self.problem.answer_fn is not None:
            node.answer = self.problem.answer_fn(self.view(node.id))
        elif node.done:
            node.answer = node.observation
        if node.won and self.stop_on_win:
            raise Solved(node.id)
        return node

    def expand(self, node_id: int, k: int, avoid: Sequence[str] | None = None) -> list[Node]:
        """Propose k candidates for one node and add them all as children."""
        (cands,) = self.propose([node_id], k, None if avoid is None else [avoid])
        return [self.add_child(node_id, c) for c in cands]

    def evaluate(self, node_ids: Sequence[int]) -> list[float]:
        """Scores of the nodes (one evaluator call for all); stored on `node.value`.

        Finished nodes are scored by the env, not the evaluator: 1.0 if won, else their
        return from the root (what the env returned; no evaluator call is spent)."""
        ev = self.problem.evaluator
        todo = [i for i in node_ids if self.tree[i].value is None]
        live = [i for i in todo if not self.tree[i].done]
        for i in todo:
            if self.tree[i].done:
                self.tree[i].value = 1.0 if self.tree[i].won else float(self.tree[i].ret)
        if live and ev is None:
            for i in live:
                self.tree[i].value = float(self.tree[i].ret)
        elif live:
            self.meter.before_call(ev.uses_model)
            before = int(getattr(ev, "num_tokens", 0))
            seed = node_seed(self.seed, (*self.tree[live[0]].path, 2**31))
            if getattr(ev, "needs_context", False):
                scores = ev.score_in(self, live)
            else:
                scores = ev.score([self.view(i) for i in live], seed=seed)
            if len(scores) != len(live):
                raise RuntimeError(
                    f"evaluator {ev.name!r} returned {len(scores)} scores for {len(live)} nodes"
                )
            used = int(getattr(ev, "num_tokens", 0)) - before
            self.meter.after_call(ev.uses_model, "evaluator", used)
            for i, s in zip(live, scores):
                self.tree[i].value = float(s)
        return [float(self.tree[i].value) for i in node_ids]

    def rollout(self, node_id: int, max_steps: int) -> tuple[float, bool]:
        """Play from the node with the proposer (k=1) for up to `max_steps` unkept steps.

        Returns (discounted return of the rollout from the node, whether it was won).
        Each step is charged to `max_nodes` as a rollout step."""
        node = self.tree[node_id]
        if node.done or max_steps <= 0:
            return 0.0, node.won
        env, g = self.problem.env, self.problem.gamma
        env.restore(node.snapshot)
        view, total, won = self.view(node_id), 0.0, False
        rng_path = (*node.path, 2**30, self._proposals.get(node_id, 0))
        self._proposals[node_id] = self._proposals.get(node_id, 0) + 1
        for t in range(max_steps):
            seed = node_seed(self.seed, (*rng_path, t))
            (cands,) = self._call_proposer([view], 1, [seed], [()])
            if not cands:
                break
            self.meter.charge_step(rollout=True)
            obs, reward, term, trunc, info = env.step(cands[0].action)
            total += g**t * float(reward)
            won = bool(info.get("won", False))
            if term or trunc:
                break
            acts = info.get("available_actions")
            view = NodeView(
                node_id=-1,
                path=(*node.path, 2**30, t),
                instruction=self.instruction,
                observation=obs,
                history=(*view.history, (view.observation, cands[0].response_text)),
                actions=(*view.actions, cands[0].action),
                rewards=(*view.rewards, float(reward)),
                available_actions=None if acts is None else tuple(acts),
            )
        return total, won

    # --- results ------------------------------------------------------------------------
    def score_for_best(self, n: Node) -> tuple:
        """Sort key of the best-node choice: won first, then discounted return (shorter
        wins when gamma < 1), then the value estimate of unfinished nodes, then depth."""
        tail = 0.0 if n.done or n.value is None else n.value
        return (n.won, self.dret[n.id], tail, -n.depth if n.won else n.depth, -n.id)

    def best_node(self) -> int:
        return max(self.tree.nodes, key=self.score_for_best).id

    def won_ids(self) -> list[int]:
        return [n.id for n in self.tree.nodes if n.won]


class SearchAlgorithm:
    """Base of the built-in searches: `run` sets up the context and handles stops."""

    name = ""

    def _search(self, ctx: SearchContext) -> tuple[str, int | None]:  # pragma: no cover
        """Run the algorithm; return (stop reason, best node id or None for the default)."""
        raise NotImplementedError

    def extra_stats(self, ctx: SearchContext) -> dict[str, Any]:
        return {}

    def run(
        self,
        problem: Problem,
        budget: Budget | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> SearchResult:
        ctx = SearchContext(problem, budget or Budget(), seed, clock)
        best: int | None = None
        try:
            reason, best = self._search(ctx)
        except Solved as s:
            reason, best = "solved", s.node_id
        except BudgetExceeded as e:
            reason = f"budget:{e.limit}"
            best = self.best_on_stop(ctx)
        if best is None:
            best = ctx.best_node()
        stats = {**ctx.meter.stats(), "tree_size": len(ctx.tree), **self.extra_stats(ctx)}
        stats["max_depth_reached"] = max(n.depth for n in ctx.tree.nodes)
        stats["won_nodes"] = len(ctx.won_ids())
        return SearchResult(
            algo=self.name,
            best=ctx.tree.path_ids(best),
            tree=ctx.tree,
            stop_reason=reason,
            stats=stats,
            answer=ctx.answer,
            seed=int(seed),
            task_id=ctx.task_id,
        )

    def best_on_stop(self, ctx: SearchContext) -> int | None:
        """Best node when a budget stopped the search (None: `ctx.best_node()`)."""
        return None


def argsort_desc(values: Sequence[float], ids: Sequence[int]) -> list[int]:
    """`ids` sorted by value, highest first; ties keep creation order (lower id first)."""
    order = np.lexsort((np.asarray(ids), -np.asarray(values, dtype=float)))
    return [ids[i] for i in order]
