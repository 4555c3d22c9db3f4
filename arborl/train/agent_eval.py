"""Held-out evaluation of `rollout.mode=agent`: the agent program on the eval tasks.

The same contract as `arborl.train.evaluate.evaluate_share` (one episode per task seed,
paired outcomes, the first `eval.save_episodes` trajectories), but each episode is the
program talking to the policy through a gateway at `eval.temperature`, so "before" and
"after" RL measure the agent as users run it.
"""

from __future__ import annotations

from dataclasses import replace

from arborl.envs import make_pool
from arborl.generation.base import row_seed
from arborl.rollout.agents import AgentProgram, run_agent_rollout
from arborl.rollout.config import with_turn_limit
from arborl.train.build import pool_options
from arborl.train.config import TrainConfig
from arborl.train.evaluate import share_metrics


def evaluate_agent_share(
    backend, tokenizer, cfg: TrainConfig, seeds: list[int], sample_seed: int
) -> dict:
    """One agent episode per task of `seeds` in `env.eval_split`, `eval.chunk_episodes`
    at a time; `evaluate_share`'s keys (an episode that failed counts as lost and in
    `env_errors`)."""
    ev, env = cfg.eval, cfg.env
    n = len(seeds)
    program = AgentProgram.from_config(cfg.agent_program)
    opts = {**pool_options(cfg), **with_turn_limit(env.kwargs, cfg.rollout.max_turns)}
    chunk = ev.chunk_episodes or n
    episodes, trajectories = [], []
    for c in range(0, n, chunk):
        part = seeds[c : c + chunk]
        roll = replace(cfg.rollout, group_size=1, num_tasks=len(part), temperature=ev.temperature,
                       seed=row_seed(sample_seed, c))  # fmt: skip
        pool = make_pool(env.id, len(part), env.pool_mode, split=env.eval_split, **opts)
        try:
            res = run_agent_rollout(backend, tokenizer, pool, part, roll, cfg.agent_program,
                                    env.eval_split, env.id, program=program)  # fmt: skip
        finally:
            pool.close()
        episodes += res.episodes
        trajectories += res.trajectories
    return share_metrics(episodes, trajectories, seeds, ev.save_episodes)
