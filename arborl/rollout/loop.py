"""The multi-turn rollout loop over a pool of envs.

Each turn (lockstep, the default) the policy acts for the live episodes only (for an LM: one `generate` call over
exactly those rows), the pool steps exactly those envs, and each episode ends on its own:
the env terminates or truncates, the turn limit, the generated-token budget, or (episode
view) a context that outgrew `max_prompt_tokens`. Groups of `group_size` episodes share a
seed, hence a task; `group_id` is the task's index in the call. With `cfg.async_envs`
episodes do not wait for each other's env steps (`arborl.rollout.scheduler`); the
trajectories are the same.

    result = run_rollout(backend, tokenizer, "arborl/Maze-v0", seeds, RolloutConfig(), AgentConfig())
    result.batch, result.trajectories, result.stats
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arborl.agent import AgentConfig
from arborl.data.batch import Batch
from arborl.data.trajectory import Trajectory
from arborl.envs import Pool, make_pool
from arborl.envs.poolset import PoolSet
from arborl.generation.base import GenerationBackend
from arborl.rollout.batching import build_batch
from arborl.rollout.config import RolloutConfig, with_turn_limit
from arborl.rollout.episode import EpisodeState, TurnRecord, to_trajectory
from arborl.rollout.metrics import episode_stats
from arborl.rollout.policies import Decision, LMPolicy, Policy, make_lm_policy
from arborl.rollout.scheduler import run_async


@dataclass
class RolloutResult:
    """What one rollout call produced."""

    batch: Batch | None
    """Training rows in `cfg.view` (None for non-LM policies: they produce no tokens)."""
    trajectories: list[Trajectory]
    """One record per episode, group by group."""
    stats: dict[str, float]
    """Aggregate figures (see `arborl.rollout.metrics.episode_stats`)."""
    episodes: list[EpisodeState] = field(default_factory=list)
    """The raw per-episode records (token ids, logprobs, anchors)."""


def draw_seeds(num_tasks: int, seed: int | None) -> list[int]:
    """`num_tasks` task seeds from `seed` (explicit RNG; None draws fresh entropy)."""
    rng = np.random.default_rng(seed)
    return [int(s) for s in rng.integers(0, 2**31 - 1, size=num_tasks)]


def _resolve_pool(
    pool_or_env_id: Pool | PoolSet | str,
    num_envs: int,
    split: str,
    env_kwargs: dict[str, Any],
    pool_mode: str = "inproc",
    pool_options: dict[str, Any] | None = None,
) -> tuple[Pool, str]:
    """A pool given; one of a run's `PoolSet` (its mode, options and workers; kept open
    for the run's next calls); or one built for an env id in `pool_mode`
    (`arborl.envs.make_pool`; "auto": the env package's preferred mode), so evaluation and
    the CLI isolate envs exactly as training does."""
    if isinstance(pool_or_env_id, PoolSet):
        return pool_or_env_id.get(num_envs, split, **env_kwargs), pool_or_env_id.env_id
    if isinstance(pool_or_env_id, str):
        opts = {**(pool_options or {}), **env_kwargs}
        return make_pool(pool_or_env_id, num_envs, pool_mode, split=split, **opts), pool_or_env_id
    pool = pool_or_env_id
    if len(pool) != num_envs:
        raise ValueError(
            f"the pool has {len(pool)} envs but the rollout needs num_tasks x group_size = "
            f"{num_envs}; build EnvPool(env_id, {num_envs}) or change the seeds / group_size"
        )
    env_id = getattr(pool[0], "env_id", "") or type(pool[0]).__name__
    return pool, env_id


def _start_episodes(pool: Pool, seeds: Sequence[int], cfg: RolloutConfig, options) -> list:
    obs, infos = pool.reset(list(seeds), cfg.group_size, options)
    run = uuid.uuid4().hex[:8]
    episodes = []
    for i, (o, info) in enumerate(zip(obs, infos)):
        env = pool[i]
        g = i // cfg.group_size
        env_limit = int(getattr(env, "max_turns", 0) or 10**9)
        episodes.append(
            EpisodeState(
                index=i,
                group_id=g,
                traj_id=f"{run}-{g}-{i % cfg.group_size}",
                seed=int(seeds[g]),
                task_id=str(info.get("task_id", f"seed-{seeds[g]}")),
                instruction=getattr(env, "instruction", ""),
                observation=o,
                info=info,
                max_turns=min(cfg.max_turns or env_limit, env_limit),
            )
        )
        if info.get("env_error"):  # a remote env that could not even be reset
            episodes[-1].end("env_error")
    return episodes


def _apply(ep: EpisodeState, d: Decision, result, cfg: RolloutConfig) -> None:
    """Record a stepped turn and end the episode if a limit is reached."""
    turn = TurnRecord(
        observation=ep.observation,
        action=d.action or "",
        response_text=d.response_text,
        format_ok=d.format_ok,
        anchor=ep.info.get("anchor"),
        potential=ep.info.get("potential"),
        reward=result.reward,
        terminated=result.terminated,
        truncated=result.truncated,
        info=result.info,
        prompt_ids=d.prompt_ids,
        response_ids=d.response_ids,
        logprobs=d.logprobs,
        finish_reason=d.finish_reason,
        prompt_truncated=d.prompt_truncated,
        choice=d.choice,
    )
    ep.turns.append(turn)
    ep.observation, ep.info = result.obs, result.info
    ep.generated_tokens += len(d.response_ids or [])
    if result.terminated:
        ep.done = True
    elif result.info.get("env_error"):  # a remote pool's failed call ends only this episode
        ep.end("env_error")
    elif result.truncated or len(ep.turns) >= ep.max_turns:
        ep.end("max_turns")
    elif cfg.max_episode_tokens is not None and ep.generated_tokens >= cfg.max_episode_tokens:
        ep.end("episode_tokens")


def _run_turns(policy: Policy, pool: Pool, seeds, cfg: RolloutConfig, options, progress):
    """Reset the pool and step the live episodes until every one has ended: in lockstep
    turns, or each on its own with `cfg.async_envs` (`arborl.rollout.scheduler`)."""
    episodes = _start_episodes(pool, seeds, cfg, options)
    begin = getattr(policy, "begin_rollout", None)
    if begin is not None:
        begin(episodes)
    if cfg.async_envs:
        run_async(policy, pool, episodes, cfg, _apply, progress)
        return episodes
    while live := [ep for ep in episodes if not ep.done]:
        decisions = policy.act(live, [pool[ep.index] for ep in live])
        if len(decisions) != len(live):
            raise RuntimeError(
                f"policy {policy.name!r} returned {len(decisions)} decisions for {len(live)} episodes"
            )
        actions = {}
        for ep, d in zip(live, decisions):
            if d.action is None:
                ep.end(d.end_reason or "prompt_tokens")
            else:
                actions[ep.index] = d.action
        results, _ = pool.step(actions) if actions else ([None] * len(pool), None)
        for ep, d in zip(live, decisions):
            if d.action is not None:
                _apply(ep, d, results[ep.index], cfg)
        if progress is not None:
            progress(sum(ep.done for ep in live))
    return episodes


def run_episodes_with_policy(
    policy: Policy,
    pool_or_env_id: Pool | PoolSet | str,
    seeds: Sequence[int] | None,
    cfg: RolloutConfig,
    split: str = "train",
    env_kwargs: dict[str, Any] | None = None,
    options: dict | None = None,
    progress: Callable[[int], None] | None = None,
    pool_mode: str = "inproc",
    pool_options: dict[str, Any] | None = None,
) -> RolloutResult:
    """Run `len(seeds) x cfg.group_size` episodes with any `Policy` (LM, random, oracle).

    `seeds` (one per task; None draws `cfg.num_tasks` from `cfg.seed`) and a pool of the
    right size, a run's `PoolSet` (its pool of that size, `split` and `env_kwargs`, left
    open) or an env id (a pool is then built with `split` and `env_kwargs`, in
    `pool_mode` with `pool_options` such as `timeout_s` and `max_env_errors`, and closed).
    `progress(n)` is called with the number of episodes that finished in each turn.
    Returns trajectories and stats; `batch` is None (see `run_rollout` for tokens).
    """
    start = time.perf_counter()
    seeds = list(seeds) if seeds is not None else draw_seeds(cfg.num_tasks, cfg.seed)
    if not seeds:
        raise ValueError("seeds is empty; pass at least one task seed (or seeds=None)")
    pool, env_id = _resolve_pool(
        pool_or_env_id, len(seeds) * cfg.group_size, split,
        with_turn_limit(env_kwargs or {}, cfg.max_turns), pool_mode, pool_options,
    )  # fmt: skip
    try:
        episodes = _run_turns(policy, pool, seeds, cfg, options, progress)
    finally:
        if isinstance(pool_or_env_id, str):
            pool.close()
    wall = time.perf_counter() - start
    meta = {"policy": policy.name, "split": split}
    trajectories = [to_trajectory(ep, env_id, meta) for ep in episodes]
    stats = episode_stats(episodes, wall)
    if isinstance(policy, LMPolicy):
        stats["prompt_truncations"] = float(policy.prompt_truncations)
        stats["generate_calls"] = float(policy.num_calls)
    return RolloutResult(batch=None, trajectories=trajectories, stats=stats, episodes=episodes)


def collect_episodes(
    policy: Policy,
    env_id: str | PoolSet,
    num_episodes: int,
    cfg: RolloutConfig,
    split: str = "train",
    seed: int = 0,
    chunk_episodes: int = 64,
    env_kwargs: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
    pool_mode: str = "inproc",
    pool_options: dict[str, Any] | None = None,
    on_chunk: Callable[[list[Trajectory]], None] | None = None,
) -> RolloutResult:
    """`num_episodes` episodes (`cfg.group_size` per task) in chunks of about
    `chunk_episodes`, so memory stays flat however many are asked for. Task seeds are drawn
    once from `seed`; the same `seed` gives the same tasks to every policy (paired evals).
    Envs run in `pool_mode`, in one `PoolSet` for the whole call (its worker processes
    start once, not per chunk), or in the pools of a `PoolSet` passed as `env_id` (see
    `run_episodes_with_policy`); `on_chunk(trajectories)` is
    called as each chunk finishes (e.g. to write them out incrementally).
    Returns trajectories, episodes and stats over all chunks (`batch` is None)."""
    g = cfg.group_size
    if num_episodes < 1 or num_episodes % g:
        raise ValueError(
            f"num_episodes={num_episodes} must be a positive multiple of group_size={g}"
        )
    start = time.perf_counter()
    seeds = draw_seeds(num_episodes // g, seed)
    per_chunk = max(1, chunk_episodes // g)
    parts = []
    with contextlib.ExitStack() as own:
        if isinstance(env_id, str):  # one set of pools (and worker processes) for all chunks
            env_id = own.enter_context(PoolSet(env_id, pool_mode, **(pool_options or {})))
        for c in range(0, len(seeds), per_chunk):
            # An LM policy keys each episode's sampling stream by its rollout count, so
            # chunks never repeat each other's samples.
            part = run_episodes_with_policy(
                policy, env_id, seeds[c : c + per_chunk], cfg, split, env_kwargs,
                progress=progress,
            )  # fmt: skip
            parts.append(part)
            if on_chunk is not None:
                on_chunk(part.trajectories)
    episodes = [ep for p in parts for ep in p.episodes]
    stats = episode_stats(episodes, time.perf_counter() - start)
    for key in ("prompt_truncations", "generate_calls"):
        if key in parts[0].stats:
            stats[key] = float(sum(p.stats[key] for p in parts))
    trajectories = [t for p in parts for t in p.trajectories]
    return RolloutResult(batch=None, trajectories=trajectories, stats=stats, episodes=episodes)


def run_rollout(
    backend: GenerationBackend,
    tokenizer: Any,
    pool_or_env_id: Pool | str,
    seeds: Sequence[int] | None,
    cfg: RolloutConfig,
    agent_cfg: AgentConfig | None = None,
    split: str = "train",
    env_kwargs: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> RolloutResult:
    """Roll out an LM and return its episodes as a training `Batch` in `cfg.view`.

    Step view: one row per turn; episode view: one token sequence per episode (see
    `arborl.rollout.batching` for the exact tensors). Trajectories and stats as in
    `run_episodes_with_policy`.
    """
    policy = make_lm_policy(backend, tokenizer, cfg, agent_cfg or AgentConfig())
    result = run_episodes_with_policy(
        policy, pool_or_env_id, seeds, cfg, split=split, env_kwargs=env_kwargs, progress=progress
    )
    result.batch = build_batch(result.episodes, cfg.view, tokenizer.pad_token_id)
    result.batch.info["temperature"] = cfg.temperature
    return result
