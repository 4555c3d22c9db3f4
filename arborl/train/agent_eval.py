"""Held-out evaluation of `rollout.mode=program`: the agent program on the eval tasks.

The same contract as `arborl.train.evaluate.evaluate_share` (one episode per task seed,
paired outcomes, the first `eval.save_episodes` trajectories), but each episode is the
program talking to the policy through the run's gateway at `eval.temperature`, so "before"
and "after" RL measure the agent as users run it. The envs come from the run's `pools`,
as the prompt loop's evaluation does.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from arborl.envs.poolset import PoolSet
from arborl.generation.base import row_seed
from arborl.generation.gateway import Gateway
from arborl.rollout.agents import AgentProgram, run_agent_rollout, start_gateway
from arborl.rollout.config import with_turn_limit
from arborl.train.build import build_pool_set
from arborl.train.config import TrainConfig
from arborl.train.evaluate import share_metrics


def evaluate_agent_share(
    backend, tokenizer, cfg: TrainConfig, seeds: list[int], sample_seed: int,
    pools: PoolSet | None = None, service: Gateway | None = None,
) -> dict:  # fmt: skip
    """One agent episode per task of `seeds` in `env.eval_split`, `eval.chunk_episodes`
    at a time, on the run's `pools` and gateway (`service`; without either, one built for
    this call and closed after it); `evaluate_share`'s keys (an episode that failed
    counts as lost and in `env_errors`)."""
    ev, env = cfg.eval, cfg.env
    n = len(seeds)
    program = AgentProgram.from_config(cfg.agent_program)
    env_kwargs = with_turn_limit(env.kwargs, cfg.rollout.max_turns)
    chunk = ev.chunk_episodes or n
    episodes, trajectories = [], []
    with contextlib.ExitStack() as own:
        if pools is None:
            pools = own.enter_context(build_pool_set(cfg))
        if service is None:
            service = own.enter_context(start_gateway(backend, tokenizer, cfg.agent_program))
        for c in range(0, n, chunk):
            part = seeds[c : c + chunk]
            roll = replace(cfg.rollout, group_size=1, num_tasks=len(part),
                           temperature=ev.temperature, seed=row_seed(sample_seed, c))  # fmt: skip
            pool = pools.get(len(part), env.eval_split, **env_kwargs)
            res = run_agent_rollout(backend, tokenizer, pool, part, roll, cfg.agent_program,
                                    env.eval_split, env.id, program=program, gateway=service)  # fmt: skip
            episodes += res.episodes
            trajectories += res.trajectories
    return share_metrics(episodes, trajectories, seeds, ev.save_episodes)
