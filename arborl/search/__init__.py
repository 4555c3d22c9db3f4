"""Branching search over env decisions: ToT, DFSDT, MCTS, GoT, best-of-N, self-consistency,
beam search with a PRM, behind one interface.

    from arborl.search import Budget, Problem, run, ActionsProposer, heuristic_evaluator
    env = arborl.envs.make("arborl/Game24-v0")
    problem = Problem(env, ActionsProposer(), heuristic_evaluator("arborl/Game24-v0"), seed=3)
    result = run(problem, Budget(max_nodes=200), seed=0, algo="mcts")
    result.won, result.actions, result.stop_reason, result.tree

See `arborl.search.base` for the protocols (Proposer, Evaluator, Budget, SearchResult).

Names load on first use (PEP 562), as in `arborl.rollout`: `arborl search --help` reads
the ids in `arborl.search.registry`, and must not import the evaluators (and through them
the envs, Gymnasium and numpy) to do it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arborl.lazy import lazy_exports

if TYPE_CHECKING:
    from arborl.search.base import Budget, SearchResult
    from arborl.search.problem import Problem

_EXPORTS = {
    "arborl.search.base": (
        "STOP_REASONS",
        "Budget",
        "BudgetExceeded",
        "BudgetMeter",
        "Candidate",
        "Evaluator",
        "Node",
        "NodeView",
        "Proposer",
        "Search",
        "SearchResult",
        "SearchTree",
        "node_seed",
    ),
    "arborl.search.evaluators": (
        "HEURISTICS",
        "FunctionEvaluator",
        "HeuristicEvaluator",
        "PolicyJudgeEvaluator",
        "RolloutEvaluator",
        "ValueModelEvaluator",
        "heuristic_evaluator",
    ),
    "arborl.search.problem": ("Problem", "SearchAlgorithm", "SearchContext", "Solved"),
    "arborl.search.proposers": (
        "ActionsProposer",
        "FunctionProposer",
        "LMProposer",
        "RankedActionsProposer",
    ),
    "arborl.search.registry": ("ALGORITHMS", "make_search", "register_search", "search_params"),
}


def run(
    problem: Problem,
    budget: Budget | None = None,
    seed: int = 0,
    algo: str = "mcts",
    **params: Any,
) -> SearchResult:
    """Run search `algo` (an id of `ALGORITHMS`, built with `params`) on `problem`."""
    from arborl.search.base import Budget
    from arborl.search.registry import make_search

    return make_search(algo, **params).run(problem, budget or Budget(), seed)


__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS, own=("run",))
