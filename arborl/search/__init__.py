"""Branching search over env decisions: ToT, DFSDT, MCTS, GoT, best-of-N, self-consistency,
beam search with a PRM, behind one interface.

    from arborl.search import Budget, Problem, run, ActionsProposer, heuristic_evaluator
    env = arborl.envs.make("arborl/Game24-v0")
    problem = Problem(env, ActionsProposer(), heuristic_evaluator("arborl/Game24-v0"), seed=3)
    result = run(problem, Budget(max_nodes=200), seed=0, algo="mcts")
    result.won, result.actions, result.stop_reason, result.tree

See `arborl.search.base` for the protocols (Proposer, Evaluator, Budget, SearchResult).
"""

from __future__ import annotations

from typing import Any

from arborl.search.base import (
    STOP_REASONS,
    Budget,
    BudgetExceeded,
    BudgetMeter,
    Candidate,
    Evaluator,
    Node,
    NodeView,
    Proposer,
    Search,
    SearchResult,
    SearchTree,
    node_seed,
)
from arborl.search.evaluators import (
    HEURISTICS,
    FunctionEvaluator,
    HeuristicEvaluator,
    PolicyJudgeEvaluator,
    RolloutEvaluator,
    ValueModelEvaluator,
    heuristic_evaluator,
)
from arborl.search.problem import Problem, SearchAlgorithm, SearchContext, Solved
from arborl.search.proposers import (
    ActionsProposer,
    FunctionProposer,
    LMProposer,
    RankedActionsProposer,
)
from arborl.search.registry import ALGORITHMS, make_search, register_search, search_params


def run(
    problem: Problem,
    budget: Budget | None = None,
    seed: int = 0,
    algo: str = "mcts",
    **params: Any,
) -> SearchResult:
    """Run search `algo` (an id of `ALGORITHMS`, built with `params`) on `problem`."""
    return make_search(algo, **params).run(problem, budget or Budget(), seed)


__all__ = [
    "ALGORITHMS",
    "HEURISTICS",
    "STOP_REASONS",
    "ActionsProposer",
    "Budget",
    "BudgetExceeded",
    "BudgetMeter",
    "Candidate",
    "Evaluator",
    "FunctionEvaluator",
    "FunctionProposer",
    "HeuristicEvaluator",
    "LMProposer",
    "Node",
    "NodeView",
    "PolicyJudgeEvaluator",
    "RankedActionsProposer",
    "Problem",
    "Proposer",
    "RolloutEvaluator",
    "Search",
    "SearchAlgorithm",
    "SearchContext",
    "SearchResult",
    "SearchTree",
    "Solved",
    "ValueModelEvaluator",
    "heuristic_evaluator",
    "make_search",
    "node_seed",
    "register_search",
    "run",
    "search_params",
]
