"""Build proposers, evaluators and problems from names (what the CLI, eval and bench share).

    proposer = make_proposer("policy", backend=backend, tokenizer=tok, agent_cfg=agent)
    evaluator = make_evaluator("heuristic", env_id="arborl/Maze-v0")
    problem = make_problem("arborl/Maze-v0", proposer, evaluator, seed=3)

`search_tasks` runs one search per task seed and summarises success with a Wilson 95%
interval, the figures `arborl eval --search` and `bench/search_scaling.py` report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from arborl.search.base import Budget, SearchResult
from arborl.search.evaluators import (
    PolicyJudgeEvaluator,
    RolloutEvaluator,
    heuristic_evaluator,
)
from arborl.search.problem import Problem
from arborl.search.proposers import ActionsProposer, LMProposer, RankedActionsProposer
from arborl.search.registry import make_search

PROPOSERS = ("actions", "policy", "ranked")
"""`actions`: the env's available_actions; `policy`: the LM samples k distinct actions;
`ranked`: the env's available_actions ranked by the policy's probability of each."""
EVALUATORS = ("heuristic", "rollout", "judge", "none")
"""`heuristic`: the env's built-in heuristic; `rollout`: a proposer rollout to the end;
`judge`: the policy's P(yes) to "can this still be solved?"; `none`: the return so far.
Besides these, `rm:PATH_OR_URL` scores nodes with a reward model (`arborl rm train` output or
an `arborl rm serve` URL; the token comes from ARBORL_TOKEN)."""


def make_proposer(name: str, backend: Any = None, tokenizer: Any = None, **kw: Any):
    """`actions`, `policy` or `ranked` (the last two need `backend` and `tokenizer`; `kw`
    go to LMProposer)."""
    if name == "actions":
        return ActionsProposer()
    if name == "policy":
        if backend is None or tokenizer is None:
            raise ValueError(
                "proposer 'policy' needs an LM: pass --policy <preset|checkpoint dir|URL>, "
                "or use --proposer actions to expand with the env's available_actions"
            )
        return LMProposer(backend, tokenizer, **kw)
    if name == "ranked":
        if backend is None or tokenizer is None:
            raise ValueError("proposer 'ranked' needs an LM: pass --policy <preset|dir>")
        return RankedActionsProposer(LMProposer(backend, tokenizer, **kw))
    raise ValueError(f"proposer={name!r} is not one of {list(PROPOSERS)}")


def make_evaluator(name: str, env_id: str = "", backend: Any = None, tokenizer: Any = None):
    """An evaluator by name (see `EVALUATORS`); `judge` needs an in-process HF model."""
    if name == "heuristic":
        return heuristic_evaluator(env_id)
    if name == "rollout":
        return RolloutEvaluator(max_steps=16)
    if name == "judge":
        model = getattr(backend, "model", None)
        if model is None:
            raise ValueError("evaluator 'judge' needs an in-process policy (a preset or dir)")
        return PolicyJudgeEvaluator(model, tokenizer)
    if name == "none":
        return None
    if name.startswith("rm:"):  # a reward model: a saved RM directory or an `rm serve` URL
        from arborl.rewards.rm_evaluator import load_rm_evaluator

        return load_rm_evaluator(name[3:])
    raise ValueError(
        f"evaluator={name!r} is not one of {list(EVALUATORS)} or rm:PATH_OR_URL (a reward model)"
    )


def make_problem(
    env_id: str,
    proposer: Any,
    evaluator: Any,
    seed: int | None = 0,
    task: dict | None = None,
    split: str = "test",
    env_kwargs: dict | None = None,
    **kw: Any,
) -> Problem:
    """A `Problem` on a fresh `env_id` env posed `task` (or the task `seed` draws)."""
    import arborl.envs as envs

    env = envs.make(env_id, **(env_kwargs or {}))
    return Problem(
        env, proposer, evaluator, task=task, seed=seed, reset_options={"split": split}, **kw
    )


def search_tasks(
    algo: str,
    params: dict,
    problems: Sequence[Problem],
    budget: Budget,
    seed: int = 0,
) -> tuple[list[SearchResult], dict[str, float]]:
    """One search per problem (search seed `seed + i`); results and summary figures."""
    from arborl.rollout.metrics import wilson_interval

    start = time.perf_counter()
    search = make_search(algo, **params)
    results = [search.run(p, budget, seed=seed + i) for i, p in enumerate(problems)]
    n, k = len(results), sum(r.won for r in results)
    lo, hi = wilson_interval(k, n)
    nodes = [r.best_node for r in results]
    summary = {
        "success_rate": k / max(1, n),
        "success_ci_low": lo,
        "success_ci_high": hi,
        "mean_return": sum(x.ret for x in nodes) / max(1, n),
        "mean_turns": sum(len(r.actions) for r in results) / max(1, n),
        "invalid_action_rate": _invalid_rate(results),
        "mean_nodes": sum(r.stats["nodes"] for r in results) / max(1, n),
        "mean_model_calls": sum(r.stats["model_calls"] for r in results) / max(1, n),
        "mean_tokens": sum(r.stats["tokens"] for r in results) / max(1, n),
        "episodes": float(n),
        "wall_s": time.perf_counter() - start,
    }
    summary["stop_reasons"] = _count(r.stop_reason for r in results)
    return results, summary


def _invalid_rate(results: Sequence[SearchResult]) -> float:
    steps = [r.tree[i] for r in results for i in r.best[1:]]
    return sum(not s.valid_action for s in steps) / max(1, len(steps))


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out
