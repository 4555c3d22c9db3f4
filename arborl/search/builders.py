"""Build proposers, evaluators and problems from names (what the CLI, eval and bench share).

    proposer = make_proposer("policy", backend=backend, tokenizer=tok, agent_cfg=agent)
    evaluator = make_evaluator("heuristic", env_id="arborl/Maze-v0")
    problem = make_problem("arborl/Maze-v0", proposer, evaluator, seed=3)

`search_tasks` runs one search per task seed and summarises success with a Wilson 95%
interval (`success_lo`, `success_hi`), the figures `bench/search_scaling.py` reports;
`evaluate_search` does the same on the envs an evaluation uses (its pool mode, env kwargs
and turn limit), the row `arborl eval --search` prints.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from arborl.search.base import Budget, SearchResult
from arborl.search.problem import Problem
from arborl.search.registry import ARG_EVALUATORS, EVALUATORS, PROPOSERS, make_search

DEFAULT_ROLLOUT_DEPTH = 16
"""Steps of a `rollout` evaluator's playout when the caller names none (what `arborl
search`, `arborl eval --search` and `bench/search_scaling.py` have always used; training
trees pass their own, `arborl.search.training.TREE_ROLLOUT_DEPTH`)."""


def make_proposer(name: str, backend: Any = None, tokenizer: Any = None, **kw: Any):
    """The proposer `name` of `PROPOSERS` (`policy` and `ranked` need `backend` and
    `tokenizer`; `kw` go to LMProposer)."""
    return PROPOSERS.get(name)(backend, tokenizer, **kw)


def make_evaluator(
    name: str,
    env_id: str = "",
    backend: Any = None,
    tokenizer: Any = None,
    *,
    rollout_depth: int = DEFAULT_ROLLOUT_DEPTH,
    heuristic_fallback: bool = False,
):
    """An evaluator by name (see `EVALUATORS`; `rm:PATH_OR_URL` for a reward model).

    rollout_depth: steps of a `rollout` evaluator's playout.
    heuristic_fallback: `heuristic` on an env without a built-in heuristic gives no
    evaluator (nodes keep their return so far) instead of raising.
    `judge` needs an in-process HF model (`backend.model`)."""
    key, sep, arg = name.partition(":")
    if key in EVALUATORS and bool(sep) != (key in ARG_EVALUATORS):
        raise EVALUATORS.unknown(name)  # `rm` needs its `:PATH_OR_URL`, the others take none
    return EVALUATORS.get(key)(
        arg if sep else None,
        env_id=env_id,
        backend=backend,
        tokenizer=tokenizer,
        rollout_depth=rollout_depth,
        heuristic_fallback=heuristic_fallback,
    )


# --- the factories the registries name (arborl.search.registry) -----------------------------
def _needs_lm(name: str, backend: Any, tokenizer: Any, fix: str) -> None:
    if backend is None or tokenizer is None:
        raise ValueError(f"proposer {name!r} needs an LM: {fix}")


def actions_proposer(backend: Any = None, tokenizer: Any = None, **kw: Any):
    from arborl.search.proposers import ActionsProposer

    return ActionsProposer()


def policy_proposer(backend: Any = None, tokenizer: Any = None, **kw: Any):
    from arborl.search.proposers import LMProposer

    _needs_lm(
        "policy",
        backend,
        tokenizer,
        "pass --policy <preset|checkpoint dir|URL>, or use --proposer actions to expand "
        "with the env's available_actions",
    )
    return LMProposer(backend, tokenizer, **kw)


def ranked_proposer(backend: Any = None, tokenizer: Any = None, **kw: Any):
    from arborl.search.proposers import LMProposer, RankedActionsProposer

    _needs_lm("ranked", backend, tokenizer, "pass --policy <preset|dir>")
    return RankedActionsProposer(LMProposer(backend, tokenizer, **kw))


def heuristic_evaluator(arg, *, env_id: str, heuristic_fallback: bool = False, **_: Any):
    from arborl.search import evaluators

    if heuristic_fallback and env_id not in evaluators.HEURISTICS:
        return None
    return evaluators.heuristic_evaluator(env_id)


def rollout_evaluator(arg, *, rollout_depth: int = DEFAULT_ROLLOUT_DEPTH, **_: Any):
    from arborl.search.evaluators import RolloutEvaluator

    return RolloutEvaluator(max_steps=rollout_depth)


def judge_evaluator(arg, *, backend: Any = None, tokenizer: Any = None, **_: Any):
    from arborl.search.evaluators import PolicyJudgeEvaluator

    model = getattr(backend, "model", None)
    if model is None:
        raise ValueError("evaluator 'judge' needs an in-process policy (a preset or dir)")
    return PolicyJudgeEvaluator(model, tokenizer)


def none_evaluator(arg, **_: Any):
    return None


def rm_evaluator(arg, **_: Any):
    """A reward model: a saved RM directory or an `arborl rm serve` URL (`rm:PATH_OR_URL`)."""
    if not arg:
        raise ValueError("evaluator 'rm' needs a reward model: write rm:PATH_OR_URL")
    from arborl.rewards.rm_evaluator import load_rm_evaluator

    return load_rm_evaluator(arg)


def make_problem(
    env_id: str,
    proposer: Any,
    evaluator: Any,
    seed: int | None = 0,
    task: dict | None = None,
    split: str = "test",
    env_kwargs: dict | None = None,
    env: Any = None,
    **kw: Any,
) -> Problem:
    """A `Problem` on a fresh `env_id` env posed `task` (or the task `seed` draws); `env`:
    an instance to use instead (e.g. a remote pool's `pool[i]`, built with `env_kwargs`)."""
    import arborl.envs as envs

    if env is None:
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
        "success": k / max(1, n),
        "success_lo": lo,
        "success_hi": hi,
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


def evaluate_search(
    env_id: str,
    seeds: Sequence[int],
    algo: str,
    params: dict[str, Any],
    budget: Budget,
    *,
    proposer: Any,
    evaluator: Any = None,
    split: str = "test",
    pool_mode: str | None = None,
    pool_options: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    max_turns: int | None = None,
    gamma: float = 1.0,
    stop_on_win: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """`search_tasks`' summary of search `algo` solving the task of each of `seeds`.

    The envs are those a policy's evaluation on the same seeds uses, so rows stay paired:
    built with `env_kwargs` and the turn limit `max_turns` (None: the env's), in `pool_mode`
    (None or "auto": the env package's preferred isolation; a packaged env's search then runs
    in its venv, forking branches by remote snapshot/restore), `pool_options` going to
    `make_pool` (e.g. `timeout_s`, `urls`). Search `i` uses seed `seed + i`.

    Besides `search_tasks`' figures the summary says what the row measured:
    `main_stop_reason` (the commonest, with its count: "budget:max_nodes 9/10") and
    `policy_called` (False when no model call was made: an `actions` proposer with a
    non-LM evaluator searches with the env's actions alone, so a success is the search's,
    not the policy's)."""
    from arborl.envs import make_pool
    from arborl.envs.modes import resolve_mode
    from arborl.rollout.config import with_turn_limit

    env_kwargs = with_turn_limit(env_kwargs or {}, max_turns)
    pool = None
    try:
        mode = resolve_mode(env_id, pool_mode)
        if mode != "inproc":
            opts = {**(pool_options or {}), **env_kwargs}
            pool = make_pool(env_id, len(seeds), mode, split=split, **opts)
        problems = [
            make_problem(
                env_id,
                proposer,
                evaluator,
                seed=s,
                split=split,
                env_kwargs=env_kwargs,
                env=None if pool is None else pool[i],
                gamma=gamma,
                stop_on_win=stop_on_win,
            )
            for i, s in enumerate(seeds)
        ]
        _, summary = search_tasks(algo, params, problems, budget, seed)
    finally:
        if pool is not None:
            pool.close()
    reasons = summary["stop_reasons"]
    main = max(sorted(reasons), key=reasons.get) if reasons else "none"
    summary["main_stop_reason"] = f"{main} {reasons.get(main, 0)}/{len(seeds)}"
    summary["policy_called"] = summary["mean_model_calls"] > 0
    return summary


def _invalid_rate(results: Sequence[SearchResult]) -> float:
    steps = [r.tree[i] for r in results for i in r.best[1:]]
    return sum(not s.valid_action for s in steps) / max(1, len(steps))


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out
