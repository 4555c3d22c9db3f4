"""The async rollout schedule (`rollout.async_envs`): episodes that never wait for each other.

The lockstep loop (`loop._run_turns`) generates for every live episode, then steps every
env, so each turn lasts as long as its slowest env step. Here each episode moves on its
own: a thread pool runs one `pool.step({i: action})` per episode in flight, and the main
thread generates, whenever episodes are ready, for up to `async_max_batch` of them at
once, after waiting at most `async_wait_s` for more to become ready. Generation and env
steps overlap, and an episode whose step returned is queued for its next generation at
once, whatever the other episodes are doing.

Same results as lockstep: a turn's sampling depends only on its own episode (each
episode-turn has its own seeded stream, `LMPolicy.begin_rollout`), the episode's prompt
only on its own history, and the env only on its own actions. What changes with the
schedule is which episodes share a generate call, hence the padding around a prompt; the
test (tests/rollout/test_scheduler.py) checks that this leaves actions and rewards as they
are on the built-in envs and tiny models.

The pool must accept `step` calls from several threads for different envs: every pool of
`arborl.envs.make_pool` does (an in-process env runs in the calling thread; a remote pool
serialises the calls that share a worker process or actor, see `arborl.envs.remote.base`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from arborl.envs import Pool
from arborl.rollout.config import RolloutConfig
from arborl.rollout.episode import EpisodeState
from arborl.rollout.policies import Decision, Policy

MAX_ENV_THREADS = 256
"""Most env steps in flight at once (one thread each; they mostly wait on I/O or sleep)."""

Apply = Callable[[EpisodeState, Decision, Any, RolloutConfig], None]


def _step_one(pool: Pool, index: int, action: str) -> Any:
    results, _ = pool.step({index: action})
    return results[index]


def run_async(
    policy: Policy,
    pool: Pool,
    episodes: list[EpisodeState],
    cfg: RolloutConfig,
    apply: Apply,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Run `episodes` (reset already) to their ends; `apply(ep, decision, result, cfg)`
    records a stepped turn, as in the lockstep loop. `progress(n)`: n episodes just ended."""
    ready = deque(ep for ep in episodes if not ep.done)
    in_flight: dict[Future, tuple[EpisodeState, Decision]] = {}

    def harvest(futures: set[Future]) -> None:
        ended = 0
        for f in sorted(futures, key=lambda f: in_flight[f][0].index):
            ep, d = in_flight.pop(f)
            apply(ep, d, f.result(), cfg)  # re-raises an env-pool failure here
            if ep.done:
                ended += 1
            else:
                ready.append(ep)
        if progress is not None and ended:
            progress(ended)

    num_threads = max(1, min(len(pool), MAX_ENV_THREADS))
    with ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="arborl-env") as ex:
        while ready or in_flight:
            if not ready:  # nothing to generate for: wait for the first env step back
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                harvest(done)
            deadline = time.monotonic() + cfg.async_wait_s
            while in_flight and len(ready) < cfg.async_max_batch:  # a little wait fills a batch
                left = deadline - time.monotonic()
                done, _ = wait(in_flight, timeout=max(left, 0), return_when=FIRST_COMPLETED)
                if not done:
                    break
                harvest(done)
            batch = [ready.popleft() for _ in range(min(len(ready), cfg.async_max_batch))]
            if not batch:
                continue
            decisions = policy.act(batch, [pool[ep.index] for ep in batch])
            if len(decisions) != len(batch):
                raise RuntimeError(
                    f"policy {policy.name!r} returned {len(decisions)} decisions for "
                    f"{len(batch)} episodes"
                )
            ended = 0
            for ep, d in zip(batch, decisions):
                if d.action is None:
                    ep.end(d.end_reason or "prompt_tokens")
                    ended += 1
                else:
                    in_flight[ex.submit(_step_one, pool, ep.index, d.action)] = (ep, d)
            if progress is not None and ended:
                progress(ended)
