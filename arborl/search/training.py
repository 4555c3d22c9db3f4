"""Search rollouts for the RL trainer (`rollout.mode=tree`, settings in `search.*`).

`tree_rollout` returns the same `RolloutResult` as `run_rollout`: one search tree per task
seed, grown by the policy itself (`LMProposer`, so every node keeps the tokens and logprobs
it was sampled with), exported as step-layout rows with `arborl.search.export`. Each row is
a one-turn episode whose reward is the node's tree advantage (`search.tree_adv`) and whose
`group_id` is its sibling group, so the trainer's group estimators (GRPO, RLOO) normalise
among siblings. Trees do not stop at the first win (siblings of a winning step are the
training signal). The sampling settings come from the `RolloutConfig`, the tree settings
from the `SearchConfig`, both passed explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from arborl.search.base import Budget
from arborl.search.builders import make_evaluator
from arborl.search.config import SearchConfig
from arborl.search.export import tree_episodes
from arborl.search.problem import Problem
from arborl.search.proposers import LMProposer
from arborl.search.registry import make_search

TREE_ROLLOUT_DEPTH = 8
"""Playout steps of `search.evaluator=rollout` in training trees (shorter than the
standalone search's `builders.DEFAULT_ROLLOUT_DEPTH`: every step is a policy call)."""


def grow_trees(
    backend, tokenizer, pool, seeds, rollout_cfg, search_cfg: SearchConfig, agent_cfg, split: str
) -> list:
    """One `SearchResult` per seed, each tree grown by the policy on `pool[i]`."""
    if len(pool) < len(seeds):
        raise ValueError(f"tree rollout needs one env per seed: {len(pool)} < {len(seeds)}")
    r = rollout_cfg
    proposer = LMProposer(
        backend,
        tokenizer,
        agent_cfg,
        max_new_tokens=r.max_new_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=r.top_k,
        max_prompt_tokens=r.max_prompt_tokens,
    )
    evaluator = make_evaluator(
        search_cfg.evaluator,
        getattr(pool[0], "env_id", ""),
        rollout_depth=TREE_ROLLOUT_DEPTH,
        heuristic_fallback=True,
    )
    search = make_search(search_cfg.algo, **dict(search_cfg.params or {}))
    budget = Budget(max_nodes=search_cfg.budget, max_depth=r.max_turns)
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
        results.append(search.run(problem, budget, seed=(r.seed or 0) * 1_000_003 + i))
    return results


def tree_rollout(
    backend: Any,
    tokenizer: Any,
    pool: Any,
    seeds: Sequence[int],
    rollout_cfg: Any,
    search_cfg: SearchConfig,
    agent_cfg: Any = None,
    split: str = "train",
) -> Any:
    """One search tree per seed on `pool[i]`; a `RolloutResult` whose batch is the trees'
    nodes as training rows (see the module docstring). `rollout_cfg` is a `RolloutConfig`
    (sampling, turn limit, seed), `search_cfg` a `SearchConfig` (the tree)."""
    from arborl.agent import AgentConfig
    from arborl.rollout.batching import build_step_batch
    from arborl.rollout.episode import to_trajectory
    from arborl.rollout.loop import RolloutResult

    if not isinstance(search_cfg, SearchConfig):
        raise TypeError(
            f"tree_rollout(..., rollout_cfg, search_cfg, agent_cfg): search_cfg must be a "
            f"SearchConfig (the train config's `search` section), got {type(search_cfg).__name__}"
        )
    cfg = rollout_cfg
    start = time.perf_counter()
    search_cfg.validate()  # a SearchConfig changed after construction is checked again
    agent_cfg = agent_cfg or AgentConfig()
    results = grow_trees(backend, tokenizer, pool, seeds, cfg, search_cfg, agent_cfg, split)
    trees = [r.tree for r in results]
    task_ids = [r.task_id or f"seed-{s}" for r, s in zip(results, seeds)]
    instr = getattr(pool[0], "instruction", "")
    episodes = tree_episodes(trees, search_cfg.tree_adv, True, task_ids, list(seeds), instr)
    batch = build_step_batch(episodes, tokenizer.pad_token_id)
    batch.info["temperature"] = cfg.temperature
    rows = [ep.turns[0] for ep in episodes]
    n = len(results)
    stats = {
        "success": sum(r.won for r in results) / n,
        "mean_return": sum(r.best_node.ret for r in results) / n,
        "mean_turns": sum(len(r.actions) for r in results) / n,
        "invalid_action_rate": sum(not t.valid_action for t in rows) / max(1, len(rows)),
        "tree_nodes": float(sum(len(t) for t in trees)),
        "episodes": float(n),
        "wall_s": time.perf_counter() - start,
    }
    meta = {"policy": "lm", "split": split, "mode": "tree", "search": search_cfg.algo}
    env_id = getattr(pool[0], "env_id", "")
    trajectories = [to_trajectory(ep, env_id, meta) for ep in episodes]
    if trajectories:  # the first tree, whole, for the run report's tree view
        trajectories[0].meta["search_tree"] = results[0].to_dict()
    return RolloutResult(batch=batch, trajectories=trajectories, stats=stats, episodes=episodes)
