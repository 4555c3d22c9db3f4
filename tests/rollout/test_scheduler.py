"""The async schedule (`rollout.async_envs`): the same episodes as lockstep, token for token,
with a slow env holding only its own episode; per-row sampling seeds behind it."""

import threading
import time
from dataclasses import replace

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.envs import EnvPool, make_pool
from arborl.generation.base import SamplingParams
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import (
    OraclePolicy,
    RandomPolicy,
    RolloutConfig,
    run_episodes_with_policy,
    run_rollout,
)

MAZE = "arborl/Maze-v0"


def _episodes(res):
    return [[(t.action, t.reward, t.response_ids) for t in ep.turns] for ep in res.episodes]


@pytest.mark.parametrize(
    "preset, view", [("tiny-0.1m", "step"), ("tiny-0.1m", "episode"), ("tiny-1m", "step")]
)
def test_async_gives_the_lockstep_episodes_token_for_token(preset, view):
    model, tok = load_policy(preset, seed=0)
    model.eval()
    cfg = RolloutConfig(num_tasks=4, group_size=3, max_turns=5, max_new_tokens=10, view=view,
                        seed=11, max_episode_tokens=40)  # fmt: skip
    lock = run_rollout(HFBackend(model, tok, seed=0), tok, MAZE, None, cfg, AgentConfig())
    fast = replace(cfg, async_envs=True, async_max_batch=5, async_wait_s=0.0)
    runs = run_rollout(HFBackend(model, tok, seed=0), tok, MAZE, None, fast, AgentConfig())
    # The schedules batched differently (lockstep: all live rows; async: <= 5 a call) ...
    assert lock.stats["generate_calls"] <= 5 < runs.stats["generate_calls"]
    # ... yet every episode took the same actions, got the same rewards, sampled the same ids.
    assert _episodes(runs) == _episodes(lock)
    assert sum(len(ep.turns) for ep in lock.episodes) >= 4 * 3 * 2  # not a trivial rollout
    assert len({tuple(map(tuple, (t.response_ids for t in ep.turns))) for ep in lock.episodes}) > 1
    # Logprobs come from forward passes with other padding: equal up to float rounding.
    a, b = lock.batch["old_logp"], runs.batch["old_logp"]
    assert torch.equal(lock.batch["input_ids"], runs.batch["input_ids"])
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


def test_a_row_samples_the_same_alone_or_padded_among_others(policy):
    """What the equality above rests on: with row seeds, a prompt's tokens do not depend on
    its batch (other prompts, longer ones that left-pad it, its position)."""
    model, tok = policy
    backend = HFBackend(model, tok, seed=0)
    p = tok.encode("go up")
    others = [tok.encode("a much longer prompt that pads the first " * 3), tok.encode("x")]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, row_seeds=[42])
    alone = backend.generate([p], params)[0]
    mixed = backend.generate([others[0], p, others[1]], replace(params, row_seeds=[7, 42, 9]))[1]
    assert alone.token_ids == mixed.token_ids and len(alone.token_ids) > 1
    assert max(abs(x - y) for x, y in zip(alone.logprobs, mixed.logprobs)) < 1e-5
    other_seed = backend.generate([p], replace(params, row_seeds=[43]))[0]
    assert other_seed.token_ids != alone.token_ids  # the seed is what picks the sample
    with pytest.raises(ValueError, match="row_seeds has 2 seeds for 1 prompts"):
        backend.generate([p], replace(params, row_seeds=[1, 2]))


class _TimedEnv:
    """Never ends before its turn limit; records when each step ends; env 0 sleeps."""

    max_turns, instruction, task = 4, "wait", None

    def __init__(self, index: int, log: dict, slow_s: float) -> None:
        self.index, self.log, self.slow_s = index, log, slow_s

    def reset(self, seed=None, options=None):
        return "ready", {"task_id": f"t{seed}", "available_actions": ["wait"]}

    def step(self, action):
        if self.index == 0:
            time.sleep(self.slow_s)
        self.log.setdefault(self.index, []).append(time.monotonic())
        return "ok", 0.0, False, False, {"available_actions": ["wait"]}

    def close(self):
        pass


@pytest.mark.parametrize("async_envs", [False, True])
def test_a_slow_env_holds_only_its_own_episode(async_envs):
    log: dict[int, list[float]] = {}
    counter = iter(range(4))
    pool = EnvPool(lambda: _TimedEnv(next(counter), log, slow_s=0.3), 4)
    cfg = RolloutConfig(num_tasks=4, group_size=1, seed=0, async_envs=async_envs)
    res = run_episodes_with_policy(RandomPolicy(seed=1), pool, [1, 2, 3, 4], cfg)
    assert all(len(ep.turns) == 4 for ep in res.episodes)
    fast_done = max(log[i][-1] for i in (1, 2, 3))
    if async_envs:  # the fast episodes ended before the slow one's second step
        assert fast_done < log[0][1]
    else:  # lockstep: every fast step waited for the slow step of the turn before
        assert fast_done > log[0][2]


def test_async_over_subprocess_workers_matches_inproc_lockstep():
    """Remote pools take steps and proxy calls (the oracle's) from several threads; calls
    that share a worker wait for each other."""
    cfg = RolloutConfig(num_tasks=3, group_size=2, seed=4, max_turns=6)
    ref = run_episodes_with_policy(OraclePolicy(), MAZE, None, cfg)
    pool = make_pool(MAZE, 6, "subprocess", num_workers=2)
    try:
        got = run_episodes_with_policy(OraclePolicy(), pool, None, replace(cfg, async_envs=True))
    finally:
        pool.close()
    assert [[s.action for s in t.steps] for t in got.trajectories] == [
        [s.action for s in t.steps] for t in ref.trajectories
    ]
    assert [t.total_return for t in got.trajectories] == [t.total_return for t in ref.trajectories]


def test_remote_pool_steps_from_threads_as_in_one_call():
    pools = [make_pool(MAZE, 4, "subprocess", num_workers=2) for _ in range(2)]
    try:
        for p in pools:
            p.reset([5, 6], group_size=2)
        want, _ = pools[0].step({i: "up" for i in range(4)})
        got: dict[int, object] = {}

        def one(i: int) -> None:
            got[i] = pools[1].step({i: "up"})[0][i]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [got[i] for i in range(4)] == want and pools[1].num_env_errors == 0
    finally:
        for p in pools:
            p.close()


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"async_envs": "yes"}, "rollout.async_envs='yes' must be true or false"),
        ({"async_max_batch": 0}, "rollout.async_max_batch=0 must be an int >= 1"),
        ({"async_wait_s": -1}, "rollout.async_wait_s=-1 must be a number of seconds"),
    ],
)
def test_async_config_errors_name_the_field(kw, words):
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        RolloutConfig(**kw)
