"""Search rollouts for the RL trainer (`rollout.mode=tree`).

`tree_rollout` has `run_rollout`'s signature and returns the same `RolloutResult`: one
search tree per task seed, grown by the policy itself (`LMProposer`, so every node keeps
the tokens and logprobs it was sampled with), exported as step-layout rows with
`arborl.search.export`. Each row is a one-turn episode whose reward is the node's tree
advantage (`rollout.tree_adv`) and whose `group_id` is its sibling group, so the trainer's
group estimators (GRPO, RLOO) normalise among siblings. Trees do not stop at the first win
(siblings of a winning step are the training signal).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from arborl.search.base import Budget
from arborl.search.evaluators import HEURISTICS, RolloutEvaluator, heuristic_evaluator
from arborl.search.export import ADV_MODES, tree_episodes
from arborl.search.problem import Problem
from arborl.search.proposers import LMProposer
from arborl.search.registry import make_search

EVALUATORS = ("heuristic", "rollout", "none")


def make_tree_evaluator(name: str, env_id: str):
    """The evaluator a training tree uses: 'heuristic' (the env's, if it has one),
    'rollout' (a policy rollout to the end) or 'none' (each node's return so far)."""
    if name == "heuristic":
        return heuristic_evaluator(env_id) if env_id in HEURISTICS else None
    if name == "rollout":
        return RolloutEvaluator(max_steps=8)
    if name == "none":
        return None
    raise ValueError(f"rollout.search_evaluator={name!r} is not one of {list(EVALUATORS)}")


def grow_trees(backend, tokenizer, pool, seeds, cfg, agent_cfg, split: str) -> list:
    """One `SearchResult` per seed, each tree grown by the policy on `pool[i]`."""
    if len(pool) < len(seeds):
        raise ValueError(f"tree rollout needs one env per seed: {len(pool)} < {len(seeds)}")
    proposer = LMProposer(
        backend,
        tokenizer,
        agent_cfg,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_prompt_tokens=cfg.max_prompt_tokens,
    )
    evaluator = make_tree_evaluator(cfg.search_evaluator, getattr(pool[0], "env_id", ""))
    search = make_search(cfg.search_algo, **dict(cfg.search_params or {}))
    budget = Budget(max_nodes=cfg.search_budget, max_depth=cfg.max_turns)
    results = []
    for i, s in enumerate(seeds):
        problem = Problem(
            pool[i],
            proposer,
            evaluator,
            seed=int(s),
            stop_on_win=False,
            reset_options={"split": split},
        )
        results.append(search.run(problem, budget, seed=(cfg.seed or 0) * 1_000_003 + i))
    return results


def tree_rollout(
    backend: Any,
    tokenizer: Any,
    pool: Any,
    seeds: Sequence[int],
    cfg: Any,
    agent_cfg: Any = None,
    split: str = "train",
) -> Any:
    """One search tree per seed on `pool[i]`; a `RolloutResult` whose batch is the trees'
    nodes as training rows (see the module docstring). `cfg` is a `RolloutConfig`."""
    from arborl.agent import AgentConfig
    from arborl.rollout.batching import build_step_batch
    from arborl.rollout.engine import RolloutResult
    from arborl.rollout.episode import to_trajectory

    start = time.perf_counter()
    if cfg.tree_adv not in ADV_MODES:
        raise ValueError(f"rollout.tree_adv={cfg.tree_adv!r} is not one of {list(ADV_MODES)}")
    results = grow_trees(backend, tokenizer, pool, seeds, cfg, agent_cfg or AgentConfig(), split)
    trees = [r.tree for r in results]
    task_ids = [r.task_id or f"seed-{s}" for r, s in zip(results, seeds)]
    instr = getattr(pool[0], "instruction", "")
    episodes = tree_episodes(trees, cfg.tree_adv, True, task_ids, list(seeds), instr)
    batch = build_step_batch(episodes, tokenizer.pad_token_id)
    batch.info["temperature"] = cfg.temperature
    rows = [ep.turns[0] for ep in episodes]
    n = len(results)
    stats = {
        "success_rate": sum(r.won for r in results) / n,
        "mean_return": sum(r.best_node.ret for r in results) / n,
        "mean_turns": sum(len(r.actions) for r in results) / n,
        "invalid_action_rate": sum(not t.valid_action for t in rows) / max(1, len(rows)),
        "tree_nodes": float(sum(len(t) for t in trees)),
        "episodes": float(n),
        "wall_s": time.perf_counter() - start,
    }
    meta = {"policy": "lm", "split": split, "mode": "tree", "search": cfg.search_algo}
    env_id = getattr(pool[0], "env_id", "")
    trajectories = [to_trajectory(ep, env_id, meta) for ep in episodes]
    return RolloutResult(batch=batch, trajectories=trajectories, stats=stats, episodes=episodes)
